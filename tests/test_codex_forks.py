"""A forked Codex session imported beside the session it was forked from.

A fork (`codex fork`, the app server's `thread/fork`, Esc-Esc backtrack in the TUI of 2025) writes
a new rollout: its own `session_meta` first (new id, `forked_from_id`), then the parent's lines up
to the chosen prompt copied as they were (the parent's `session_meta` and `turn_id`s included),
each line re-stamped with the fork's time, then the fork's own turns (openai/codex
`codex-rs/rollout/src/recorder.rs` @ b505ee8, `core/src/rollout/policy.rs` @ 001cb8e,
`core/tests/suite/fork_thread.rs` @ 020dff0). No public rollout of a fork was found under a
licence (the search: 190 real rollouts of about 40 repositories, none forked), so the fork here is
made that way from the real rollout of tests/data/codex (SOURCE.md): its first two turns copied,
then its third turn asked again as the fork's own, with new ids and a later time.

Before, the copied `session_meta` switched the file to the parent's session: the copies met the
parent's events under the same ids with other times (quarantined as `event_id_conflict`) and the
fork's own turn landed in the parent's conversation.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.codex.importer import rollout_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import TURN_LOGS, TURN_LOGS_SCHEMA

PARENT = (
    Path(__file__).parent
    / "data"
    / "codex"
    / "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl"
)
PARENT_ID = "019c8a53-a0dd-7130-bcd7-95445d84846a"
IDENTITY = Identity(tenant="local", app="coding", user_id="ann")
ASKED_AGAIN = "do the same with polars instead of pandas"
COMPARED = ["conversation_id", "turn_id", "status", "ended_at", "payload", "title"]


def uuid7(at: datetime) -> str:
    """A UUIDv7 made at `at` (the random bits fixed: the test needs only its time)."""
    ms = int(at.timestamp() * 1000)
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (0x2 << 62) | 0x1234_5678))


def stamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def forked(parent: list[str], turn: int, at: datetime) -> tuple[str, list[str], str]:
    """A fork of `parent` at its `turn`-th prompt (0-based) made at `at`, as Codex writes one:
    (the fork's id, its lines, the id of its own turn)."""
    started = [i for i, line in enumerate(parent) if '"type":"task_started"' in line]
    cut, end = started[turn], started[turn + 1]
    prompt_item = next(i for i in range(cut, end) if '"role":"user"' in parent[i])
    fork_id, own_turn = uuid7(at), uuid7(at + timedelta(seconds=40))
    meta = {
        "timestamp": stamp(at),
        "type": "session_meta",
        "payload": {
            **json.loads(parent[0])["payload"],
            "id": fork_id,
            "forked_from_id": PARENT_ID,
            "timestamp": stamp(at),
        },
    }
    copied = [
        re.sub(r'^\{"timestamp":"[^"]+"', f'{{"timestamp":"{stamp(at)}"', line)
        for line in parent[:prompt_item]  # the copy holds the cut turn's task_started
    ]
    old_turn = json.loads(parent[cut])["payload"]["turn_id"]
    shift = (
        at + timedelta(seconds=40) - datetime.fromisoformat(json.loads(parent[cut])["timestamp"])
    )
    own = []
    for line in parent[cut:end]:
        record = json.loads(line.replace(old_turn, own_turn))
        record["timestamp"] = stamp(datetime.fromisoformat(record["timestamp"]) + shift)
        payload = record["payload"]
        if payload.get("type") == "user_message":
            payload["message"] = ASKED_AGAIN
        if isinstance(payload.get("call_id"), str):
            payload["call_id"] += "-fork"
        own.append(json.dumps(record, separators=(",", ":")))
    return fork_id, [json.dumps(meta, separators=(",", ":")), *copied, *own], own_turn


def _logs(settings: Settings, rollouts: list[Path]) -> pl.DataFrame:
    spool = Path(settings.landing_uri) / "spool"
    import_sessions(rollouts, spool, IDENTITY, rollout_events, settle_s=0)
    store = DeltaStore(settings.delta_uri)
    assert land(store, settings.landing_uri).quarantined == 0
    derive(store, settings)
    return store.read(TURN_LOGS, TURN_LOGS_SCHEMA)


def test_a_fork_holds_its_own_turns_and_leaves_the_parent_as_it_was(
    settings: Settings, tmp_path: Path
) -> None:
    parent_lines = PARENT.read_text().splitlines()
    last = datetime.fromisoformat(json.loads(parent_lines[-1])["timestamp"])
    fork_at = (last + timedelta(days=3)).astimezone(UTC)
    fork_id, fork_lines, own_turn = forked(parent_lines, 2, fork_at)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    parent = Path(shutil.copy(PARENT, sessions / PARENT.name))
    fork = sessions / f"rollout-{fork_at:%Y-%m-%dT%H-%M-%S}-{fork_id}.jsonl"
    fork.write_text("\n".join(fork_lines) + "\n")

    alone = _logs(settings.replace(home=tmp_path / "alone"), [parent])
    both = _logs(settings.replace(home=tmp_path / "both"), [parent, fork])

    in_parent = both.filter(pl.col("conversation_id") == PARENT_ID)
    assert in_parent.select(COMPARED).sort("turn_id").equals(alone.select(COMPARED).sort("turn_id"))
    mine = both.filter(pl.col("conversation_id") == fork_id)
    assert mine["turn_id"].to_list() == [own_turn]  # the copies stay the parent's
    assert mine["started_at"][0] >= fork_at
    assert ASKED_AGAIN in json.dumps(mine["payload"][0])
    assert both.height == alone.height + 1
