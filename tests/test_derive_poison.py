"""Issue 12, poison isolation in derivation (finding 6's second half): a conversation whose
derivation raises is recorded in `derive_failures` and left as it was, every other conversation
is derived, and deriving it later clears the entry.

The poison here is an event landed by the old lax contract (`"tokens_in": "5"`, stored as
written), which made `build_turn_record` raise `TypeError` for every conversation of the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest_turn_record import NOW, Turn, settings_for, write_jsonl

from ctxdb.landing.run import land
from ctxdb.lifecycle import erase as erasure
from ctxdb.record import batches as record_batches
from ctxdb.record import checks
from ctxdb.record.run import derive, last_derived_version
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    DERIVE_FAILURES,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
    ROLE_ROWS,
    TURN_LOGS,
)


def poisoned_store(tmp_path: Path) -> DeltaStore:
    """c-good-1, c-bad and c-good-2 landed; c-bad's completion holds `"tokens_in": "5"` as the
    old lax contract let it land."""
    events = [
        *Turn("c-good-1", "t1").basic().events,
        *Turn("c-bad", "t1").basic().events,
        *Turn("c-good-2", "t1").basic().events,
    ]
    write_jsonl(tmp_path / "landing" / "a.jsonl", events)
    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(tmp_path / "landing"), now=NOW)
    raw = store.read(RAW_TURN_EVENTS)
    poison = (pl.col("conversation_id") == "c-bad") & (pl.col("type") == "assistant.completion")
    raw = raw.with_columns(
        pl.when(poison)
        .then(pl.lit(json.dumps({"text": "Convert it.", "tokens_in": "5"})))
        .otherwise(pl.col("payload"))
        .alias("payload")
    )
    store.overwrite(RAW_TURN_EVENTS, raw, RAW_EVENTS_SCHEMA)
    return store


def test_finding_6_a_poisoned_conversation_is_recorded_and_the_rest_derive(
    tmp_path: Path,
) -> None:
    store = poisoned_store(tmp_path)

    stats = derive(store, settings_for(tmp_path), now=NOW)  # before: TypeError, nothing derived

    assert (stats.conversations, stats.failed, stats.turns) == (2, 1, 2)
    assert sorted(store.read(TURN_LOGS)["conversation_id"]) == ["c-good-1", "c-good-2"]
    failure = store.read(DERIVE_FAILURES).row(0, named=True)
    assert failure["conversation_id"] == "c-bad"
    assert (failure["tenant"], failure["app"], failure["user_id"]) == ("acme", "chat", "u1")
    assert failure["error_type"] == "TypeError"
    assert "str" in failure["error"] and "\n" not in failure["error"]
    assert failure["landed_version"] == store.read(RAW_TURN_EVENTS)["landed_version"].max()
    assert last_derived_version(store) == failure["landed_version"]  # the run moved on

    # The blocking check does not stop embedding for everyone; the failure is reported instead.
    assert checks.closed_turns_have_one_turn_log(store).passed
    report = checks.derive_failures_report(store)
    assert not report.passed and report.count == 1
    assert report.offenders[0].startswith("c-bad: TypeError: ")


def test_deriving_the_conversation_later_clears_its_failure(tmp_path: Path) -> None:
    store = poisoned_store(tmp_path)
    settings = settings_for(tmp_path)
    derive(store, settings, now=NOW)
    store.delete(RAW_TURN_EVENTS, "conversation_id = 'c-bad' AND type = 'assistant.completion'")
    follow_up = Turn("c-bad", "t2").basic().events
    write_jsonl(tmp_path / "landing" / "b.jsonl", follow_up)
    land(store, str(tmp_path / "landing"), now=NOW)

    stats = derive(store, settings, now=NOW)

    assert (stats.conversations, stats.failed) == (1, 0)
    assert store.read(DERIVE_FAILURES).is_empty()
    bad = store.read(TURN_LOGS).filter(pl.col("conversation_id") == "c-bad")
    assert sorted(bad["turn_id"]) == ["t1", "t2"]


def test_a_full_rebuild_keeps_the_rows_of_a_conversation_that_fails_now(tmp_path: Path) -> None:
    store = poisoned_store(tmp_path)
    settings = settings_for(tmp_path)
    raw = store.read(RAW_TURN_EVENTS)
    good = raw.with_columns(
        pl.when(pl.col("payload").str.contains('"5"'))
        .then(pl.lit(json.dumps({"text": "Convert it."})))
        .otherwise(pl.col("payload"))
        .alias("payload")
    )
    store.overwrite(RAW_TURN_EVENTS, good, RAW_EVENTS_SCHEMA)
    derive(store, settings, now=NOW)
    rows_before = store.read(ROLE_ROWS).filter(pl.col("conversation_id") == "c-bad").height
    store.overwrite(RAW_TURN_EVENTS, raw, RAW_EVENTS_SCHEMA)  # c-bad is poisoned again

    stats = derive(store, settings, now=NOW, full=True)

    assert (stats.conversations, stats.failed) == (2, 1)
    assert store.read(TURN_LOGS)["conversation_id"].n_unique() == 3  # c-bad's rows kept
    assert store.read(ROLE_ROWS).filter(pl.col("conversation_id") == "c-bad").height == rows_before


def test_a_failure_of_every_conversation_is_a_fault_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = poisoned_store(tmp_path)

    def broken(*_: object) -> None:  # a fake: this test is about derivation itself failing
        raise KeyError("a bug, not bad data")

    monkeypatch.setattr(record_batches, "derive_tables", broken)
    with pytest.raises(KeyError, match="a bug"):
        derive(store, settings_for(tmp_path), now=NOW)
    assert last_derived_version(store) == -1
    assert not store.exists(DERIVE_FAILURES)


def test_an_erasure_clears_the_failure_of_what_it_erased(tmp_path: Path) -> None:
    store = poisoned_store(tmp_path)
    settings = settings_for(tmp_path)
    derive(store, settings, now=NOW)

    report = erasure.erase(store, None, settings, erasure.Scope("conversation_id", "c-bad"))

    assert report.deleted_rows[DERIVE_FAILURES] == 1
    assert store.read(DERIVE_FAILURES).is_empty()
    assert checks.derive_failures_report(store).passed
