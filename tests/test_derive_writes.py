"""How derivation writes a batch (`DeltaStore.replace_groups`, real Delta tables under tmp_path):
conversations a table does not hold yet are appended, and a MERGE for the conversations it does
hold matches only within them, so a write reads the files of the conversations it changes and
not every file the batch's id range spans; the tables equal one derivation of every event."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from conftest_turn_record import T0, Turn, comparable, land_and_derive, settings_for, write_jsonl
from deltalake import DeltaTable

from ctxdb.record.run import TARGETS
from ctxdb.storage.delta import DeltaStore


def last_commit(store: DeltaStore, table: str) -> dict:
    return DeltaTable(store.uri(table)).history(1)[0]


def test_new_conversations_are_appended_and_stored_ones_merged_within_them(
    tmp_path: Path,
) -> None:
    store = DeltaStore(str(tmp_path / "delta"))
    one_per_batch = settings_for(tmp_path).replace(derive_batch_conversations=1)
    first = [Turn(c, "t1", start=T0 + timedelta(minutes=i)).basic() for i, c in enumerate("amz")]
    write_jsonl(tmp_path / "in" / "1.jsonl", [e for t in first for e in t.events])
    land_and_derive(store, tmp_path / "in", one_per_batch)
    # an increment of a new conversation only: appended, no MERGE
    new = Turn("b", "t1", start=T0 + timedelta(hours=1)).basic()
    write_jsonl(tmp_path / "in" / "2.jsonl", new.events)
    land_and_derive(store, tmp_path / "in", settings_for(tmp_path))
    written = [t for t in TARGETS if store.read(t.table).height]  # a minimal turn has no replay
    assert {last_commit(store, t.table)["operation"] for t in written} == {"WRITE"}
    # a new conversation beside a stored one in the same batch: a MERGE within the stored one
    later = [Turn("n", "t1", start=T0 + timedelta(hours=2)).basic()]
    later.append(Turn("z", "t2", start=T0 + timedelta(hours=3)).basic())
    write_jsonl(tmp_path / "in" / "3.jsonl", [e for t in later for e in t.events])
    land_and_derive(store, tmp_path / "in", settings_for(tmp_path))
    for target in written:
        commit = last_commit(store, target.table)
        assert commit["operation"] == "MERGE", target.table
        predicate = commit["operationParameters"]["mergePredicate"]
        assert "'z'" in predicate and "'n'" not in predicate and "'a'" not in predicate

    reference = DeltaStore(str(tmp_path / "reference"))
    land_and_derive(reference, tmp_path / "in", settings_for(tmp_path))
    for target in TARGETS:
        keys = list(target.keys)
        assert comparable(store.read(target.table), keys).equals(
            comparable(reference.read(target.table), keys)
        ), target.table
