"""Issue 26 item 3: a full index sync builds and indexes its documents part by part (by a stable
hash of the rows' partition column), so its memory is bounded by a part, not by the tables; the
parts together are exactly the documents of one whole build, and a full sync in parts gives the
same index (stale ids deleted once every part is written).

Real Delta tables in tmp_path, the real node (unique index prefix) and the real model."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest
from conftest_index import role_rows, turn_tables, write_rows

from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index import incremental
from ctxdb.index.client import make_client
from ctxdb.index.documents import ID
from ctxdb.index.incremental import build_base, current_versions, full_parts
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sources import ROWS_SOURCE, TURNS_SOURCE
from ctxdb.index.sync import sync_live
from ctxdb.storage.shards import Shard, all_shards, in_shard

pytestmark = [pytest.mark.es, pytest.mark.model]

MODEL = "all-MiniLM-L6-v2"
SOURCES = (ROWS, TURNS)


def documents(es, alias: str) -> dict[str, dict]:
    response = es.search(index=alias, size=100, query={"match_all": {}})
    return {hit["_id"]: hit["_source"] for hit in response["hits"]["hits"]}


def test_the_parts_of_a_full_build_are_the_whole_build(delta_store, embedder, monkeypatch) -> None:
    for conversation in ("c1", "c2", "c3", "c4"):
        write_rows(
            delta_store,
            role_rows([f"{conversation} says {i}" for i in range(5)], conversation=conversation),
        )
        turn_tables(delta_store, 3, conversation=conversation)
    embed_role_rows(delta_store, embedder, batch_size=8)
    monkeypatch.setattr(incremental, "FULL_PART_ROWS", 6)
    for source in (ROWS_SOURCE, TURNS_SOURCE):
        versions = current_versions(delta_store, source.tables)
        whole = build_base(delta_store, source, versions, MODEL).sort(ID)
        count = full_parts(delta_store, source, versions)
        assert count > 1
        parts = [
            build_base(delta_store, source, versions, MODEL, Shard(n, count)) for n in range(count)
        ]
        assert sum(p.height for p in parts) == whole.height
        assert pl.concat(parts).sort(ID).equals(whole)


def test_bytes_bound_a_part_where_rows_do_not(delta_store, monkeypatch) -> None:
    """A part of turns is bounded by the source tables' parquet bytes too (TurnLog payloads make
    a turn several KB): with rows allowing one part, the bytes split the build."""
    for conversation in ("c1", "c2", "c3"):
        turn_tables(delta_store, 4, conversation=conversation)
    versions = current_versions(delta_store, TURNS_SOURCE.tables)
    assert full_parts(delta_store, TURNS_SOURCE, versions) == 1
    files = [pa.table(delta_store.table(t).get_add_actions(flatten=True)) for t in versions]
    size = sum(sum(f["size_bytes"].to_pylist()) for f in files)
    monkeypatch.setattr(incremental, "FULL_PART_BYTES", size // 3)
    count = full_parts(delta_store, TURNS_SOURCE, versions)
    assert count in (3, 4)  # ceil(size / (size // 3))
    whole = build_base(delta_store, TURNS_SOURCE, versions, MODEL).sort(ID)
    parts = [
        build_base(delta_store, TURNS_SOURCE, versions, MODEL, Shard(n, count))
        for n in range(count)
    ]
    assert pl.concat(parts).sort(ID).equals(whole)


def test_a_full_sync_in_parts_gives_the_same_index(
    delta_store, embedder, es_settings, monkeypatch
) -> None:
    es = make_client(es_settings)
    for conversation in ("c1", "c2", "c3"):
        write_rows(
            delta_store,
            role_rows([f"{conversation} answer {i}" for i in range(4)], conversation=conversation),
        )
        turn_tables(delta_store, 2, conversation=conversation)
    embed_role_rows(delta_store, embedder, batch_size=8)
    whole = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert whole[ROWS].full and whole[ROWS].indexed == 12
    aliases = {kind: alias_name(es_settings.elasticsearch.index_prefix, kind) for kind in SOURCES}
    before = {kind: documents(es, alias) for kind, alias in aliases.items()}

    es.index(index=aliases[ROWS], id="stale-row", document={"text": "gone"}, refresh=True)
    delta_store.delete("index_state", "kind = 'rows' OR kind = 'turns'")
    monkeypatch.setattr(incremental, "FULL_PART_ROWS", 5)
    parted = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert (parted[ROWS].full, parted[ROWS].indexed, parted[ROWS].deleted) == (True, 12, 1)
    assert (parted[ROWS].docs, parted[TURNS].docs, parted[ROWS].vectors) == (12, 6, 12)
    assert {kind: documents(es, alias) for kind, alias in aliases.items()} == before


def test_a_shard_build_keeps_only_its_conversations_in_the_scans(delta_store, embedder) -> None:
    for conversation in ("c1", "c2", "c3", "c4", "c5"):
        write_rows(delta_store, role_rows([f"{conversation} row"], conversation=conversation))
        turn_tables(delta_store, 2, conversation=conversation)
    embed_role_rows(delta_store, embedder, batch_size=8)
    for source in (ROWS_SOURCE, TURNS_SOURCE):
        versions = current_versions(delta_store, source.tables)
        whole = build_base(delta_store, source, versions, MODEL)
        shards = all_shards(2)
        built = [build_base(delta_store, source, versions, MODEL, Shard(0, 1), s) for s in shards]
        pairs = zip(built, shards, strict=True)
        assert [b.sort(ID).equals(in_shard(whole, s).sort(ID)) for b, s in pairs] == [True, True]
        assert all(0 < b.height < whole.height for b in built)
        assert full_parts(delta_store, source, versions, Shard(0, 2)) == 1
