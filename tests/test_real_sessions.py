"""Real sessions are the acceptance test (issue 40): every real public session of tests/data
(Claude Code, Codex CLI and Gemini CLI, interrupted turns included; SOURCE.md in each folder)
goes through the README's own commands, each a real `ctxdb` process: the three import commands,
`ctxdb land`, `ctxdb derive` and `ctxdb jobs run memory_job`. Every command succeeds, and every
imported session is then searchable by what was said in it. Each folder's SOURCE.md names
exactly the files that are there."""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import anyio
import polars as pl
import pytest
from conftest_components import BROWSER, without
from conftest_search import drop_indices
from headless_chromium import PRESENT, chromium

from ctxdb.auth.credentials import TokenStore
from ctxdb.contract.identity import Principal
from ctxdb.index.client import make_client
from ctxdb.search import SearchRequest, SearchService
from ctxdb.serve.http import create_app
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA, TURN_LOGS, TURN_LOGS_SCHEMA

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import real_sessions  # noqa: E402

HOSTS = {"claude_code": "*.jsonl", "codex": "rollout-*.jsonl", "gemini": "session-*.json*"}
"""Each host's fixture folder and the session files in it (Claude Code: sub-agent files aside)."""


def sessions(host: str) -> list[Path]:
    """The real session files of one host's fixture folder."""
    found = sorted((real_sessions.DATA / host).rglob(HOSTS[host]))
    return [p for p in found if "subagents" not in p.parts]


def query_of(texts: list[str]) -> str:
    """A query from what the user said in a conversation: the first 12 words of its longest
    prompt (markup and punctuation left out)."""
    words = re.findall(r"\w+", max(texts, key=len))
    return " ".join(words[:12])


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_source_md_names_exactly_the_files_there(host: str) -> None:
    """Every session file has its row in the folder's SOURCE.md table, every row its file."""
    source = (real_sessions.DATA / host / "SOURCE.md").read_text()
    rows = [row.split("-...")[0] for row in re.findall(r"^\| `([^`]+)`", source, re.MULTILINE)]
    files = [str(p.relative_to(real_sessions.DATA / host)) for p in sessions(host)]
    assert [f for f in files if not any(f.startswith(row) for row in rows)] == []
    assert [row for row in rows if not any(f.startswith(row) for f in files)] == []


@dataclass(frozen=True)
class RealMemory:
    """The memory the README's commands built from every real session, and their steps."""

    settings: Settings
    steps: list[real_sessions.Step]


@pytest.fixture(scope="module")
def real_memory(
    tmp_path_factory: pytest.TempPathFactory, es_base_settings: Settings
) -> Iterator[RealMemory]:
    """Built once per module through real `ctxdb` processes (its own home and index prefix)."""
    prefix = f"t-real-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(
        home=tmp_path_factory.mktemp("real-home"), elasticsearch={"index_prefix": prefix}
    )
    env = real_sessions.environment(settings.home, prefix, settings.elasticsearch.url)
    steps = real_sessions.build(env, tmp_path_factory.mktemp("real-cwd"))
    client = make_client(settings)
    try:
        yield RealMemory(settings, steps)
    finally:
        drop_indices(client, prefix)
        client.close()


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_memory_job_succeeds_on_every_real_session_and_each_is_searchable(
    real_memory: RealMemory, query_embedder
) -> None:
    settings, steps = real_memory.settings, real_memory.steps
    for step in steps:
        assert step.returncode == 0, f"ctxdb {' '.join(step.args)}:\n{step.output[-4000:]}"
    assert len(steps) == len(real_sessions.IMPORTS) + len(real_sessions.PIPELINE)
    for step, host in zip(steps, ("claude_code", "codex", "gemini"), strict=False):
        assert step.output.split()[0] == str(len(sessions(host))), step.output[-2000:]

    store = DeltaStore(settings.delta_uri)
    logs = store.read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert set(logs["adapter"]) == {"claude_code", "codex", "gemini_cli"}
    assert "cancelled" in set(logs["status"])  # the real interrupts are among them
    rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA).filter(pl.col("role") == "user")
    conversations = rows.partition_by("conversation_id", as_dict=True)
    assert len(conversations) >= sum(len(sessions(host)) for host in HOSTS)

    with make_client(settings) as client:
        service = SearchService(settings, client, query_embedder)
        missed = []
        for (conversation_id,), turns in conversations.items():
            first = turns.row(0, named=True)
            owner = Principal(user_id=first["user_id"], tenant=first["tenant"])
            query = query_of(turns["text"].to_list())
            request = SearchRequest(query=query, conversation_id=conversation_id, top_k=5)
            if not service.search(owner, request).hits:
                missed.append((conversation_id, query))
    assert not missed, f"imported sessions no search finds: {missed}"


@pytest.mark.es
@pytest.mark.slow
@without(BROWSER, PRESENT)
def test_every_hosts_interrupted_turn_shows_as_interrupted_in_chromium(
    real_memory: RealMemory,
) -> None:
    """Issue 40's target: a real interrupted turn of each host (Claude Code, Codex CLI, Gemini
    CLI) opened in the viewer in a real Chromium carries the "interrupted" badge."""
    from selenium.webdriver.common.by import By
    from test_viewer import serve, sign_in, wait_for

    settings = real_memory.settings
    assert all(step.returncode == 0 for step in real_memory.steps)
    logs = DeltaStore(settings.delta_uri).read(TURN_LOGS, TURN_LOGS_SCHEMA)
    cancelled = logs.filter(pl.col("status") == "cancelled").sort("conversation_id", "turn_id")
    one_per_host = cancelled.unique("adapter", keep="first", maintain_order=True)
    assert set(one_per_host["adapter"]) == {"claude_code", "codex", "gemini_cli"}
    owner = one_per_host.row(0, named=True)
    token = TokenStore(settings.tokens_path).issue(owner["user_id"], tenant=owner["tenant"])
    driver = chromium("1280,900", {})
    client = make_client(settings)
    try:
        for url in serve(create_app(settings, client, load_model=False)):
            sign_in(driver, url, token)
            wait_for(lambda: driver.find_element(By.ID, "app").is_displayed())
            for turn in one_per_host.iter_rows(named=True):
                conversation, turn_id = quote(turn["conversation_id"]), quote(turn["turn_id"])
                driver.get(f"{url}/conversations/{conversation}/turns/{turn_id}")
                wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#turn-meta .badge"))
                badge = driver.find_element(By.CSS_SELECTOR, "#turn-meta .badge").text
                assert badge == "interrupted", (turn["adapter"], badge)
    finally:
        driver.quit()
        client.close()


STEERS = {
    "0c275b1b-9732-433e-9e70-9b7bfdb578a3": "wire up the state machine to print a readable diagram",
    "019eef3d-abd1-72e1-ab99-dcdb259027c5": "support displaying runs in subfolders",
}
"""Real messages typed into a running turn (Claude Code's queue, a Codex task), by session."""


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_a_message_typed_into_a_running_turn_is_found_through_every_face(
    real_memory: RealMemory, query_embedder
) -> None:
    """After the main job, what a user typed while a real turn ran (a steer, with no prompt of
    its own) is found by its owner through the CLI, HTTP and MCP, in the turn it went into."""
    from fastapi.testclient import TestClient
    from mcp import Client, StdioServerParameters, stdio_client

    settings = real_memory.settings
    assert all(step.returncode == 0 for step in real_memory.steps)
    rows = DeltaStore(settings.delta_uri).read(ROLE_ROWS, ROLE_ROWS_SCHEMA)
    env = real_sessions.environment(
        settings.home, settings.elasticsearch.index_prefix, settings.elasticsearch.url
    )
    client = make_client(settings)
    http = TestClient(create_app(settings, client, query_embedder))
    try:
        for conversation, query in STEERS.items():
            steer = rows.filter(
                (pl.col("conversation_id") == conversation)
                & (pl.col("event_type") == "event.user.steer")
                & pl.col("text").str.contains(query.split()[-1])
            ).row(0, named=True)
            where = (conversation, steer["turn_id"])
            token = TokenStore(settings.tokens_path).issue(steer["user_id"], tenant=steer["tenant"])
            cli = real_sessions.run(
                ["search", query, "--json", "--token", token], env, settings.home
            )
            assert cli.returncode == 0, cli.output[-2000:]
            hits = json.loads(cli.output[cli.output.index("{") :])["hits"]
            assert where in [(h["conversation_id"], h["turn_id"]) for h in hits], "CLI"
            answer = http.post(
                "/v1/search", json={"query": query}, headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 200, answer.text
            hits = answer.json()["hits"]
            assert where in [(h["conversation_id"], h["turn_id"]) for h in hits], "HTTP"
            server = StdioServerParameters(
                command=str(real_sessions.CTXDB), args=["mcp"], env=env | {"CTXDB_TOKEN": token}
            )

            async def scenario(
                query: str = query, where: tuple = where, server: StdioServerParameters = server
            ) -> None:
                async with Client(stdio_client(server)) as mcp:
                    found = await mcp.call_tool("search_conversations", {"query": query})
                    assert not found.is_error, found.content
                    hits = found.structured_content["hits"]
                    assert where in [(h["conversation_id"], h["turn_id"]) for h in hits], "MCP"

            anyio.run(scenario)
    finally:
        client.close()
