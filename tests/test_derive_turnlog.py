"""Building TurnLogs from one turn's events: block order, paths, dedup, errors, merge rules."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from conftest_turn_record import T0, Turn

from ctxdb.record.records import build_turn, build_turn_record
from ctxdb.record.role_rows import role_rows_frame
from ctxdb.record.turns import (
    ERROR_TEXT,
    parse_turn_log,
)
from ctxdb.settings import Settings


def decoded(turn: Turn) -> list[dict]:
    """Events as derivation sees them: aware datetimes, payload dicts, arrival order."""
    return [
        {**e, "occurred_at": datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00"))}
        for e in turn.events
    ]


def minimal_turn() -> Turn:
    turn = Turn("c1", "t1", adapter="langgraph")
    turn.add("turn.started")
    turn.add(
        "user.submission",
        {
            "text": "convert sales.xls",
            "event_type": "prompt",
            "arrived_at": (T0 + timedelta(seconds=3)).isoformat(),
        },
    )
    turn.add("user.context", {"kind": "selection", "label": "Sheet1!A1:C9", "ref": "app://s"})
    turn.add(
        "user.attachment",
        {
            "name": "sales.xls",
            "mime": "application/vnd.ms-excel",
            "size": 12,
            "storage_ref": "s3://b/sales.xls",
        },
    )
    turn.add("user.submission", {"text": "keep formulas", "event_type": "steer", "batch_id": "b2"})
    turn.add("chat.step", {"step": "s1", "phase": "start", "tool": "code_exec"})
    turn.add(
        "file.hosted",
        {"path": "sales.xlsx", "mime": "application/xlsx", "size": 5, "sha256": "b" * 64},
    )
    turn.add("chat.step", {"step": "s1", "phase": "complete", "tool": "code_exec", "status": "ok"})
    turn.add("assistant.completion", {"text": "Saved sales.xlsx", "tokens_in": 7, "tokens_out": 3})
    turn.add("turn.closed")
    return turn


def test_minimal_turn_log_has_the_reference_block_order_and_paths() -> None:
    record = build_turn_record(decoded(minimal_turn()))
    assert record is not None and record.recording_kind == "minimal"
    blocks = record.log.blocks
    assert [b.type for b in blocks] == [
        "user.prompt",
        "user.prompt",
        "user.context.selection",
        "user.attachment.meta",
        "assistant.step",
        "assistant.step",
        "react.tool.result",
        "assistant.completion",
    ]
    assert [b.path for b in blocks if b.type == "user.prompt"] == [
        "conv:ar:turn_t1.user.prompt",
        "conv:ar:turn_t1.user.prompt.1",
    ]
    first, second = blocks[0], blocks[1]
    assert first.meta["message_id"] == "m0" and second.meta["message_id"] == "m1"
    assert first.meta["event_type"] == "event.user.prompt"
    assert second.meta["event_type"] == "event.user.steer"
    assert first.meta["batch_id"] == "t1.batch" and second.meta["batch_id"] == "b2"
    assert first.ts == T0 + timedelta(seconds=3)  # arrival time, not the event time
    assert blocks[3].path == "conv:fi:turn_t1.user.attachments/sales.xls"
    hosted = blocks[6]
    assert hosted.path == "conv:tc:turn_t1.code_exec_0.result"
    assert hosted.meta["artifact_path"] == "conv:fi:turn_t1.files/sales.xlsx"
    assert hosted.meta["kind"] == "file"
    assert blocks[-1].path == "conv:ar:turn_t1.assistant.completion"
    assert record.log.blocks_count == 8
    assert record.log.tokens == {"in": 7, "out": 3}
    assert len(record.source_event_ids) == 10


def test_an_open_turn_has_no_turn_log_yet() -> None:
    assert build_turn_record(decoded(Turn("c1", "t1").basic(close=False))) is None


def test_turn_without_completion_gets_an_error_completion() -> None:
    turn = Turn("c1", "t1")
    turn.add("turn.started")
    turn.add("user.submission", {"text": "hello"})
    turn.add("turn.closed", {"status": "error", "error_type": "worker_crashed"})
    record = build_turn_record(decoded(turn))
    final = record.log.blocks[-1]
    assert record.error
    assert (final.type, final.text) == ("assistant.completion", ERROR_TEXT)
    assert final.meta == {"error": True, "error_type": "worker_crashed"}


def test_error_completion_keeps_its_type_and_gets_the_error_text() -> None:
    turn = Turn("c1", "t1")
    turn.add("user.submission", {"text": "hello"})
    turn.add("assistant.completion", {"text": "", "error": True, "error_type": "tool_timeout"})
    turn.add("turn.closed")
    final = build_turn_record(decoded(turn)).log.blocks[-1]
    assert final.text == ERROR_TEXT and final.meta["error_type"] == "tool_timeout"


def test_resent_events_do_not_double_blocks() -> None:
    turn = Turn("c1", "t1").basic(close=False)
    again = dict(turn.events[1], event_id="retry-1")  # same submission, new event id
    turn.events.append(again)
    turn.add("turn.closed")
    turn.add("turn.closed", event_id="retry-2")
    record = build_turn_record(decoded(turn))
    assert [b.type for b in record.log.blocks] == ["user.prompt", "assistant.completion"]


def test_minimal_turn_keeps_only_the_last_completion_rich_keeps_all() -> None:
    minimal = Turn("c1", "t1").basic(close=False)
    minimal.add("assistant.completion", {"text": "second"})
    minimal.add("turn.closed")
    blocks = build_turn_record(decoded(minimal)).log.blocks
    assert [b.text for b in blocks if b.type == "assistant.completion"] == ["second"]
    rich = Turn("c1", "t2", adapter="react").basic(close=False)
    rich.add("assistant.completion", {"text": "second"})
    rich.add("turn.closed")
    paths = [
        b.path
        for b in build_turn_record(decoded(rich)).log.blocks
        if b.type == "assistant.completion"
    ]
    assert paths == [
        "conv:ar:turn_t2.assistant.completion",
        "conv:ar:turn_t2.assistant.completion.1",
    ]


def test_react_turn_keeps_rich_blocks_summary_anchors_and_notes() -> None:
    turn = Turn("c1", "t1", adapter="react")
    turn.add("turn.started")
    turn.add("user.submission", {"text": "why does openpyxl fail?"})
    turn.add("user.submission", {"text": "and for .xlsm?", "event_type": "followup"})
    turn.add("react.block", {"block_type": "react.tool.call", "call_id": "k1", "tool": "search"})
    turn.add("react.block", {"block_type": "react.tool.result", "call_id": "k1", "text": "hits"})
    turn.add("react.summary", {"text": "Old .xls unsupported", "refs": ["conv:fi:turn_t1.files/a"]})
    turn.add("react.anchors", {"phrases": ["InvalidFileException"], "entities": ["openpyxl"]})
    turn.add("react.note", {"text": "user on Windows"})
    turn.add("assistant.completion", {"text": "Convert to xlsx"})
    turn.add("turn.closed")
    record = build_turn_record(decoded(turn))
    assert record.recording_kind == "rich" and record.recording_state == 2
    types = [b.type for b in record.log.blocks]
    assert types == [
        "user.prompt",
        "user.followup",
        "react.tool.call",
        "react.tool.result",
        "react.note",
        "conv.working.summary",
        "assistant.completion",
    ]
    summary = record.log.blocks[5]
    assert summary.path == "conv:ws:turn_t1.working_summary"
    assert summary.meta["anchors"] == {
        "phrases": ["InvalidFileException"],
        "entities": ["openpyxl"],
    }
    assert record.log.blocks[2].path == "conv:tc:turn_t1.k1.call"


def test_feedback_summary_counts_and_keeps_the_last() -> None:
    turn = Turn("c1", "t1").basic()
    turn.add("feedback", {"reaction": "down"})
    turn.add("feedback", {"reaction": "up", "text": "now it works"})
    feedback = build_turn_record(decoded(turn)).log.feedback
    assert (feedback.count, feedback.last_reaction, feedback.last_text) == (2, "up", "now it works")


def test_payload_round_trips_through_parse_turn_log() -> None:
    record = build_turn_record(decoded(minimal_turn()))
    payload = record.log.model_dump_json()
    assert parse_turn_log(payload) == record.log
    assert set(json.loads(payload)) == {
        "turn_id",
        "ts",
        "end_ts",
        "blocks",
        "sources_used",
        "blocks_count",
        "tokens",
        "feedback",
    }


def test_turn_without_typed_message_still_has_a_user_block() -> None:
    turn = Turn("c1", "t1")
    turn.add("turn.started")
    turn.add(
        "user.attachment",
        {"name": "a.csv", "mime": "text/csv", "size": 3, "storage_ref": "s3://b/a.csv"},
    )
    turn.add("assistant.completion", {"text": "Got the file."})
    turn.add("turn.closed")
    record = build_turn_record(decoded(turn))
    first = record.log.blocks[0]
    assert (first.type, first.text, first.meta["message_id"]) == ("user.prompt", "", "m0")
    rows = role_rows_frame([build_turn(decoded(turn))], Settings(), T0)
    user = rows.filter(rows["target"] == "user")["text"].to_list()
    assert user == [
        "[user.message]\n(no typed message)\n"
        "[attachment.1] a.csv | text/csv | conv:fi:conv_c1.turn_t1.user.attachments/a.csv | 3"
    ]
