"""Builders for the turn-record tests: raw events, JSONL files, a landed and derived sample."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import Generated, generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
LANDED = NOW - timedelta(days=31)
"""When the fixtures land: no later than any of their events (the sample spans the 30 days
before NOW), so each row's retention clock is its own time (ctxdb.record.expiry)."""
IDENTITY = {"tenant": "acme", "app": "chat", "user_id": "u1"}


class Turn:
    """Builds the raw events of one turn with increasing timestamps."""

    def __init__(
        self,
        conversation_id: str,
        turn_id: str,
        adapter: str = "minimal",
        start: datetime = T0,
        agent: str = "helper",
        **identity: str,
    ) -> None:
        self.conversation_id, self.turn_id, self.adapter = conversation_id, turn_id, adapter
        self.identity = {**IDENTITY, **identity, "agent": agent}
        self.ts = start
        self.n = 0
        self.events: list[dict[str, Any]] = []

    def add(
        self,
        type_: str,
        payload: dict | None = None,
        *,
        at: datetime | None = None,
        adapter: str | None = None,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        self.n += 1
        self.ts = at or self.ts + timedelta(seconds=5)
        event = {
            "event_id": event_id or f"{self.conversation_id}-{self.turn_id}-{self.n}",
            "schema_version": 1,
            "type": type_,
            "occurred_at": self.ts.isoformat().replace("+00:00", "Z"),
            **self.identity,
            "adapter": adapter or self.adapter,
            "conversation_id": self.conversation_id,
            "turn_id": self.turn_id,
            "payload": payload or {},
        }
        self.events.append(event)
        return event

    def basic(
        self,
        prompt: str = "How do I fix the openpyxl error?",
        answer: str = "Convert it.",
        close: bool = True,
    ) -> Turn:
        self.add("turn.started")
        self.add("user.submission", {"text": prompt, "event_type": "prompt"})
        self.add("assistant.completion", {"text": answer, "tokens_in": 10, "tokens_out": 5})
        if close:
            self.add("turn.closed")
        return self


def write_jsonl(path: Path, events: Iterable[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def settings_for(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path)


def land_and_derive(store: DeltaStore, landing: Path, settings: Settings) -> None:
    """Land (at `LANDED`, so retention counts from the events' own times) and derive."""
    land(store, str(landing), now=LANDED)
    derive(store, settings, now=NOW)


def comparable(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """A frame without run-time columns, sorted by `keys` (for state comparisons)."""
    drop = [c for c in ("updated_at", "derived_at") if c in frame.columns]
    return frame.drop(drop).sort(keys)


def build_sample(root: Path) -> tuple[Generated, DeltaStore, Settings]:
    """A small generated sample (all four adapters), landed and derived under `root`."""
    generated = generate_events(
        users=4, conversations=24, seed=11, now=NOW, malformed_ratio=0.01, duplicate_ratio=0.01
    )
    write_sample(generated, root / "landing", files_root=root / "files", per_file=300)
    store = DeltaStore(str(root / "delta"))
    settings = settings_for(root)
    land_and_derive(store, root / "landing", settings)
    return generated, store, settings
