"""Derivation's output is pinned: every derived table of a recorded sample equals what the
per-turn pydantic derivation (before issue 17's batched rewrite) wrote, row for row and byte for
byte (TurnLog JSON included), whatever the batch size.

`data/derive_golden/events.jsonl.gz`: 28 generated conversations of all four adapters (steers,
follow-ups, context events, attachments, hosted files, ReAct blocks, summaries, notes, citations,
stream aggregates, feedback, malformed lines, re-sent duplicates) plus edge cases: six
conversations without a title event, an open turn, a turn without a completion and a minimal turn
answered twice. One conversation is poisoned after landing (`"tokens_in": "5"`), so it lands in
`derive_failures`. The expected tables (`*.parquet`) were written by that earlier code through
`derived_tables` below; `CTXDB_UPDATE_DERIVE_GOLDEN=1` rewrites them from the current code (only
for a deliberate change of the TurnLog contract).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from pydantic_core import to_json

from ctxdb.contract.refs import RefError, make_ref
from ctxdb.landing.run import land
from ctxdb.record.run import derive, pack
from ctxdb.record.turns import _path_ok, iso, parse_turn_log
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS

GOLDEN = Path(__file__).parent / "data" / "derive_golden"
LANDED_AT = datetime(2026, 10, 31, tzinfo=UTC)
"""No later than the sample's first event: retention counts from the events' own times (the
recorded derivation predates the landing clock, ctxdb.record.expiry)."""
NOW = datetime(2026, 12, 1, 1, tzinfo=UTC)
POISONED = "c1530959b813547e2"
TABLES = {
    "turn_logs": ["conversation_id", "turn_id"],
    "conversation_timelines": ["conversation_id"],
    "role_rows": ["row_id"],
    "turn_catalog": ["conversation_id", "turn_id"],
    "replay_artifacts": ["conversation_id", "turn_id", "seq"],
    "derive_failures": ["conversation_id"],
}


def landed(tmp_path: Path) -> DeltaStore:
    """The sample landed, with POISONED's completions as the old lax contract let them land."""
    shutil.copy(GOLDEN / "events.jsonl.gz", tmp_path / "events.jsonl.gz")
    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(tmp_path), now=LANDED_AT)
    raw = store.read(RAW_TURN_EVENTS)
    poison = (pl.col("conversation_id") == POISONED) & (pl.col("type") == "assistant.completion")
    bad = json.dumps({"text": "x", "tokens_in": "5"})
    raw = raw.with_columns(
        pl.when(poison).then(pl.lit(bad)).otherwise(pl.col("payload")).alias("payload"),
        pl.lit(0, dtype=pl.Int64).alias("landed_version"),  # as recorded: before the empty create
    )
    store.overwrite(RAW_TURN_EVENTS, raw, RAW_EVENTS_SCHEMA)
    return store


def derived_tables(store: DeltaStore) -> dict[str, pl.DataFrame]:
    """Every derived table, sorted by its key; role rows without the session rows, which the
    recorded derivation predates (one per conversation, tests/test_session_rows.py)."""
    tables = {name: store.read(name).sort(keys) for name, keys in TABLES.items()}
    sessions = tables["role_rows"].filter(pl.col("role") == "session")
    users = tables["role_rows"].filter(pl.col("target") == "user")
    assert sorted(sessions["conversation_id"]) == sorted(users["conversation_id"].unique())
    tables["role_rows"] = tables["role_rows"].filter(pl.col("role") != "session")
    return tables


def settings(tmp_path: Path, batch: int, processes: int = 0) -> Settings:
    return Settings(home=tmp_path, derive_batch_conversations=batch, derive_processes=processes)


def assert_golden(tables: dict[str, pl.DataFrame]) -> None:
    for name, table in tables.items():
        expected = pl.read_parquet(GOLDEN / f"{name}.parquet")
        assert table.schema == expected.schema, name
        assert_frame_equal(table, expected, check_exact=True)


@pytest.mark.parametrize(("batch", "processes"), [(5_000, 0), (10, 1), (10, 3)])
def test_every_derived_table_equals_the_recorded_derivation(
    tmp_path: Path, batch: int, processes: int, caplog: pytest.LogCaptureFixture
) -> None:
    store = landed(tmp_path)

    with caplog.at_level(logging.INFO, logger="ctxdb.record.run"):
        stats = derive(store, settings(tmp_path, batch, processes), now=NOW)

    parallel = [r.getMessage() for r in caplog.records if "processes" in r.getMessage()]
    assert parallel == (["deriving 3 batches in 3 processes"] if processes == 3 else [])
    messages = [r.getMessage() for r in caplog.records]
    progress = [m for m in messages if m.startswith("derived batch")]
    if batch == 10:
        assert [line.split(":")[0] for line in progress] == [
            f"derived batch {n} of 3" for n in (1, 2, 3)
        ]
        assert progress[-1].startswith("derived batch 3 of 3: 28 conversations")
    else:
        assert progress == []

    tables = derived_tables(store)
    if os.environ.get("CTXDB_UPDATE_DERIVE_GOLDEN") == "1" and batch == 5_000:
        for name, table in tables.items():
            table.write_parquet(GOLDEN / f"{name}.parquet")
    assert (stats.failed, stats.open_turns) == (1, 1)
    assert tables["derive_failures"]["conversation_id"].to_list() == [POISONED]
    assert_golden(tables)


def test_batches_are_bounded_by_their_events(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With room for every conversation but 60 events a batch, each batch holds at most 60 of the
    events landed (one conversation over that alone), in id order, and the tables are the same."""
    store = landed(tmp_path)
    sizes = store.read(RAW_TURN_EVENTS).group_by("conversation_id").len().sort("conversation_id")
    bounded = Settings(home=tmp_path, derive_batch_events=60, derive_processes=1)

    with caplog.at_level(logging.INFO, logger="ctxdb.record.run"):
        stats = derive(store, bounded, now=NOW)

    expected = pack(sizes["conversation_id"].to_list(), sizes["len"].to_list(), 5_000, 60)
    assert stats.batches == len(expected) > 3
    for batch in expected:
        events = sizes.filter(pl.col("conversation_id").is_in(batch))["len"].sum()
        assert events <= 60 or len(batch) == 1, batch
    totals = [
        int(m.getMessage().rsplit(", ", 1)[1].split()[0])
        for m in caplog.records
        if m.getMessage().startswith("derived batch")
    ]
    batch_events = [b - a for a, b in zip([0, *totals], totals, strict=False)]
    assert batch_events == [
        sizes.filter(pl.col("conversation_id").is_in(batch))["len"].sum() for batch in expected
    ]
    assert_golden(derived_tables(store))


def test_packing_closes_a_batch_at_either_bound() -> None:
    assert pack(list("abcdefg"), [1, 2, 3, 10, 1, 1, 1], 3, 5) == [
        ["a", "b"],
        ["c"],
        ["d"],
        ["e", "f", "g"],
    ]
    assert pack(list("abcd"), [1, 1, 1, 1], 2, 100) == [["a", "b"], ["c", "d"]]
    assert pack([], [], 3, 5) == []


def test_reruns_and_a_full_rerun_leave_every_table_as_recorded(tmp_path: Path) -> None:
    store = landed(tmp_path)
    derive(store, settings(tmp_path, 10), now=NOW)

    again = derive(store, settings(tmp_path, 10), now=NOW)
    full = derive(store, settings(tmp_path, 12), now=NOW, full=True)

    assert again.events == 0
    assert full.events == store.read(RAW_TURN_EVENTS).height
    assert all(w["inserted"] == 0 for w in full.written.values())
    assert_golden(derived_tables(store))


def test_a_script_without_a_main_guard_derives_in_its_own_process(tmp_path: Path) -> None:
    """Worker processes start with `spawn`, which re-runs an unguarded `__main__`: those workers
    die before deriving anything, and the run derives every batch in its own process."""
    store = landed(tmp_path)
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(f"""
            from datetime import datetime, UTC
            from ctxdb.record.run import derive, pack
            from ctxdb.settings import Settings
            from ctxdb.storage.delta import DeltaStore
            settings = Settings(home={str(tmp_path)!r}, derive_batch_conversations=10,
                                derive_processes=2)
            stats = derive(DeltaStore({store.root!r}), settings, now=datetime.fromisoformat(
                {NOW.isoformat()!r}))
            print("derived", stats.conversations, stats.failed)
        """)
    )

    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "derived 27 1" in done.stdout
    assert "deriving the remaining 3 batches here" in done.stderr
    assert_golden(derived_tables(store))


def test_turn_log_payloads_are_the_turn_log_models_own_json(tmp_path: Path) -> None:
    store = landed(tmp_path)
    derive(store, settings(tmp_path, 7), now=NOW)

    logs = store.read("turn_logs")

    for payload, count in logs.select("payload", "block_count").iter_rows():
        log = parse_turn_log(payload)
        assert log.model_dump_json() == payload
        assert log.blocks_count == len(log.blocks) == count


def test_times_are_written_as_pydantic_writes_them() -> None:
    rng = random.Random(17)
    for _ in range(5_000):
        moment = datetime(
            rng.randint(1970, 2200),
            rng.randint(1, 12),
            rng.randint(1, 28),
            rng.randint(0, 23),
            rng.randint(0, 59),
            rng.randint(0, 59),
            rng.choice([0, rng.randint(0, 999_999)]),
            tzinfo=rng.choice([UTC, timezone(timedelta(hours=rng.randint(-12, 12)))]),
        )
        assert iso(moment) == to_json(moment.astimezone(UTC)).decode().strip('"')


@pytest.mark.parametrize(
    "path", ["a.csv", "d/a.csv", "a..b", "../x", "a/../b", "a/", "/a", "a//b", "a\\b", "", "x/.."]
)
def test_block_paths_are_checked_as_make_ref_checks_them(path: str) -> None:
    def outcome(build: Callable[[], str]) -> str:
        try:
            return build()
        except RefError as exc:
            return f"refused: {exc}"

    assert outcome(lambda: _path_ok(path, "fi", "turn_t1.")) == outcome(
        lambda: make_ref("fi", path, "t1")
    )
