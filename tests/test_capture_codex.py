"""Codex CLI capture on real rollouts (tests/data/codex/SOURCE.md): prompts are what the user
typed (never the injected AGENTS.md or environment context), answers are the last assistant
message of each turn, calls are steps, a turn Codex never finished or that was aborted is
cancelled without an invented answer; imported through landing, derivation, embedding and
indexing, a turn is found by its content, and a re-import lands nothing new."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from host_import_case import HostCase, by_type, check_import_searchable_and_idempotent

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.codex.importer import ADAPTER, OLD_FORMAT, rollout_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.contract.events import parse_event
from ctxdb.contract.private import strip_private
from ctxdb.settings import Settings

DATA = Path(__file__).parent / "data" / "codex"
COMPACTION = DATA / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
RESUMED = DATA / "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl"
STEERED = DATA / "rollout-2026-06-22T12-11-14-019eef3d-abd1-72e1-ab99-dcdb259027c5.jsonl"
MCP = DATA / "rollout-2026-06-18T02-33-46-019ed893-d2a6-7c30-a8b8-5a8a49cfa23e.jsonl"
LEGACY_STOPPED = DATA / "rollout-2025-10-31T19-02-58-c61729d4-da6d-46a4-9a29-ec2c614e5e23.jsonl"
LEGACY_FIRST = DATA / "rollout-2025-11-01T11-34-37-97b66f6c-a160-40e0-bd0f-1fdcbbb9498b.jsonl"
SHELL_COMMAND = DATA / "rollout-2026-01-10T14-27-32-019ba997-bbca-7483-9a75-07808dcc061c.jsonl"
ANN = Identity("local", "codex", "ann")
SECOND_TURN = "019e162b-0011-7240-abbc-f7b732e49728"
ABORTED = (
    '{"timestamp":"2026-05-11T08:35:14.000Z","type":"event_msg","payload":{"type":"turn_aborted",'
    f'"turn_id":"{SECOND_TURN}","reason":"interrupted"}}}}\n'
)
"""The `turn_aborted` line as Codex CLI 0.146.0 writes it (SOURCE.md), for the second turn."""


def test_rollout_turns_prompts_answers_steps_and_tokens() -> None:
    events = rollout_events(COMPACTION, ANN, True, strip_private).events
    for event in events:
        parse_event(json.dumps(event))
    prompts = [e["payload"]["text"] for e in by_type(events, "user.submission")]
    assert prompts == ["show tools", "let's update the defailt context compart to 90 in env var"]
    closed = by_type(events, "turn.closed")
    assert [e["payload"]["status"] for e in closed] == ["ok", "ok"]
    assert [e["turn_id"] for e in closed] == ["019e1625-d031-75e3-a85f-f143e43c0d84", SECOND_TURN]
    answers = by_type(events, "assistant.completion")
    assert answers[0]["payload"]["text"].startswith("Available tool groups in this session:")
    assert answers[1]["payload"]["text"].startswith("Implemented the default context compaction")
    assert answers[1]["payload"]["tokens_in"] > answers[1]["payload"]["tokens_out"] > 0
    steps = by_type(events, "chat.step")
    assert len(steps) == 105  # 99 function calls, 3 apply_patch, 3 web searches
    assert {e["payload"]["tool"] for e in steps} == {
        "exec_command",
        "write_stdin",
        "update_plan",
        "apply_patch",
        "web_search",
    }
    first = steps[0]["payload"]
    assert first["title"].startswith("sed -n '1,180p' ")
    assert sum(e["payload"]["status"] == "error" for e in steps) == 4  # exited with code != 0
    assert {e["adapter"] for e in events} == {ADAPTER}
    assert all(e["event_id"].startswith("cx-") for e in events)
    assert all(e["agent"] == "Users-Sample_User-repos-codemie-ai-codemie-code" for e in events)


def test_mcp_calls_keep_their_server_and_tool_searches_are_steps() -> None:
    """Codex 0.140+ names an MCP tool within a `namespace` (`mcp__codex_apps__github`,
    `_create_issue`) and looks tools up with `tool_search_call`: the step carries the full name
    (which server ran it), and the search is a step of its own with its query as the title."""
    events = rollout_events(MCP, ANN, True, strip_private).events
    steps = {e["payload"]["tool"]: e["payload"] for e in by_type(events, "chat.step")}
    created = steps["mcp__codex_apps__github_create_issue"]
    assert created["status"] == "ok" and "EntityProcess/agentv-private" in created["input"]
    assert steps["tool_search"]["title"] == "GitHub create issue issue create repository"
    assert "_create_issue" not in steps
    assert [e["payload"]["status"] for e in by_type(events, "turn.closed")] == ["ok"]


def test_prompts_a_user_went_on_from_before_any_answer_are_cancelled_turns() -> None:
    """Codex 0.34 (no task events): the user typed on while Codex worked without writing text
    ("pause", then "OK, continue" three times). Those prompts were in no turn, and the first,
    which ran shell calls, ended `error` with an invented answer: each is a cancelled turn."""
    events = rollout_events(LEGACY_STOPPED, ANN, True, strip_private).events
    prompts = [e["payload"]["text"] for e in by_type(events, "user.submission")]
    assert prompts[1:5] == ["pause", "OK, continue", "OK, continue", "OK, continue"]
    closed = [e["payload"] for e in by_type(events, "turn.closed")]
    interrupted = {"status": "cancelled", "error_type": "interrupted"}
    assert closed[:4] == [interrupted] * 4 and closed[4]["status"] == "ok"
    answers = by_type(events, "assistant.completion")
    assert [a["payload"]["text"][:5] for a in answers] == ["Done."]


def test_the_last_prompt_of_a_rollout_without_task_events_is_a_turn() -> None:
    """Codex 0.34: the rollout ends with "continue" and nothing after it (Codex was left or
    closed). That prompt was in no turn; once the file has settled it is a cancelled turn,
    provisionally (an answer written later supersedes it). The two before it, typed on from
    before any answer text, are cancelled turns too."""
    settled = rollout_events(LEGACY_STOPPED, ANN, True, strip_private).events
    prompts = [e["payload"]["text"] for e in by_type(settled, "user.submission")]
    assert prompts[5:] == [prompts[5], "continue", "continue"]
    assert prompts[5].startswith("Yes, and we also need to collect")
    closed = [e["payload"] for e in by_type(settled, "turn.closed")][5:]
    interrupted = {"status": "cancelled", "error_type": "interrupted"}
    assert closed == [interrupted, interrupted, interrupted | {"provisional": True}]
    growing = rollout_events(LEGACY_STOPPED, ANN, False, strip_private).events
    assert [e["payload"]["text"] for e in by_type(growing, "user.submission")] == prompts[:-1]


def test_failed_calls_are_read_from_each_releases_output() -> None:
    """A call failed when its output says so the way its release writes it: `shell_command`'s
    "Exit code: 255" first line (Codex 0.80), the sandbox's "failed in sandbox ... exit code: 2"
    (0.34). Both were steps of status ok."""
    steps = by_type(rollout_events(SHELL_COMMAND, ANN, True, strip_private).events, "chat.step")
    assert [(s["payload"]["title"], s["payload"]["status"]) for s in steps] == [
        ("git fetch --all --prune", "error"),
        ("git fetch --all --prune", "ok"),
    ]
    legacy = by_type(rollout_events(LEGACY_FIRST, ANN, True, strip_private).events, "chat.step")
    assert [s["payload"]["status"] for s in legacy] == ["ok"] * 4 + ["error"]
    assert legacy[-1]["payload"]["title"] == "bash -lc pytest -q"


def test_tokens_counted_before_a_turns_first_answer_are_the_turns() -> None:
    """Codex 0.34-0.57 write a turn's first `token_count` before its first answer item: those
    tokens were lost (every turn undercounted, a turn answered in one step had none). The
    first turn of a session counts every token the session's totals say it used."""
    lines = [json.loads(line) for line in LEGACY_FIRST.read_text().splitlines()]
    totals = [
        line["payload"]["info"]["total_token_usage"]
        for line in lines
        if line["payload"].get("type") == "token_count" and line["payload"].get("info")
    ]
    [answer] = by_type(
        rollout_events(LEGACY_FIRST, ANN, True, strip_private).events, "assistant.completion"
    )
    used = (answer["payload"]["tokens_in"], answer["payload"]["tokens_out"])
    assert used == (totals[-1]["input_tokens"], totals[-1]["output_tokens"])


def test_a_turn_codex_never_finished_is_cancelled() -> None:
    events = rollout_events(RESUMED, ANN, True, strip_private).events
    closed = by_type(events, "turn.closed")
    assert [e["payload"]["status"] for e in closed] == ["ok"] * 5 + ["cancelled"] * 2
    cut, unanswered = closed[-2:]
    assert cut["turn_id"] == "019c8a7f-8437-7be1-8b0c-419cba27ee82"
    prompts = [e["payload"]["text"] for e in by_type(events, "user.submission")]
    assert not any("AGENTS.md" in p or "REDACTED_TEXT len=3021" in p for p in prompts)
    assert len(prompts) == 7  # the 7th prompt never got an answer: a cancelled turn without one
    assert unanswered["turn_id"] == "019c8a93-d838-7840-b143-0af4aa2cb17a"
    answered = {e["turn_id"] for e in by_type(events, "assistant.completion")}
    assert unanswered["turn_id"] not in answered
    unsettled = rollout_events(RESUMED, ANN, False, strip_private).events  # the last turn open
    assert unsettled == [e for e in events if e["turn_id"] != unanswered["turn_id"]]


def test_a_message_typed_into_a_running_task_is_its_steer_and_an_abort_ends_that_task() -> None:
    """019eef3d (Codex CLI 0.141.0): in two of four tasks the user types again while the task
    runs (`user_message` under the same `turn_id`). Each task stays one turn with that message as
    its steer; the second of them is aborted (`turn_aborted` of its `turn_id`): that turn is
    cancelled, and the one that completed keeps the answer written at its `task_complete`."""
    events = rollout_events(STEERED, ANN, True, strip_private).events
    for event in events:
        parse_event(json.dumps(event))
    closed = by_type(events, "turn.closed")
    assert [(e["turn_id"][-12:], e["payload"]["status"]) for e in closed] == [
        ("9cfd50475c13", "ok"),
        ("c0b2162ae493", "ok"),
        ("ca03815d689a", "cancelled"),
        ("91a94e3d7a3d", "ok"),
    ]
    assert closed[0]["occurred_at"].startswith("2026-06-22T12:34:")  # not at the steer (12:15)
    submissions = by_type(events, "user.submission")
    steers = [
        (e["turn_id"][-12:], e["payload"]["text"][:30])
        for e in submissions
        if e["payload"]["event_type"] == "steer"
    ]
    assert steers == [
        ("9cfd50475c13", "i believe we recently did rese"),
        ("ca03815d689a", "do we currently plan to suppor"),
    ]
    assert len(submissions) == 6


def test_turn_aborted_closes_the_turn_cancelled_with_no_invented_answer(tmp_path: Path) -> None:
    lines = COMPACTION.read_text().splitlines(keepends=True)
    end = max(i for i, line in enumerate(lines) if '"type":"agent_message"' in line)
    cut = lines[:end]  # Escape pressed while the final answer was being written
    last_said = next(
        json.loads(line)["payload"]["content"][0]["text"]
        for line in reversed(cut)
        if '"role":"assistant"' in line
    )
    aborted = tmp_path / COMPACTION.name
    aborted.write_text("".join(cut) + ABORTED)
    events = rollout_events(aborted, ANN, False, strip_private).events
    closed = by_type(events, "turn.closed")
    assert closed[-1]["payload"] == {"status": "cancelled", "error_type": "interrupted"}
    answer = by_type(events, "assistant.completion")[-1]["payload"]["text"]
    assert answer == last_said
    assert not answer.startswith("Implemented the default context compaction")


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_imported_rollouts_are_searchable_and_reimport_lands_nothing(
    settings: Settings, query_embedder
) -> None:
    case = HostCase(
        spool="codex",
        sessions=[RESUMED, COMPACTION],
        events=rollout_events,
        identity=ANN,
        query="OpenCode context compaction threshold 0.9",
        turn_id=SECOND_TURN,
        prompt_starts="let's update the defailt context compart",
        answer_starts="Implemented the default context compaction",
        turns=9,
        deleted=COMPACTION,
    )
    check_import_searchable_and_idempotent(case, settings, query_embedder)


def test_a_rollout_from_before_session_meta_fails_with_its_reason(tmp_path: Path) -> None:
    """Codex CLI releases before `session_meta` wrote a bare header line and lines without a
    `payload`; ctxdb reads none of them, and says so instead of importing nothing quietly."""
    old = tmp_path / "rollout-2025-05-02T10-00-00-5b1c0e1a-0000-4000-8000-000000000001.jsonl"
    old.write_text(
        '{"id":"5b1c0e1a-0000-4000-8000-000000000001","timestamp":"2025-05-02T10:00:00.000Z",'
        '"instructions":null}\n'
        '{"type":"message","id":null,"role":"user","content":[{"type":"input_text",'
        '"text":"fix the flaky upload test"}]}\n'
        '{"record_type":"state"}\n'
    )
    stats = import_sessions([old, RESUMED], tmp_path / "spool", ANN, rollout_events, settle_s=0)
    assert (stats.files, stats.failed) == (1, 1)  # RESUMED imported, the old one not
    assert stats.problems == [f"{old}: {OLD_FORMAT}"]
    assert not list((tmp_path / "spool" / "import").rglob(f"{old.stem}.*"))
