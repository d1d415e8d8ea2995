"""How a Codex task ends, on turns made from a real rollout (tests/data/codex/SOURCE.md) the way
Codex writes them where no licensed public rollout holds the case (the probe that found them
read unlicensed ones):

- a task that completes without an answer (`task_complete` with `last_agent_message: null`, in
  real rollouts a second after the prompt) is a turn that ended `error`/`no_answer`; with the
  `error` newer releases put on it (`{"message": ..., "codex_error_info":
  "usage_limit_exceeded"}`, as captured from real rollouts in public tools' tests) the turn ended
  `error`/`api_error` and that message is its answer. Before, the prompt was in no turn, and a
  conversation of such prompts vanished;
- `/review` runs a sub-agent with a rollout of its own (`session_meta.source` is `{"subagent":
  "review"}`, Codex 0.104) whose task carries the same `turn_id` as the review the parent's
  rollout records between `entered_review_mode` and `exited_review_mode`, the request written
  twice there. Before, both files gave the same event ids (quarantined as `event_id_conflict`)
  and the parent showed the request twice. The sub-agent's rollout gives no events: the parent
  holds the review, once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from host_import_case import by_type

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.codex.importer import rollout_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.contract.private import strip_private
from ctxdb.landing.run import land
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

REAL = (
    Path(__file__).parent
    / "data"
    / "codex"
    / "rollout-2026-06-22T12-11-14-019eef3d-abd1-72e1-ab99-dcdb259027c5.jsonl"
)
ANN = Identity("local", "codex", "ann")
REVIEWER_ID = "019eef40-0000-7000-8000-00000000feed"
REVIEW_TURN = "019eef41-0000-7000-8000-00000000beef"


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def first_task(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of the rollout's first task, `task_started` to `task_complete`."""
    kinds = [line["payload"].get("type") for line in lines]
    start, end = kinds.index("task_started"), kinds.index("task_complete")
    return lines[start : end + 1]


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    return path


def unanswered(tmp_path: Path, error: dict[str, str] | None) -> list[dict[str, Any]]:
    """The events of the real rollout's first task as a task Codex completed without an answer
    writes it: `task_started`, the prompt, `task_complete` (its answer, calls and the messages
    typed while it ran taken out)."""
    lines = records(REAL)
    task = first_task(lines)
    prompt = next(line for line in task if line["payload"].get("type") == "user_message")
    kept = [task[0], prompt, task[-1]]
    kept[-1]["payload"]["last_agent_message"] = None
    if error:
        kept[-1]["payload"]["error"] = error
    path = write(tmp_path / REAL.name, [lines[0], *kept])
    return rollout_events(path, ANN, True, strip_private).events


def test_a_task_completed_without_an_answer_is_a_turn_with_no_answer(tmp_path: Path) -> None:
    events = unanswered(tmp_path, None)
    [prompt] = by_type(events, "user.submission")
    assert prompt["payload"]["text"].startswith("is there research done in ai-research-wiki")
    assert by_type(events, "assistant.completion") == []
    [closed] = by_type(events, "turn.closed")
    assert closed["payload"] == {"status": "error", "error_type": "no_answer"}
    assert closed["turn_id"] == prompt["turn_id"]


def test_a_task_completed_with_an_error_has_that_error_as_its_answer(tmp_path: Path) -> None:
    limit = "You've hit your usage limit. Upgrade to Pro or try again at Aug 9th, 2026 3:02 PM."
    events = unanswered(tmp_path, {"message": limit, "codex_error_info": "usage_limit_exceeded"})
    [answer] = by_type(events, "assistant.completion")
    assert answer["payload"]["text"] == limit and answer["payload"]["error"] is True
    [closed] = by_type(events, "turn.closed")
    assert closed["payload"] == {"status": "error", "error_type": "api_error"}


def reviewed(tmp_path: Path) -> tuple[Path, Path, str]:
    """The real rollout with its first task asked again as a `/review` at the end (the parent's
    lines: the review's task under a new `turn_id`, its request written twice), the review
    sub-agent's own rollout of that task (same `turn_id`), and the request."""
    lines = records(REAL)
    task = first_task(lines)
    old_turn = task[0]["payload"]["turn_id"]
    at = lines[-1]["timestamp"]
    again = [
        json.loads(json.dumps(line).replace(old_turn, REVIEW_TURN)) | {"timestamp": at}
        for line in task
        if line["payload"].get("type") in ("task_started", "user_message", "task_complete")
        or line["payload"].get("role") == "assistant"
    ]
    request = next(line for line in again if line["payload"].get("type") == "user_message")
    steers = [line for line in again if line["payload"].get("type") == "user_message"]
    body = [line for line in again[1:-1] if line not in steers]
    review = [
        {"timestamp": at, "type": "event_msg", "payload": {"type": "entered_review_mode"}},
        again[0],
        request,
        request,  # Codex writes the review request twice
        {"timestamp": at, "type": "event_msg", "payload": {"type": "exited_review_mode"}},
        *body,
        again[-1],
    ]
    meta = lines[0] | {
        "payload": lines[0]["payload"] | {"id": REVIEWER_ID, "source": {"subagent": "review"}}
    }
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    parent = write(sessions / REAL.name, [*lines, *review])
    child = write(
        sessions / f"rollout-2026-06-22T12-14-33-{REVIEWER_ID}.jsonl",
        [meta, again[0], request, *body, again[-1]],
    )
    return parent, child, request["payload"]["message"].strip()


def test_a_review_sub_agent_leaves_the_review_to_its_parent(
    tmp_path: Path, settings: Settings
) -> None:
    parent, child, asked = reviewed(tmp_path)
    assert rollout_events(child, ANN, True, strip_private).events == []
    events = rollout_events(parent, ANN, True, strip_private).events
    said = [e for e in by_type(events, "user.submission") if e["payload"]["text"] == asked]
    assert len(said) == 2  # the task itself, and its review: once each
    assert {e["payload"].get("event_type") for e in said} == {"prompt"}
    assert [e["turn_id"] for e in said][-1] == REVIEW_TURN

    spool = Path(settings.landing_uri) / "spool"
    import_sessions([parent, child], spool, ANN, rollout_events, settle_s=0)
    report = land(DeltaStore(settings.delta_uri), settings.landing_uri)
    assert report.quarantined == 0 and report.landed == len(events)
