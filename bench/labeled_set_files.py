"""What the labeled-set builders (`build_chitchat_set.py`, `build_realistic_set.py`) share: a
turn's contract events, the manifest of a built set and writing its events, questions and manifest
to a folder."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import typer


class TurnEnvelope(NamedTuple):
    """The envelope fields a labeled set's turn gives each of its events (in the contract's
    order): whose the turn is, the adapter that recorded it, its ids."""

    tenant: str
    app: str
    agent: str
    adapter: str
    user_id: str
    conversation_id: str
    turn_id: str


def turn_events(
    envelope: TurnEnvelope,
    prompt: str,
    answer: str,
    started: datetime,
    answered: datetime,
    title: str | None,
) -> list[dict[str, Any]]:
    """A closed turn's contract events, ids `<turn_id>-e<n>`: started, the conversation's title
    when given, the prompt, the answer, closed a second after it."""
    steps = [
        ("turn.started", started, {}),
        ("user.submission", started, {"text": prompt, "event_type": "prompt"}),
        ("assistant.completion", answered, {"text": answer, "error": False}),
        ("turn.closed", answered + timedelta(seconds=1), {"status": "ok"}),
    ]
    if title is not None:
        steps.insert(1, ("conversation.title", started, {"title": title}))
    return [
        {
            "event_id": f"{envelope.turn_id}-e{n}",
            "schema_version": 1,
            "type": kind,
            "occurred_at": at.isoformat().replace("+00:00", "Z"),
            **envelope._asdict(),
            "payload": payload,
        }
        for n, (kind, at, payload) in enumerate(steps)
    ]


def jsonl(rows: list[dict]) -> str:
    """`rows` as JSON lines (UTF-8 kept as is)."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def set_manifest(
    now: datetime,
    seed: int,
    per_user: dict[str, dict[str, int]],
    questions: list[dict],
    source: str | None = None,
) -> dict:
    """The manifest of a set: its clock, seed, `source` when given, per-user and total counts and
    the questions of each kind."""
    return {
        "now": now.isoformat(),
        "seed": seed,
        **({"source": source} if source is not None else {}),
        "users": per_user,
        "turns": sum(u["turns"] for u in per_user.values()),
        "conversations": sum(u["conversations"] for u in per_user.values()),
        "questions": len(questions),
        "kinds": dict(sorted(Counter(q["kind"] for q in questions).items())),
    }


def write_set(out: Path, events: list[dict], questions: list[dict], manifest: dict) -> None:
    """`events.jsonl`, `questions.jsonl` and `manifest.json` under `out`; prints the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "events.jsonl").write_text(jsonl(events))
    (out / "questions.jsonl").write_text(jsonl(questions))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    typer.echo(json.dumps(manifest))
