"""Tool activity of a real Claude Code transcript (tests/data/claude_code/SOURCE.md): each step
carries its tool call's input summary; tool output only when opted in, bounded and without
`<private>` spans; a turn's steps row makes the commands it ran searchable."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from claude_code_sessions import FIXTURES
from conftest_search import embed_and_sync

from ctxdb.capture.claude_code.importer import import_transcripts, transcript_events
from ctxdb.capture.claude_code.install import hook_config
from ctxdb.capture.claude_code.transcript import INPUT_CHARS
from ctxdb.capture.claude_code.turns import OUTPUT_MAX_CHARS, Identity
from ctxdb.contract.events import STEP_OUTPUT_MAX_CHARS
from ctxdb.contract.identity import Principal
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.search import SearchRequest, SearchService
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS, ROLE_ROWS, ROLE_ROWS_SCHEMA

PROJECT = "-home-USER-projects-spotter-worktrees-spotter-gqc"
SESSION = FIXTURES / PROJECT / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
COMMAND = "mix test test/spotter_web/live/project_review_live_test.exs"
IDENTITY = Identity("local", "claude-code", "ann")
SECRET = "hunter2-do-not-capture"


def tool_outputs(path: Path) -> list[str]:
    """The text of every `tool_result` of a transcript (string content or text blocks)."""
    out = []
    for raw in path.read_text().splitlines():
        content = (json.loads(raw).get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                value = block.get("content")
                if isinstance(value, list):
                    value = "\n".join(b.get("text", "") for b in value if isinstance(b, dict))
                if isinstance(value, str):
                    out.append(value)
    return out


def with_private(source: Path, target: Path) -> Path:
    """`source` copied to `target` with a `<private>` span put into its longest tool output."""
    lines = source.read_text().splitlines()
    best, size = -1, 0
    for n, raw in enumerate(lines):
        content = (json.loads(raw).get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
                if len(block["content"]) > size:
                    best, size = n, len(block["content"])
    line = json.loads(lines[best])
    for block in line["message"]["content"]:
        if block.get("type") == "tool_result":
            block["content"] = f"ok <private>{SECRET}</private> " + block["content"]
    lines[best] = json.dumps(line)
    target.parent.mkdir(parents=True)
    target.write_text("\n".join(lines) + "\n")
    return target


def strings(value: object) -> list[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def landed_payloads(tmp_path: Path, events: list[dict]) -> list[str]:
    """The events landed through the real landing stage: every string of their stored payloads."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    store = DeltaStore(str(tmp_path / "delta"))
    assert land(store, str(landing)).quarantined == 0
    raw = store.read(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA)
    assert raw.height == len(events)
    return [s for payload in raw["payload"] for s in strings(json.loads(payload))]


def test_steps_carry_the_input_summary_and_no_tool_output_by_default(tmp_path: Path) -> None:
    events = transcript_events(SESSION, IDENTITY, settle_s=0).events
    steps = [e["payload"] for e in events if e["type"] == "chat.step"]
    assert steps and all(0 < len(p["input"]) <= INPUT_CHARS for p in steps)
    assert any(COMMAND in p["input"] for p in steps)
    assert not any("output" in p for p in steps)
    stored = "\n".join(landed_payloads(tmp_path, events))
    outputs = [o[:200] for o in tool_outputs(SESSION) if len(o) >= 80 and "\n" in o[:200]]
    assert len(outputs) > 10 and not [o for o in outputs if o in stored]


def test_tool_output_is_opt_in_bounded_and_never_private(tmp_path: Path) -> None:
    source = with_private(SESSION, tmp_path / "projects" / PROJECT / SESSION.name)
    events = transcript_events(source, IDENTITY, settle_s=0, output_chars=300).events
    steps = [e["payload"] for e in events if e["type"] == "chat.step"]
    outputs = [p["output"] for p in steps if "output" in p]
    assert len(outputs) >= len(steps) // 2
    assert max(len(o) for o in outputs) == 300  # long outputs are cut to the setting
    assert any(o.startswith("ok ") for o in outputs)  # the output that held the span
    stored = "\n".join(landed_payloads(tmp_path, events))
    assert SECRET not in stored and "<private>" not in stored
    assert OUTPUT_MAX_CHARS == STEP_OUTPUT_MAX_CHARS


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_a_command_the_agent_ran_finds_its_turn_through_the_steps_row(
    settings: Settings, query_embedder, tmp_path: Path
) -> None:
    projects = tmp_path / "claude" / "projects"
    (projects / PROJECT).mkdir(parents=True)
    (projects / PROJECT / SESSION.name).write_bytes(SESSION.read_bytes())
    ann = settings.replace(claude_code={"user_id": "ann", "projects": str(projects)})
    config = hook_config(ann)
    transcripts = [projects / PROJECT / SESSION.name]
    imported = import_transcripts(transcripts, Path(config.spool).parent, config.identity, 0)
    assert imported.turns == 2
    events = transcript_events(transcripts[0], config.identity, settle_s=0).events
    ran = {e["turn_id"] for e in events if COMMAND in e["payload"].get("input", "")}
    assert len(ran) == 1

    store = DeltaStore(settings.delta_uri)
    assert land(store, settings.landing_uri).quarantined == 0
    derive(store, settings)
    rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA)
    steps = rows.filter(pl.col("target") == "steps")
    assert sorted(steps["turn_id"]) == sorted(
        {e["turn_id"] for e in events if "input" in e["payload"]}
    )
    assert steps["role"].to_list() == ["artifact"] * steps.height
    for row in steps.iter_rows(named=True):
        assert f"turn:{row['turn_id']}" in row["tags"] and "artifact:turn.steps" in row["tags"]
        turn = rows.filter(pl.col("turn_id") == row["turn_id"])
        identity = turn.select("tenant", "app", "agent", "user_id", "conversation_id").unique()
        assert identity.height == 1
        assert turn["expires_at"].n_unique() == 1  # a turn's rows expire together
    client = embed_and_sync(store, settings, query_embedder)
    service = SearchService(settings, client, query_embedder)
    as_ann = Principal(user_id="ann", tenant="local")

    query = "mix test project_review_live_test.exs"
    hit = service.search(as_ann, SearchRequest(query=query, top_k=5)).hits[0]
    assert hit.turn_id in ran and "steps" in hit.matched_targets
    assert any(s.target == "steps" and "project_review_live_test" in s.text for s in hit.snippets)
    only_steps = service.search(as_ann, SearchRequest(query=query, targets=["steps"])).hits
    assert only_steps[0].turn_id in ran
    view = service.turn(as_ann, hit.conversation_id, hit.turn_id)
    assert any(COMMAND in (s.input or "") for s in view.steps)
