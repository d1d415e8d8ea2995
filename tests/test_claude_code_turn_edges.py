"""Claude Code transcripts of newer releases and of sessions without Stop hooks, made from real
transcripts of tests/data/claude_code (SOURCE.md) the way Claude Code writes them; the sessions
where a probe met each case (Claude Code 2.1.129 and 2.1.x, May 2026) carry no licence, so only
their shape is used here:

- a prompt the model answered with thinking alone (then its Stop hooks ran) is a turn that ended
  `error`/`no_answer`; before, the prompt was in no turn;
- a prompt whose calls to the model all failed (`system` `api_error` lines, Claude Code 2.1.89,
  retried) is a turn that ended `error`/`api_error` with the error as its answer; a retry that
  answers makes it an ordinary answered turn. Before, the prompt was in no turn;
- from 2.1.129 the `queue-operation` lines name no message: the one a `remove` delivered into the
  running turn is named only by the `attachment` line of type `queued_command` written after it.
  Those steers were lost;
- a scheduled task's prompt comes back from the queue (`enqueue`, `dequeue`) as a user line
  Claude Code marks `isMeta`. In a session without Stop hooks nothing else ended the turn before
  it, so the scheduled work (and the user's interrupt of it, hours later) went into the last
  turn the user asked for: that turn ends where its answer ends, the scheduled work is in no turn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from host_import_case import by_type

from ctxdb.capture.claude_code.importer import transcript_events
from ctxdb.capture.claude_code.transcript import is_steer
from ctxdb.capture.claude_code.turns import Identity

DATA = Path(__file__).parent / "data" / "claude_code"
SHORT = DATA / "-home-marco-projects-spotter" / "55604662-cf2a-4331-851a-ec234028f8ca.jsonl"
STOPPED = (
    DATA / "-Users-alex-workspace-cli--worktrees-1" / "0c275b1b-9732-433e-9e70-9b7bfdb578a3.jsonl"
)
TASK_QUEUE = DATA / "-Users-michael-Code-cipher-box" / "12f1f541-2a05-4a60-a551-14b836a1ad82.jsonl"
ANN = Identity("local", "claude-code", "ann")


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def events_of(tmp_path: Path, name: str, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    folder = tmp_path / "-home-ann-project"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return transcript_events(path, ANN, settle_s=0).events


def test_a_prompt_answered_with_thinking_alone_is_a_turn_without_an_answer(
    tmp_path: Path,
) -> None:
    """The real prompt "mix phx.server doesnt seem to start", the model's blank text line and
    its thinking line, then the `stop_hook_summary` of another real session (its Stop hooks
    ran: the answer ended)."""
    short = lines_of(SHORT)
    stop = next(line for line in lines_of(STOPPED) if line.get("subtype") == "stop_hook_summary")
    stop |= {"sessionId": short[3]["sessionId"], "timestamp": "2026-02-10T21:12:03.000Z"}
    events = events_of(tmp_path, short[3]["sessionId"], [*short[:6], stop])
    [prompt] = by_type(events, "user.submission")
    assert prompt["payload"]["text"] == "mix phx.server doesnt seem to start"
    assert by_type(events, "assistant.completion") == []
    [closed] = by_type(events, "turn.closed")
    assert closed["payload"] == {"status": "error", "error_type": "no_answer"}


def as_2_1_129(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A 2.1.49 transcript's queue as 2.1.129 writes it: no `content` on `queue-operation`
    lines; a message the user typed that a `remove` delivered (2.1.49 names none on the
    `remove`: the oldest the user typed) is named by a `queued_command` attachment after it."""
    out: list[dict[str, Any]] = []
    queued: list[str] = []
    for line in lines:
        if line.get("type") != "queue-operation":
            out.append(line)
            continue
        out.append({k: v for k, v in line.items() if k != "content"})
        if line.get("operation") == "enqueue":
            queued.append(line.get("content") or "")
        if line.get("operation") != "remove" or not queued:
            continue
        text = queued.pop(next((i for i, t in enumerate(queued) if is_steer(t)), 0))
        if is_steer(text):
            attachment = {"type": "queued_command", "prompt": [{"type": "text", "text": text}]}
            out.append(
                {
                    "type": "attachment",
                    "attachment": attachment | {"commandMode": "prompt"},
                    "timestamp": line["timestamp"],
                    "sessionId": line["sessionId"],
                    "isSidechain": False,
                }
            )
    return out


def test_messages_named_only_by_their_queued_command_attachment_are_steers(
    tmp_path: Path,
) -> None:
    """12f1f541's queue as 2.1.129 writes it: its two typed messages are still the only steers,
    in the turn they were typed into; its four background-task records are none."""
    lines = lines_of(TASK_QUEUE)
    original = transcript_events(TASK_QUEUE, ANN, settle_s=0).events
    events = events_of(tmp_path, lines[-1]["sessionId"], as_2_1_129(lines))

    def steers(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [
            (e["turn_id"], e["payload"]["text"])
            for e in by_type(found, "user.submission")
            if e["payload"].get("event_type") == "steer"
        ]

    assert len(steers(original)) == 2
    assert steers(events) == steers(original)
    assert not [e for e in by_type(events, "user.submission") if "task_id" in e["payload"]["text"]]


def test_a_scheduled_prompt_ends_the_turn_before_it_in_a_session_without_stop_hooks(
    tmp_path: Path,
) -> None:
    """The real answered start of 55604662 (no Stop hooks: no `stop_hook_summary` lines), then a
    scheduled prompt the queue gives back as an `isMeta` user line, its tool call and the
    user's interrupt hours later."""
    short = lines_of(SHORT)
    session = short[3]["sessionId"]
    at = "2026-02-11T01:33:00.000Z"
    scheduled = [
        {"type": "queue-operation", "operation": "enqueue", "timestamp": at, "sessionId": session},
        {"type": "queue-operation", "operation": "dequeue", "timestamp": at, "sessionId": session},
        short[3]
        | {
            "uuid": "5c4ed01e-0000-4000-8000-000000000001",
            "isMeta": True,
            "timestamp": at,
            "message": {"role": "user", "content": "It is time for the morning review."},
        },
        short[7] | {"timestamp": "2026-02-11T01:33:21.000Z"},
        *[line | {"timestamp": "2026-02-11T07:28:30.000Z"} for line in short[10:13]],
    ]
    events = events_of(tmp_path, session, [*short[:7], *scheduled])
    [closed] = by_type(events, "turn.closed")
    assert closed["payload"] == {"status": "ok"}
    assert closed["occurred_at"] == short[6]["timestamp"]
    assert by_type(events, "chat.step") == []
    [answer] = by_type(events, "assistant.completion")
    assert answer["payload"]["text"].startswith("Let me check the project structure")
    assert "morning review" not in json.dumps(events)


def api_error(session: str, at: str, attempt: int) -> dict[str, Any]:
    """A failed call to the model as Claude Code 2.1.89 writes it (retried after `retryInMs`)."""
    body = {"error": {"code": "1311", "message": "plan does not include this model"}}
    return {
        "type": "system",
        "subtype": "api_error",
        "level": "error",
        "error": {"status": 429, "headers": {}, "requestID": None, "error": body},
        "retryInMs": 586.2 * attempt,
        "retryAttempt": attempt,
        "maxRetries": 10,
        "timestamp": at,
        "sessionId": session,
        "uuid": f"5c4ed01e-0000-4000-8000-00000000000{attempt}",
    }


def test_a_prompt_whose_calls_to_the_model_all_failed_is_an_api_error_turn(
    tmp_path: Path,
) -> None:
    short = lines_of(SHORT)
    session = short[3]["sessionId"]
    failed = [api_error(session, f"2026-02-10T21:11:5{n}.000Z", n) for n in (7, 8)]
    events = events_of(tmp_path, "failed", [*short[:4], *failed])
    [answer] = by_type(events, "assistant.completion")
    assert answer["payload"]["text"] == "API Error: 429 plan does not include this model"
    [closed] = by_type(events, "turn.closed")
    assert (closed["payload"]["status"], closed["payload"]["error_type"]) == ("error", "api_error")

    retried = events_of(tmp_path, "retried", [*short[:4], failed[0], *short[4:7]])
    [answer] = by_type(retried, "assistant.completion")
    assert answer["payload"]["text"].startswith("Let me check the project structure")
    assert not answer["payload"]["error"]
