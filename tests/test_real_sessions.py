"""Real sessions are the acceptance test (issue 40): every real public session of tests/data
(Claude Code, Codex CLI and Gemini CLI, interrupted turns included; SOURCE.md in each folder)
goes through the README's own commands, each a real `ctxdb` process: the three import commands,
`ctxdb land`, `ctxdb derive` and `ctxdb jobs run memory_job`. Every command succeeds, and every
imported session is then searchable by what was said in it. Each folder's SOURCE.md names
exactly the files that are there."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import polars as pl
import pytest

from ctxdb.contract.identity import Principal
from ctxdb.search import SearchRequest, SearchService
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


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_memory_job_succeeds_on_every_real_session_and_each_is_searchable(
    settings: Settings, query_embedder, tmp_path: Path
) -> None:
    env = real_sessions.environment(
        settings.home, settings.elasticsearch.index_prefix, settings.elasticsearch.url
    )
    steps = real_sessions.build(env, tmp_path)
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

    from ctxdb.index.client import make_client

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
