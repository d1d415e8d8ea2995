"""Claude Code's synthetic assistant lines (`"model":"<synthetic>"`) never replace or become an
answer (issue 40): a placeholder such as "No response requested." written after a real answer
leaves that answer in place, one written after a prompt makes no turn, and a synthetic API error
(`isApiErrorMessage`) still ends its turn in error. The one synthetic line that holds the model's
words is what it had streamed when the user interrupted it (Claude Code 2.1.8x writes it just
before "[Request interrupted by user]"): the cancelled turn's answer, as the host showed it.

The lines are added to a copy of a real transcript (tests/data/claude_code/-workspace), in the
shape Claude Code 2.x writes them (the placeholder: `isApiErrorMessage: false`, zero usage)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from claude_code_sessions import FIXTURES
from host_import_case import by_type

from ctxdb.capture.claude_code.importer import transcript_events
from ctxdb.capture.claude_code.turns import Identity

SOURCE = FIXTURES / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"
ANN = Identity("local", "claude-code", "ann")
PLACEHOLDER = "No response requested."
INTERRUPTED = "[Request interrupted by user]"


def synthetic(after: dict[str, Any], text: str, api_error: bool = False) -> dict[str, Any]:
    """A synthetic assistant line answering `after`, one second later, as Claude Code writes it."""
    at = after["timestamp"].replace("Z", "+00:00")
    seconds = int(at[17:19]) + 1
    line = {k: after[k] for k in ("isSidechain", "userType", "cwd", "sessionId", "version")}
    return line | {
        "parentUuid": after["uuid"],
        "gitBranch": after.get("gitBranch", ""),
        "type": "assistant",
        "uuid": str(uuid.uuid4()),
        "timestamp": f"{at[:17]}{seconds:02d}{at[19:]}".replace("+00:00", "Z"),
        "message": {
            "id": str(uuid.uuid4()),
            "container": None,
            "model": "<synthetic>",
            "role": "assistant",
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "type": "message",
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
            "content": [{"type": "text", "text": text}],
        },
        "isApiErrorMessage": api_error,
    }


def copy_with(tmp_path: Path, insert: dict[int, dict[str, Any]]) -> Path:
    """The real transcript with a line inserted after each given (0-based) line."""
    lines = SOURCE.read_text().splitlines()
    out = []
    for n, line in enumerate(lines):
        out.append(line)
        if n in insert:
            out.append(json.dumps(insert[n], separators=(",", ":")))
    path = tmp_path / SOURCE.name
    path.write_text("\n".join(out) + "\n")
    return path


def _answer_line(lines: list[dict[str, Any]], n: int) -> int:
    """The line of the `n`-th (0-based) text answer of the transcript."""
    answers = [
        i
        for i, line in enumerate(lines)
        if line.get("type") == "assistant"
        and any(b.get("type") == "text" for b in line["message"]["content"])
    ]
    return answers[n]


def test_a_placeholder_after_an_answer_never_replaces_it(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in SOURCE.read_text().splitlines()]
    first = _answer_line(lines, 0)
    original = transcript_events(SOURCE, ANN, settle_s=0).events
    path = copy_with(tmp_path, {first: synthetic(lines[first], PLACEHOLDER)})
    events = transcript_events(path, ANN, settle_s=0).events
    answers = [e["payload"]["text"] for e in by_type(events, "assistant.completion")]
    assert PLACEHOLDER not in answers
    assert answers[0].startswith("Done! Here's the output of `ls -la`")
    assert events == original  # the placeholder adds nothing at all


def test_a_placeholder_after_a_prompt_makes_no_turn_and_an_api_error_stays(
    tmp_path: Path,
) -> None:
    lines = [json.loads(line) for line in SOURCE.read_text().splitlines()]
    prompts = [
        i
        for i, line in enumerate(lines)
        if line.get("type") == "user" and isinstance(line["message"]["content"], str)
    ]
    second, third, fourth = prompts[1:4]
    answered_by = {  # each prompt's own answer lines replaced by one synthetic line
        second: synthetic(lines[second], PLACEHOLDER),
        third: synthetic(lines[third], "API Error: 529 Overloaded", api_error=True),
    }
    rebuilt = []
    for i, line in enumerate(lines):
        if second < i < third or third < i < fourth:
            continue
        rebuilt.append(line)
        if i in answered_by:
            rebuilt.append(answered_by[i])
    path = tmp_path / SOURCE.name
    path.write_text("\n".join(json.dumps(line) for line in rebuilt) + "\n")
    events = transcript_events(path, ANN, settle_s=0).events
    prompted = {e["turn_id"] for e in by_type(events, "user.submission")}
    assert lines[second]["uuid"] not in prompted  # no turn: the model never answered it
    answers = {e["turn_id"]: e["payload"] for e in by_type(events, "assistant.completion")}
    assert PLACEHOLDER not in [a["text"] for a in answers.values()]
    failed = answers[lines[third]["uuid"]]
    assert (failed["text"], failed["error"]) == ("API Error: 529 Overloaded", True)
    closed = {e["turn_id"]: e["payload"] for e in by_type(events, "turn.closed")}
    assert closed[lines[third]["uuid"]] == {"status": "error", "error_type": "api_error"}


@pytest.mark.parametrize(("streamed", "answered"), [(True, True), (False, False)])
def test_what_the_model_had_streamed_when_interrupted_is_the_cancelled_turns_answer(
    tmp_path: Path, streamed: bool, answered: bool
) -> None:
    """The first turn of the real transcript cut after its tool result, then the synthetic
    line (the first half of its real answer, or the placeholder) and the user's interrupt."""
    lines = [json.loads(line) for line in SOURCE.read_text().splitlines()]
    first = _answer_line(lines, 0)
    real = lines[first]["message"]["content"][0]["text"]
    partial = real[: len(real) // 2].rstrip()
    cut = synthetic(lines[4], partial if streamed else PLACEHOLDER)
    interrupt = {k: lines[1][k] for k in ("isSidechain", "userType", "cwd", "sessionId")} | {
        "type": "user",
        "uuid": str(uuid.uuid4()),
        "parentUuid": cut["uuid"],
        "timestamp": cut["timestamp"],
        "message": {"role": "user", "content": [{"type": "text", "text": INTERRUPTED}]},
    }
    rebuilt = [*lines[:5], cut, interrupt, *lines[first + 2 :]]
    path = tmp_path / SOURCE.name
    path.write_text("\n".join(json.dumps(line) for line in rebuilt) + "\n")
    events = transcript_events(path, ANN, settle_s=0).events
    mine = [e for e in events if e["turn_id"] == lines[1]["uuid"]]
    [closed] = by_type(mine, "turn.closed")
    assert closed["payload"] == {"status": "cancelled", "error_type": "interrupted"}
    answers = [e["payload"]["text"] for e in by_type(mine, "assistant.completion")]
    assert answers == ([partial] if answered else [])
    assert len(by_type(events, "user.submission")) == len(
        by_type(original_events(), "user.submission")
    )


def original_events() -> list[dict[str, Any]]:
    return transcript_events(SOURCE, ANN, settle_s=0).events
