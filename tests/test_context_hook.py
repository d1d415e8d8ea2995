"""The context hooks (issue 45 item 3), through the real CLI with real payloads on stdin:
`ctxdb capture claude-code install` adds the SessionStart pack (CTXDB_CLAUDE_CODE_CONTEXT,
matcher startup|resume|clear|compact) and the UserPromptSubmit lookup (CTXDB_CLAUDE_CODE_LOOKUP),
`uninstall` removes them; Claude Code's commands print the project's pack, or only the prompt's
strong hits, as `additionalContext` within the 10,000-character limit, built in the hook or by a
running `ctxdb serve` (`--url`); `ctxdb capture gemini install` adds Gemini CLI's SessionStart
pack (its project hash as the scope) and `uninstall` removes it. Component failures (stated as
such in each test): with Elasticsearch refusing, the pack still comes from Delta and the lookup
answers `{}`; with the memory unreadable, a bad token, or a bound too short, `{}` and exit 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import delete_prefix_indices
from test_context_pack import BOB_WORD, build

from ctxdb.capture.claude_code.context_hook import MATCHER
from ctxdb.capture.gemini.session import project_hash
from ctxdb.index.client import make_client
from ctxdb.settings import Settings

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
SHOP = "/home/ann/src/shop"
PAYLOAD = {"hook_event_name": "SessionStart", "source": "startup", "cwd": SHOP}
PROMPT = {"hook_event_name": "UserPromptSubmit", "cwd": SHOP, "session_id": "s9"}
GEMINI_SESSION = Path(__file__).parent / "data" / "gemini"
GEMINI_SESSION /= "session-2026-01-16T11-01-file-ops-37b7abef.json"
NOTES = "/home/ann/src/notes"
"""The folder the Gemini CLI session is given as its project (its projectHash rewritten)."""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ctxdb(env: dict[str, str], *args: str) -> str:
    """A ctxdb command that must succeed; its stdout."""
    done = subprocess.run([CTXDB, *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def gemini_session(root: Path) -> Path:
    """The real Gemini CLI session, its projectHash that of NOTES."""
    data = json.loads(GEMINI_SESSION.read_text())
    path = root / "gemini" / GEMINI_SESSION.name
    path.parent.mkdir()
    path.write_text(json.dumps({**data, "projectHash": project_hash(NOTES)}))
    return path


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory, es_base_settings: Settings
) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A memory built by the pipeline (Ann's and Bob's turns, a Gemini CLI session of Ann's),
    embedded and indexed by `ctxdb index sync` (the configured embedder, as the hook's query
    embedder), and both Claude Code context hooks installed for Ann."""
    root = tmp_path_factory.mktemp("hook")
    build(root)
    prefix = f"t{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "CTXDB_HOME": str(root), "CTXDB_ELASTICSEARCH_INDEX_PREFIX": prefix}
    env |= {"CTXDB_CLAUDE_CODE_USER_ID": "ann", "CTXDB_CLAUDE_CODE_TENANT": "acme"}
    ctxdb(env, "import", "gemini", str(gemini_session(root)))
    ctxdb(env, "land")
    ctxdb(env, "derive")
    ctxdb(env, "index", "sync")
    settings = es_base_settings.replace(home=root, elasticsearch={"index_prefix": prefix})
    project = root / "project"
    project.mkdir()
    env |= {"CTXDB_CLAUDE_CODE_CONTEXT": "true", "CTXDB_CLAUDE_CODE_LOOKUP": "true"}
    # the installed bounds at their most, so a loaded machine's cold start never decides what
    # these tests see; the bound itself is tested with --timeout 0.001 below
    env |= {"CTXDB_CLAUDE_CODE_CONTEXT_TIMEOUT_S": "10", "CTXDB_CLAUDE_CODE_LOOKUP_TIMEOUT_S": "10"}
    done = subprocess.run(
        [CTXDB, "capture", "claude-code", "install", "--project", str(project)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "set the URL" in done.stderr  # the lookup without a server is slow: install says so
    yield root, project, env
    with make_client(settings) as client:
        delete_prefix_indices(client, prefix)


def groups(project: Path, event: str) -> list[dict]:
    return json.loads((project / ".claude" / "settings.local.json").read_text())["hooks"].get(
        event, []
    )


def context_command(project: Path, event: str) -> str:
    """The installed command of the context hook for `event`."""
    found = [
        entry["command"]
        for group in groups(project, event)
        for entry in group["hooks"]
        if "capture claude-code context" in entry["command"]
    ]
    assert len(found) == 1, found
    return found[0]


def hook(command: list[str] | str, env: dict[str, str], payload=PAYLOAD) -> dict:
    """Run a hook as its host does (the payload on stdin); it must exit 0; its JSON answer."""
    done = subprocess.run(
        command,
        input=json.dumps(payload),
        env=env,
        capture_output=True,
        text=True,
        shell=isinstance(command, str),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def clean_env() -> dict[str, str]:
    """The host's environment: the hook command carries the memory's settings itself."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CTXDB_")}


def context_of(answer: dict, event: str) -> str:
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    return answer["hookSpecificOutput"]["additionalContext"]


@pytest.mark.es
@pytest.mark.model
def test_install_adds_a_session_start_hook_that_prints_the_projects_pack(installed) -> None:
    root, project, env = installed
    assert [g.get("matcher") for g in groups(project, "SessionStart")] == [MATCHER]
    command = context_command(project, "SessionStart")
    context = context_of(hook(command, clean_env()), "SessionStart")
    assert "[interrupted] Migrate the orders table" in context and "src/cart.py" in context
    assert BOB_WORD not in context and len(context) <= 10_000
    assert "tomatoes" not in context  # another project's session
    elsewhere = hook(command, clean_env(), {**PAYLOAD, "cwd": "/nowhere/known"})
    assert elsewhere == {}  # a project with no memory gets nothing


@pytest.mark.es
@pytest.mark.model
def test_session_start_in_the_hook_tells_the_projects_snapshot_while_it_is_current(
    installed,
) -> None:
    """Built in the hook, the pack writes the project's snapshot; the next session is told from
    it (an item changed in the file shows), and once a table it read moved on (its recorded
    version no longer the table's) it is rebuilt from Delta."""
    root, project, env = installed
    command = context_command(project, "SessionStart")
    first = context_of(hook(command, clean_env()), "SessionStart")
    [path] = (root / "packs").glob("*/*.json")
    data = json.loads(path.read_text())
    assert data["project"] == SHOP and data["user_id"] == "ann"
    marked = [{**c, "text": c["text"] + " SNAPSHOT-MARK"} for c in data["candidates"]]
    path.write_text(json.dumps({**data, "candidates": marked}))
    told = context_of(hook(command, clean_env()), "SessionStart")
    assert "SNAPSHOT-MARK" in told
    stale = {**data, "candidates": marked, "versions": {**data["versions"], "turn_logs": -1}}
    path.write_text(json.dumps(stale))
    again = context_of(hook(command, clean_env()), "SessionStart")
    assert "SNAPSHOT-MARK" not in again
    assert again.split("\n", 1)[1] == first.split("\n", 1)[1]  # the header holds the time
    assert json.loads(path.read_text())["versions"] == data["versions"]


@pytest.mark.es
@pytest.mark.model
def test_session_start_builds_the_pack_where_snapshots_cannot_be_written(installed) -> None:
    """A hook that can read the memory but not write `<storage>/packs` (here not a folder)
    answers with the pack built from Delta, not with nothing."""
    root, project, env = installed
    command = context_command(project, "SessionStart")
    packs = root / "packs"
    kept = root / "packs-kept"
    packs.rename(kept)
    try:
        packs.write_text("not a folder")
        context = context_of(hook(command, clean_env()), "SessionStart")
        assert "[interrupted] Migrate the orders table" in context
    finally:
        packs.unlink()
        kept.rename(packs)


@pytest.mark.es
@pytest.mark.model
def test_the_prompt_lookup_adds_only_strong_hits_of_the_project(installed) -> None:
    """UserPromptSubmit: a prompt about an earlier turn gets that turn (with its ref) and no
    session list; a prompt nothing in memory matches, or an empty one, gets `{}`."""
    root, project, env = installed
    command = context_command(project, "UserPromptSubmit")
    assert "--timeout 10.0" in command and "--budget 600" in command
    prompt = {**PROMPT, "prompt": "the cart total rounding bug is back"}
    context = context_of(hook(command, clean_env(), prompt), "UserPromptSubmit")
    assert "## Earlier turns related to the query" in context
    assert "conv:turn:conv_shop-1.t1" in context and "Recent sessions" not in context
    assert BOB_WORD not in context and len(context) <= 10_000
    unrelated = {**PROMPT, "prompt": "configure the kubernetes helm chart ingress annotations"}
    assert hook(command, clean_env(), unrelated) == {}
    assert hook(command, clean_env(), {**PROMPT, "prompt": "  "}) == {}


@pytest.mark.es
@pytest.mark.model
def test_both_hooks_ask_a_running_server_first(installed) -> None:
    """With `--url` the hooks take the pack and the lookup from a running `ctxdb serve`, the
    same answers as built in the hook; when nothing listens there they build it themselves."""
    root, project, env = installed
    port = closed_port()
    url = f" --url http://127.0.0.1:{port}"
    start, lookup = (
        context_command(project, "SessionStart"),
        context_command(project, "UserPromptSubmit"),
    )
    prompt = {**PROMPT, "prompt": "the cart total rounding bug is back"}
    here = context_of(hook(start + url, clean_env()), "SessionStart")
    assert "src/cart.py" in here  # nothing listens: built in the hook
    server = subprocess.Popen(
        [CTXDB, "serve", "--port", str(port)],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        served = context_of(hook(start + url, clean_env()), "SessionStart")
        assert served.split("\n", 1)[1] == here.split("\n", 1)[1]  # the header holds the time
        hits = context_of(hook(lookup + url, clean_env(), prompt), "UserPromptSubmit")
        assert "conv:turn:conv_shop-1.t1" in hits and "Recent sessions" not in hits
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.es
@pytest.mark.model
def test_the_hooks_answer_empty_when_memory_fails_or_is_late(installed) -> None:
    """Component failures, made real: Elasticsearch refusing (a closed port), an unreadable
    Delta root, a missing token file, and a bound shorter than any start."""
    root, project, env = installed
    token = root / "auth" / "claude-code-mcp.token"
    base = [CTXDB, "capture", "claude-code", "context", "--timeout", "10"]
    base += ["--token-file", str(token)]
    no_es = {**env, "ELASTICSEARCH_URL": f"http://127.0.0.1:{closed_port()}"}
    assert "src/cart.py" in context_of(hook(base, no_es), "SessionStart")
    prompt = {**PROMPT, "prompt": "the cart total rounding bug is back"}
    assert hook(base, no_es, prompt) == {}
    assert hook(base, {**env, "CTXDB_STORAGE_ROOT": "/dev/null"}) == {}
    began = time.monotonic()
    assert hook([*base, "--timeout", "0.001"], env) == {}
    assert hook([*base, "--timeout", "0.001"], env, prompt) == {}
    assert hook([*base[:-1], str(root / "missing.token")], env) == {}
    assert time.monotonic() - began < 60  # never a hang (not a latency assertion)


def hook_with_stdin_open(command: str, data: str) -> dict:
    """Run a hook whose host writes `data` and keeps stdin open (never closes the pipe): it
    must exit 0 by itself; its JSON answer."""
    process = subprocess.Popen(
        command,
        shell=True,
        env=clean_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(data)
        process.stdin.flush()
        assert process.wait(timeout=120) == 0  # a guard against a hang, not a latency bound
        return json.loads(process.stdout.read())
    finally:
        process.kill()
        process.stdin.close()
        process.stdout.close()


@pytest.mark.es
@pytest.mark.model
def test_a_host_that_keeps_stdin_open_is_answered_within_the_bound(installed) -> None:
    """The payload is read within the hook's bound: a whole JSON object on a stdin kept open
    gets the pack; half of one (the rest never comes) gets `{}` once the bound is over."""
    root, project, env = installed
    command = context_command(project, "SessionStart")
    whole = hook_with_stdin_open(command, json.dumps(PAYLOAD))
    assert "src/cart.py" in context_of(whole, "SessionStart")
    short = command.replace("--timeout 10.0", "--timeout 2")
    assert short != command
    assert hook_with_stdin_open(short, json.dumps(PAYLOAD)[:20]) == {}
    assert hook_with_stdin_open(short, "") == {}


@pytest.mark.es
@pytest.mark.model
def test_hostile_payloads_get_a_clear_empty_answer(installed, tmp_path: Path) -> None:
    """Odd `cwd` values through the hook process (a symlink loop, a deleted folder, undecodable
    bytes, a 100,000-character path, not a string) and payloads that are not JSON objects: each
    answer is `{}` and exit 0, for both hooks and Gemini CLI's."""
    root, project, env = installed
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    gone = tmp_path / "gone"
    gone.mkdir()
    gone.rmdir()
    commands = [context_command(project, e) for e in ("SessionStart", "UserPromptSubmit")]
    gemini = commands[0].replace("capture claude-code context", "capture gemini context")
    odd = [str(loop / "sub"), str(gone), "/home/ann/\udcff\udcfe", "/x" * 50_000, 42]
    for command in [*commands, gemini]:
        for cwd in odd:
            for event in ("SessionStart", "UserPromptSubmit"):
                payload = {"hook_event_name": event, "cwd": cwd, "prompt": "cart total"}
                assert hook(command, clean_env(), payload) == {}, (command, cwd)
        for raw in ("not json", "[1, 2]", ""):
            done = subprocess.run(
                command, input=raw, env=clean_env(), capture_output=True, text=True, shell=True
            )
            assert done.returncode == 0 and json.loads(done.stdout) == {}, raw


@pytest.mark.es
@pytest.mark.model
def test_a_project_excluded_from_capture_is_told_nothing(installed) -> None:
    """A project opted out of capture (`CTXDB_CLAUDE_CODE_EXCLUDE`, kept in the installed
    hook.json) gets no pack and no lookup, although its memory holds sessions."""
    root, project, env = installed
    start, lookup = (
        context_command(project, "SessionStart"),
        context_command(project, "UserPromptSubmit"),
    )
    prompt = {**PROMPT, "prompt": "the cart total rounding bug is back"}
    config = root / "capture" / "claude_code" / "hook.json"
    saved = config.read_text()
    try:
        config.write_text(json.dumps({**json.loads(saved), "exclude": ["/home/ann/src"]}))
        assert hook(start, clean_env()) == {}
        assert hook(lookup, clean_env(), prompt) == {}
    finally:
        config.write_text(saved)
    assert "src/cart.py" in context_of(hook(start, clean_env()), "SessionStart")


@pytest.mark.es
@pytest.mark.model
def test_gemini_install_adds_the_session_start_pack_and_uninstall_removes_it(
    installed, tmp_path: Path
) -> None:
    """Gemini CLI: install writes its settings (capture on AfterAgent and SessionEnd, the pack on
    SessionStart, the lookup on BeforeAgent, keeping the user's own hooks); the pack and the
    hits are those of the session folder's project hash; uninstall leaves the user's hooks
    alone."""
    root, _, env = installed
    folder = tmp_path / "gemini-project"
    settings_path = folder / ".gemini" / "settings.json"
    settings_path.parent.mkdir(parents=True)
    own = {"type": "command", "command": "echo mine"}
    settings_path.write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [own]}]}}))
    ctxdb(env, "capture", "gemini", "install", "--project", str(folder))
    hooks = json.loads(settings_path.read_text())["hooks"]
    assert set(hooks) == {"SessionStart", "AfterAgent", "SessionEnd", "BeforeAgent"}
    command = hooks["SessionStart"][1]["hooks"][0]["command"]
    assert "capture gemini context" in command and hooks["SessionStart"][0]["hooks"] == [own]
    answer = hook(command, clean_env(), {"hook_event_name": "SessionStart", "cwd": NOTES})
    context = context_of(answer, "SessionStart")
    assert f"project {project_hash(NOTES)}" in context and "show tools" in context
    assert "src/cart.py" not in context and BOB_WORD not in context
    assert hook(command, clean_env(), {"hook_event_name": "SessionStart", "cwd": SHOP}) == {}
    lookup = hooks["BeforeAgent"][0]["hooks"][0]["command"]
    asked = {"hook_event_name": "BeforeAgent", "cwd": NOTES}
    hits = context_of(
        hook(lookup, clean_env(), {**asked, "prompt": "create the hello.md file"}), "BeforeAgent"
    )
    assert "create hello.md file" in hits and "Recent sessions" not in hits
    assert hook(lookup, clean_env(), {**asked, "prompt": "the cart total rounding bug"}) == {}
    ctxdb(env, "capture", "gemini", "uninstall", "--project", str(folder))
    assert json.loads(settings_path.read_text()) == {"hooks": {"SessionStart": [{"hooks": [own]}]}}


@pytest.mark.es
@pytest.mark.model
def test_uninstall_removes_both_context_hooks_and_install_adds_them_only_when_asked(
    installed,
) -> None:
    root, project, env = installed
    path = project / ".claude" / "settings.local.json"
    ctxdb(env, "capture", "claude-code", "uninstall", "--project", str(project))
    assert not path.exists() or "capture claude-code context" not in path.read_text()
    off = {k: v for k, v in env.items() if not k.startswith("CTXDB_CLAUDE_CODE_LOOKUP")}
    done = subprocess.run(
        [CTXDB, "capture", "claude-code", "install", "--project", str(project)],
        env=off,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "CTXDB_CLAUDE_CODE_CONTEXT_URL" not in done.stderr
    assert "SessionStart" in json.loads(path.read_text())["hooks"]
    assert "capture claude-code context" not in json.dumps(groups(project, "UserPromptSubmit"))
    ctxdb(env, "capture", "claude-code", "uninstall", "--project", str(project))
