"""DeltaStore.merge and schema evolution (real Delta tables under tmp_path): only a writer that
casts to its contract schema (derivation, `evolve=True`) adds columns to a table; any other
MERGE leaves the table's schema as it is, so a stray column never reaches a contract table."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ctxdb.storage.delta import DeltaStore


def test_a_stray_column_does_not_reach_the_table(tmp_path: Path) -> None:
    store = DeltaStore(str(tmp_path))
    store.upsert("t", pl.DataFrame({"k": [1], "v": ["a"]}), ["k"])
    store.upsert("t", pl.DataFrame({"k": [1, 2], "v": ["b", "c"], "stray": [1, 2]}), ["k"])
    assert store.read("t").sort("k").to_dict(as_series=False) == {"k": [1, 2], "v": ["b", "c"]}


def test_an_evolving_merge_adds_the_contract_column(tmp_path: Path) -> None:
    store = DeltaStore(str(tmp_path))
    store.upsert("t", pl.DataFrame({"k": [1], "v": ["a"]}), ["k"])
    source = pl.DataFrame({"k": [2], "v": ["c"], "context": ["asked?"]}).to_arrow()
    counts = store.merge("t", source, ["k"], evolve=True)
    assert counts["inserted"] == 1
    rows = store.read("t").sort("k").to_dict(as_series=False)
    assert rows == {"k": [1, 2], "v": ["a", "c"], "context": [None, "asked?"]}
