"""Issue 26 item 3: the embedding stage's full pass reads, embeds and MERGEs role rows part by
part (by a stable hash of `row_id`); it leaves the same statuses as one pass over the whole table,
embeds each distinct text once across parts, and drops the statuses of deleted rows in every part.

Real Delta tables in tmp_path and the real all-MiniLM-L6-v2 model."""

from __future__ import annotations

import polars as pl
import pytest
from conftest_index import role_rows, write_rows

from ctxdb.embedding import stage
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import EMBEDDINGS, ROW_EMBEDDINGS

pytestmark = pytest.mark.model

TEXTS = [f"note {i % 7} about the billing migration" for i in range(20)] + ["", "  "]


def status_rows(store) -> pl.DataFrame:
    return (
        store.read(ROW_EMBEDDINGS).select("row_id", "text_hash", "embedding_status").sort("row_id")
    )


def test_a_full_pass_in_parts_equals_one_pass(tmp_path, embedder, monkeypatch) -> None:
    whole, parted = DeltaStore(str(tmp_path / "whole")), DeltaStore(str(tmp_path / "parted"))
    for store in (whole, parted):
        write_rows(store, role_rows(TEXTS))
    one = embed_role_rows(whole, embedder, batch_size=8)
    monkeypatch.setattr(stage, "FULL_PART_ROWS", 5)
    parts = embed_role_rows(parted, embedder, batch_size=8)
    assert (parts.to_process, parts.skipped) == (one.to_process, one.skipped) == (22, 2)
    assert parts.embedded == one.embedded == 7  # each distinct text once across the parts
    assert parts.cache_hits > 0  # a later part finds the texts an earlier part embedded
    assert status_rows(parted).equals(status_rows(whole))
    assert parted.read(EMBEDDINGS).height == 7


def test_a_full_pass_in_parts_drops_statuses_of_deleted_rows(delta_store, embedder, monkeypatch):
    write_rows(delta_store, role_rows(TEXTS))
    embed_role_rows(delta_store, embedder, batch_size=8)
    delta_store.delete("role_rows", "row_id IN ('c1-r0', 'c1-r9', 'c1-r17')")
    monkeypatch.setattr(stage, "FULL_PART_ROWS", 4)
    other = embed_role_rows(delta_store, embedder.__class__(model_id="all-MiniLM-L6-v2@x"))
    assert other.to_process == 19
    assert set(status_rows(delta_store)["row_id"]) == {f"c1-r{i}" for i in range(22)} - {
        "c1-r0",
        "c1-r9",
        "c1-r17",
    }
