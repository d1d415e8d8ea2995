"""The memory viewer in a real headless Chromium (Debian's chromium + chromedriver, Selenium):
sign in, search with the explain breakdown, open a turn, download a file through the resolver,
and another user's turn URL gives the not-found page; a coding turn shows its steps and its
markdown rendered safely (issue 27 item 7). Screenshots are kept as test artifacts (and refresh
docs/images/ when CTXDB_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from conftest_components import BROWSER, without
from conftest_ports import free_port_pair
from conftest_search import APP, CODING_PROMPT, TENANT, SearchEnv, Turn, build_memory, drop_indices
from fastapi.testclient import TestClient
from headless_chromium import PRESENT, chromium

from ctxdb.auth.credentials import TokenStore
from ctxdb.index.client import make_client
from ctxdb.serve.http import create_app
from ctxdb.settings import Settings

STORED_TITLE = CODING_PROMPT[:80]  # the raw prompt's first 80 characters: never the title shown

DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"

pytestmark = [
    pytest.mark.es,
    pytest.mark.model,
    without(BROWSER, PRESENT),
]


def serve(app) -> Iterator[str]:
    """A real uvicorn server on a free loopback port serving `app`, until the caller is done."""
    port = free_port_pair()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def base_url(search_env: SearchEnv) -> Iterator[str]:
    """The API and the viewer over the shared search corpus."""
    yield from serve(
        create_app(search_env.settings, search_env.client, search_env.service.embedder)
    )


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(downloads: Path):
    prefs = {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    driver = chromium("1280,900", prefs)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def wait_for(predicate, timeout: float = 15.0):
    """Poll until the predicate holds (the page renders asynchronously: an element found in one
    poll may be replaced before it is read, which only means polling again)."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (NoSuchElementException, StaleElementReferenceException)
    wait = WebDriverWait(None, timeout, poll_frequency=0.1, ignored_exceptions=ignored)
    return wait.until(lambda _: predicate())


def screenshot(driver, shots: Path, name: str) -> None:
    path = shots / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 0
    if os.environ.get("CTXDB_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, DOCS_IMAGES / path.name)


def sign_in(driver, base_url: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base_url + "/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(base_url + "/")
    wait_for(lambda: driver.find_element(By.ID, "signin").is_displayed())
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "signin-button").click()


def test_the_page_is_static_and_self_contained(search_env: SearchEnv) -> None:
    http = TestClient(create_app(search_env.settings, search_env.client, load_model=False))
    page = http.get("/conversations/c-bob/turns/t1")
    assert page.status_code == 200 and "ctxdb memory" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # no external assets
    assert http.get("/static/viewer.js").headers["content-type"].startswith("text/javascript")
    assert http.get("/static/../http.py").status_code == 404
    assert http.get("/static/nope.js").status_code == 404
    assert '<link rel="icon" type="image/svg+xml" href="data:image/svg+xml;base64,' in page.text


def test_bad_token_is_refused(browser, base_url: str) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, base_url, "ctxdb_nope_nope")
    wait_for(lambda: browser.find_element(By.ID, "signin-error").text)
    assert "not accepted" in browser.find_element(By.ID, "signin-error").text
    assert not browser.find_element(By.ID, "app").is_displayed()


def test_sign_in_search_open_turn_and_download(
    browser, base_url: str, search_env: SearchEnv, downloads: Path, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, base_url, search_env.tokens["alice"])
    wait_for(lambda: "Spreadsheet trouble" in browser.find_element(By.ID, "conversations").text)
    assert "Bob payroll" not in browser.find_element(By.ID, "conversations").text

    wait_for(lambda: browser.find_element(By.ID, "who").text == "Signed in as alice")

    browser.find_element(By.ID, "query").send_keys("openpyxl formulas lost on save")
    browser.find_element(By.ID, "search-button").click()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#hits .hit"))
    first = browser.find_elements(By.CSS_SELECTOR, "#hits .hit")[0]
    assert "Spreadsheet trouble" in first.text
    assert not browser.find_element(By.ID, "f-explain").is_selected()  # explain is opt-in
    assert not browser.find_elements(By.CSS_SELECTOR, "#hits .explain")
    assert "prompt: My openpyxl workbook" in first.text and "user:" not in first.text
    screenshot(browser, shots, "viewer-search")
    browser.find_element(By.CSS_SELECTOR, "#search-form summary").click()
    browser.find_element(By.ID, "f-explain").click()
    browser.find_element(By.ID, "search-button").click()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#hits .hit .explain"))
    first = browser.find_elements(By.CSS_SELECTOR, "#hits .hit")[0]
    assert "semantic=" in first.find_element(By.CSS_SELECTOR, ".explain").text
    assert "brevity=" in first.find_element(By.CSS_SELECTOR, ".explain").text
    knobs = browser.find_element(By.ID, "f-knobs")  # any ranking knob, checked by the API
    knobs.send_keys("weight_lexical=0.5")
    browser.find_element(By.ID, "search-button").click()
    wait_for(lambda: "(w0.5)" in browser.find_element(By.CSS_SELECTOR, "#hits .explain").text)
    knobs.clear()
    knobs.send_keys("weight_lexcal=0.5")
    browser.find_element(By.ID, "search-button").click()
    wait_for(lambda: "unknown knob" in browser.find_element(By.ID, "search-status").text)
    assert "weight_lexical" in browser.find_element(By.ID, "search-status").text  # valid names
    knobs.clear()
    browser.find_element(By.ID, "search-button").click()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#hits .hit .explain"))
    first = browser.find_elements(By.CSS_SELECTOR, "#hits .hit")[0]

    first.find_element(By.CSS_SELECTOR, "a.hit-link").click()
    wait_for(lambda: browser.find_element(By.ID, "turn-view").is_displayed())
    assert "/conversations/c-sheets/turns/" in browser.current_url
    assert "openpyxl" in browser.find_element(By.ID, "messages").text
    screenshot(browser, shots, "viewer-turn")

    browser.get(base_url + "/conversations/c-sheets/turns/t1")
    wait_for(lambda: browser.find_element(By.ID, "turn-view").is_displayed())
    assert "budget.xlsx" in browser.find_element(By.ID, "attachments").text
    assert browser.find_element(By.ID, "attachments-section").is_displayed()
    assert not browser.find_element(By.ID, "files-section").is_displayed()  # t1 hosts no file
    browser.find_element(By.CSS_SELECTOR, "#attachments button.download").click()
    target = downloads / "budget.xlsx"
    wait_for(target.exists)
    assert target.read_bytes() == b"bytes of budget.xlsx for alice"


def test_timeline_and_another_users_turn(
    browser, base_url: str, search_env: SearchEnv, shots: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, base_url, search_env.tokens["alice"])
    wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())
    browser.get(base_url + "/conversations/c-k8s")
    wait_for(lambda: browser.find_element(By.ID, "conversation-view").is_displayed())
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline .turn-row")
    assert [r.text.split(" ")[0] for r in rows] == ["#1", "#2", "#3"]
    screenshot(browser, shots, "viewer-timeline")

    browser.get(base_url + "/conversations/c-bob/turns/t1")
    wait_for(lambda: browser.find_element(By.ID, "not-found").is_displayed())
    assert "salaries" not in browser.page_source
    screenshot(browser, shots, "viewer-not-found")


def test_the_pack_panel_shows_what_an_agent_is_told_for_a_project(
    browser, base_url: str, search_env: SearchEnv, shots: Path
) -> None:
    """Issue 45 item 5: the panel lists the user's projects and shows the real pack of the one
    chosen (GET /v1/context): its sessions with refs, nothing of another project or user."""
    from selenium.webdriver.common.by import By

    sign_in(browser, base_url, search_env.tokens["alice"])
    wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())
    browser.find_element(By.CSS_SELECTOR, "#pack-panel summary").click()
    options = "#pack-projects option"
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, options))
    listed = [o.get_attribute("value") for o in browser.find_elements(By.CSS_SELECTOR, options)]
    assert "ops" in listed and "helper" in listed
    browser.find_element(By.ID, "pack-project").send_keys("ops")
    browser.find_element(By.ID, "pack-button").click()
    wait_for(lambda: browser.find_element(By.ID, "pack-text").text)
    text = browser.find_element(By.ID, "pack-text").text
    assert text.startswith("# Memory from ctxdb: project ops")
    assert "Pod restarts" in text and "conv:conversation:c-k8s" in text
    assert "Spreadsheet trouble" not in text and "salaries" not in text
    assert "of 1500 tokens" in browser.find_element(By.ID, "pack-status").text
    screenshot(browser, shots, "viewer-pack")


def test_a_coding_turn_shows_steps_and_safe_markdown(
    browser, base_url: str, search_env: SearchEnv, shots: Path
) -> None:
    """Issue 27 item 7, each point checked in the page: steps shown, markdown rendered with a
    <script> in the text shown as text, no empty headings, the title cut at a word boundary, no
    internal labels, explain off by default, the user named in the header, a favicon."""
    from selenium.webdriver.common.by import By

    sign_in(browser, base_url, search_env.tokens["dana"])
    wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())
    assert browser.find_element(By.ID, "who").text == "Signed in as dana"
    assert not browser.find_element(By.ID, "f-explain").is_selected()
    icon = browser.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
    assert icon.startswith("data:image/svg+xml;base64,")

    browser.get(f"{base_url}/conversations/c-code/turns/t1")
    wait_for(lambda: browser.find_element(By.ID, "turn-view").is_displayed())
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#steps li"))

    steps = browser.find_elements(By.CSS_SELECTOR, "#steps li")
    assert [s.text.split("\n")[0] for s in steps] == [
        "Read tests/test_payments.py",
        "Bash call pytest -q tests/test_payments.py",
        "Bash result error FAILED tests/test_payments.py::test_refund",
        "Thinking The model API changed in v2.",
    ]
    steps[2].find_element(By.TAG_NAME, "summary").click()
    assert "AttributeError: parse_obj" in steps[2].find_element(By.TAG_NAME, "pre").text

    answer = browser.find_element(By.CSS_SELECTOR, "#messages .message.assistant .markdown")
    assert answer.find_element(By.TAG_NAME, "strong").text == "pydantic v2"
    assert answer.find_element(By.TAG_NAME, "em").text == "gone"
    assert [li.text for li in answer.find_elements(By.CSS_SELECTOR, "ol li")] == [
        "Replace Model.parse_obj(data) with Model.model_validate(data)",
        "Run the tests again",
    ]
    assert answer.find_element(By.TAG_NAME, "pre").text == "payment = Payment.model_validate(data)"
    links = answer.find_elements(By.TAG_NAME, "a")
    assert [a.get_attribute("href") for a in links] == [
        "https://docs.pydantic.dev/latest/migration/"
    ]
    assert "[this](javascript:alert(1))" in answer.text
    assert "<script>window.pwned = 1</script> <b>stays text</b>" in answer.text
    assert not browser.find_elements(By.CSS_SELECTOR, "#turn-view script, #turn-view b")
    assert browser.execute_script("return window.pwned") is None

    headings = [
        h.text for h in browser.find_elements(By.CSS_SELECTOR, "#turn-view h2") if h.is_displayed()
    ]
    assert headings == ["Steps (4)"]  # no empty "Attachments" or "Files"

    title = browser.find_element(By.ID, "turn-title").text
    shown = title.split(" · turn ")[0]
    assert shown.endswith("…") and len(shown) <= 60
    cut = shown[:-1]
    assert CODING_PROMPT.startswith(cut) and CODING_PROMPT[len(cut)] == " "  # a word boundary
    aside = browser.find_element(By.ID, "conversations").text
    assert STORED_TITLE not in aside and f"{cut}…" in aside

    page = browser.find_element(By.TAG_NAME, "body").text
    assert "event." not in page and "user.prompt" not in page
    meta = browser.find_element(By.CSS_SELECTOR, "#messages .message.user .meta").text
    assert meta.startswith("dana · ")
    screenshot(browser, shots, "viewer-turn-steps")


@pytest.mark.parametrize("address", ["/conversations/%E0%A4%A", "/conversations/c-k8s/turns/%zz"])
@pytest.mark.parametrize("signed_in", [True, False])
def test_issue_24_finding_8_a_malformed_escape_in_the_address_is_an_error_not_a_blank_page(
    browser, base_url: str, search_env: SearchEnv, address: str, signed_in: bool
) -> None:
    from selenium.webdriver.common.by import By

    if signed_in:
        sign_in(browser, base_url, search_env.tokens["alice"])
        wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())
    else:
        browser.execute_script("sessionStorage.clear()")
    browser.get(base_url + address)
    wait_for(lambda: browser.find_element(By.ID, "page-error").is_displayed())
    assert browser.find_element(By.ID, "page-error-title").text == "Malformed address"
    text = browser.find_element(By.ID, "page-error-text").text
    assert text.startswith(f"The address {address} has a malformed %-escape"), text
    assert not browser.find_element(By.ID, "app").is_displayed()
    assert not browser.find_element(By.ID, "signin").is_displayed()


def test_issue_24_finding_8_a_malformed_escape_in_query_or_hash_is_ignored(
    browser, base_url: str, search_env: SearchEnv
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, base_url, search_env.tokens["alice"])
    wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())
    browser.get(base_url + "/conversations/c-k8s?from=%zz#%E0%A4%A")
    wait_for(lambda: browser.find_element(By.ID, "conversation-view").is_displayed())
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline .turn-row")) == 3
    assert not browser.find_element(By.ID, "page-error").is_displayed()


LONG_TURNS = 57
GEMINI_PROJECT = "5b959dae" + "0" * 56  # a Gemini CLI agent: the SHA-256 of a project folder
RENDERED_ANSWER = """Here is the setup:
```json:package.json
{"name": "demo"}
```
```js {1,3}
const a = 1;
```
```python title="x.py"
print("x")
```
   # install
# heading\u2028with a line separator

| model | score |
|---|---:|
| a | 1 |

3. Install
   - uv
   - ruff
4. Configure
   1. pyproject

```text
```"""


def cancelled_events(conversation: str, turn: str, prompt: str) -> list[dict]:
    """A turn the person stopped before any answer: started, prompted, closed as cancelled."""
    body = [
        ("turn.started", {}),
        ("user.submission", {"text": prompt, "event_type": "prompt"}),
        ("turn.closed", {"status": "cancelled", "error_type": "interrupted"}),
    ]
    return [
        {
            "event_id": f"{conversation}-{turn}-{n}",
            "schema_version": 1,
            "type": type_,
            "occurred_at": f"2026-01-05T10:00:0{n}Z",
            "tenant": TENANT,
            "app": APP,
            "agent": GEMINI_PROJECT,
            "adapter": "minimal",
            "user_id": "erin",
            "conversation_id": conversation,
            "turn_id": turn,
            "payload": payload,
        }
        for n, (type_, payload) in enumerate(body)
    ]


FRANK_CONVERSATIONS = 205
"""Frank's conversations: the viewer lists 200 at a time."""


@pytest.fixture(scope="module")
def erin_url(tmp_path_factory: pytest.TempPathFactory, es_base_settings: Settings):
    """A memory of its own for erin: a 57-turn conversation whose first answer holds the
    markdown that once froze the page, and a Gemini conversation whose turn was cancelled; and
    frank's FRANK_CONVERSATIONS one-turn conversations (more than one page of the list)."""
    prefix = f"t-viewer-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(
        home=tmp_path_factory.mktemp("viewer-home"), elasticsearch={"index_prefix": prefix}
    )
    corpus = [
        Turn(
            "erin",
            "c-long",
            f"t{n:02d}",
            3.0 - n / 100,
            f"Step {n} of the migration",
            RENDERED_ANSWER if n == 1 else f"Done with step {n}.",
        )
        for n in range(1, LONG_TURNS + 1)
    ]
    corpus += [
        Turn("frank", f"c-frank-{n:03d}", "t1", 2.0 - n / 1000, f"Frank question {n}", "Yes.")
        for n in range(FRANK_CONVERSATIONS)
    ]
    landing = Path(settings.landing_uri)
    landing.mkdir(parents=True, exist_ok=True)
    events = cancelled_events("c-stop", "t1", "Refactor the **billing** module")
    (landing / "cancelled.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    build_memory(settings, corpus, embed=False)
    tokens = TokenStore(settings.tokens_path)
    token, other = (tokens.issue(user, tenant=TENANT) for user in ("erin", "frank"))
    client = make_client(settings)
    try:
        for url in serve(create_app(settings, client, load_model=False)):
            yield url, token, other
    finally:
        drop_indices(client, prefix)
        client.close()


def test_issue_40_item_8_every_turn_interrupted_turns_and_markdown_in_chromium(
    browser, erin_url, shots: Path
) -> None:
    """All 57 turns listed (not 50); the answer with fences carrying info strings, an indented
    heading and a U+2028 renders (issue 41 finding 1) with its table, nested numbered list and
    empty code block; the cancelled Gemini turn is marked and has no empty answer box."""
    from selenium.webdriver.common.by import By

    url, token, _ = erin_url
    sign_in(browser, url, token)
    wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())
    aside = browser.find_element(By.ID, "conversations").text
    assert "Gemini project 5b959dae" in aside and GEMINI_PROJECT not in aside
    assert "Refactor the billing module" in aside and "**" not in aside

    browser.get(f"{url}/conversations/c-long")
    wait_for(
        lambda: len(browser.find_elements(By.CSS_SELECTOR, "#timeline .turn-row")) == LONG_TURNS
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline .turn-row")
    assert [r.text.split(" ")[0] for r in rows] == [f"#{n}" for n in range(1, LONG_TURNS + 1)]
    assert "57 turns" in browser.find_element(By.ID, "conversation-meta").text
    assert "```" not in rows[0].text and "|" not in rows[0].text  # snippets as plain words

    browser.get(f"{url}/conversations/c-long/turns/t01")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#messages .message.assistant"))
    answer = browser.find_element(By.CSS_SELECTOR, "#messages .message.assistant .markdown")
    codes = answer.find_elements(By.CSS_SELECTOR, "pre:not(.empty) code")
    assert [c.get_attribute("data-lang") for c in codes] == ["json", "js", "python"]
    headings = answer.find_elements(By.CSS_SELECTOR, "h3")
    assert [h.get_attribute("textContent") for h in headings] == [
        "install",
        "heading\u2028with a line separator",
    ]
    cells = [c.text for c in answer.find_elements(By.CSS_SELECTOR, "table td")]
    assert cells == ["a", "1"]
    outer = answer.find_element(By.CSS_SELECTOR, ".markdown > ol")
    assert outer.get_attribute("start") == "3"
    assert [li.text for li in outer.find_elements(By.CSS_SELECTOR, ":scope > li > ul > li")] == [
        "uv",
        "ruff",
    ]
    assert len(outer.find_elements(By.CSS_SELECTOR, ":scope > li > ol > li")) == 1
    empty = answer.find_element(By.CSS_SELECTOR, "pre.empty")
    assert empty.find_element(By.TAG_NAME, "code").get_attribute("textContent") == ""
    label, background = browser.execute_script(
        "const s = getComputedStyle(arguments[0], '::before');"
        "return [s.content, getComputedStyle(arguments[0]).backgroundColor];",
        empty,
    )
    assert label == '"(empty code block)"'  # labelled by the stylesheet, not a bare dark bar
    assert background == "rgb(238, 240, 244)"
    screenshot(browser, shots, "viewer-markdown")

    browser.get(f"{url}/conversations/c-stop/turns/t1")
    wait_for(lambda: browser.find_element(By.ID, "turn-view").is_displayed())
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#turn-meta .badge"))
    assert browser.find_element(By.CSS_SELECTOR, "#turn-meta .badge").text == "interrupted"
    assert not browser.find_elements(By.CSS_SELECTOR, "#messages .message.assistant")
    assert browser.find_element(By.CSS_SELECTOR, "#messages .no-answer").text == (
        "Interrupted before an answer."
    )
    browser.get(f"{url}/conversations/c-stop")
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#timeline .turn-row .badge"))
    assert browser.find_element(By.CSS_SELECTOR, "#timeline .badge").text == "interrupted"
    screenshot(browser, shots, "viewer-interrupted")


def test_more_conversations_than_a_page_are_listed_a_page_at_a_time(browser, erin_url) -> None:
    """Frank's 205 conversations: the list shows the 200 most recently active, "More
    conversations" adds the other 5 (oldest last) and then hides."""
    from selenium.webdriver.common.by import By

    url, _, frank = erin_url
    sign_in(browser, url, frank)
    wait_for(lambda: browser.find_element(By.ID, "app").is_displayed())

    def listed() -> list[str]:
        return [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#conversations li a")]

    wait_for(lambda: len(listed()) == 200)
    more = browser.find_element(By.ID, "more-conversations")
    assert more.is_displayed() and listed()[0] == "Frank question 204"
    more.click()
    wait_for(lambda: len(listed()) == FRANK_CONVERSATIONS)
    expected = [f"Frank question {n}" for n in reversed(range(FRANK_CONVERSATIONS))]
    assert listed() == expected
    assert not more.is_displayed()


def test_a_conversations_turns_come_a_page_at_a_time(erin_url) -> None:
    """GET /v1/conversations/{id}/turns: pages of `limit` turns add up to every turn in order;
    another user's conversation is 404, a page past Elasticsearch's result window is 422."""
    import httpx

    url, token, frank = erin_url
    headers = {"Authorization": f"Bearer {token}"}
    seen = []
    for offset in range(0, LONG_TURNS, 20):
        page = httpx.get(
            f"{url}/v1/conversations/c-long/turns",
            params={"offset": offset, "limit": 20},
            headers=headers,
        ).json()
        assert page["total"] == LONG_TURNS and page["offset"] == offset
        seen += [(t["ordinal"], t["turn_id"], t["status"]) for t in page["turns"]]
    assert seen == [(n, f"t{n:02d}", "ok") for n in range(1, LONG_TURNS + 1)]
    stop = httpx.get(f"{url}/v1/conversations/c-stop/turns", headers=headers).json()
    assert [(t["status"], t["error_type"], t["answer"]) for t in stop["turns"]] == [
        ("cancelled", "interrupted", "")
    ]
    other = {"Authorization": f"Bearer {frank}"}
    assert httpx.get(f"{url}/v1/conversations/c-long/turns", headers=other).status_code == 404
    too_far = httpx.get(f"{url}/v1/conversations/c-long/turns?offset=9801", headers=headers)
    assert too_far.status_code == 422
