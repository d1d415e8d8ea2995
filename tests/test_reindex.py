"""Zero-downtime reindex on the real node: cache reuse, model change, failure, crash recovery,
and searches that keep answering while the new version is built."""

from __future__ import annotations

import threading

import pytest
from conftest_index import role_rows, turn_tables, write_rows

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target, create_index, index_meta, versions
from ctxdb.lifecycle.reindex import ReindexFailed, drop_after_grace, reindex

pytestmark = [pytest.mark.es, pytest.mark.model]

MODEL = "all-MiniLM-L6-v2"


def seed(delta_store, embedder, settings, es, n: int = 8) -> None:
    write_rows(delta_store, role_rows([f"answer number {i} about spreadsheets" for i in range(n)]))
    turn_tables(delta_store, 3)
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, settings, model_id=MODEL)


def targets(es, settings) -> dict[str, str | None]:
    return {
        k: alias_target(es, alias_name(settings.elasticsearch.index_prefix, k))
        for k in (ROWS, TURNS)
    }


def test_reindex_reuses_cached_embeddings_swaps_and_drops_old(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    seed(delta_store, embedder, es_settings, es)
    report = reindex(delta_store, es, es_settings, embedder, min_coverage_pct=100)
    assert report.embed.embedded == 0
    assert targets(es, es_settings) == {
        ROWS: f"{es_settings.elasticsearch.index_prefix}-rows-v2",
        TURNS: f"{es_settings.elasticsearch.index_prefix}-turns-v2",
    }
    assert (report.builds[ROWS].docs, report.builds[ROWS].vectors) == (8, 8)
    rows_alias = alias_name(es_settings.elasticsearch.index_prefix, ROWS)
    assert es.count(index=rows_alias)["count"] == 8
    aliases = es.indices.get_alias(name=rows_alias).body
    assert aliases == {
        f"{es_settings.elasticsearch.index_prefix}-rows-v2": {
            "aliases": {rows_alias: {"is_write_index": True}}
        }
    }
    assert sorted(versions(es, es_settings.elasticsearch.index_prefix, ROWS)) == [1, 2]
    assert drop_after_grace(es, es_settings, grace_s=0) == [
        f"{es_settings.elasticsearch.index_prefix}-rows-v1",
        f"{es_settings.elasticsearch.index_prefix}-turns-v1",
    ]
    assert sorted(versions(es, es_settings.elasticsearch.index_prefix, ROWS)) == [2]
    # the live sync continues on the new index from the versions the build recorded
    write_rows(delta_store, role_rows(["one more answer"], start=8))
    embed_role_rows(delta_store, embedder, batch_size=8)
    live = {r.kind: r for r in sync_live(delta_store, es, es_settings, model_id=MODEL)}
    assert (live[ROWS].index, live[ROWS].indexed, live[ROWS].full) == (
        f"{es_settings.elasticsearch.index_prefix}-rows-v2",
        1,
        False,
    )


def test_retired_index_kept_during_grace(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    seed(delta_store, embedder, es_settings, es, n=2)
    reindex(delta_store, es, es_settings, embedder)
    assert drop_after_grace(es, es_settings, grace_s=3600, wait=False) == []
    retired = f"{es_settings.elasticsearch.index_prefix}-rows-v1"
    assert "retired_at" in index_meta(es, retired)
    sync_live(delta_store, es, es_settings, model_id=MODEL)  # grace from settings: 60 s
    assert es.indices.exists(index=retired)


def test_changed_model_embeds_again(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    seed(delta_store, embedder, es_settings, es, n=4)
    other = SentenceTransformerEmbedder(batch_size=8, model_id="all-MiniLM-L6-v2@v2")
    report = reindex(delta_store, es, es_settings, other)
    assert report.embed.embedded == 4
    new_rows = targets(es, es_settings)[ROWS]
    assert index_meta(es, new_rows)["model_id"] == "all-MiniLM-L6-v2@v2"
    assert report.builds[ROWS].vectors == 4


def test_failed_reindex_leaves_aliases_untouched(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    seed(delta_store, embedder, es_settings, es, n=3)
    before = targets(es, es_settings)

    def crash(builds):
        raise RuntimeError("power cut before the swap")

    with pytest.raises(RuntimeError, match="power cut"):
        reindex(delta_store, es, es_settings, embedder, before_swap=crash)
    assert targets(es, es_settings) == before
    assert sorted(versions(es, es_settings.elasticsearch.index_prefix, ROWS)) == [1]
    with pytest.raises(ReindexFailed, match="coverage"):
        broken = SentenceTransformerEmbedder(batch_size=8, model_id="never-embedded")
        broken.model_name = "/nonexistent/model"
        reindex(delta_store, es, es_settings, broken, min_coverage_pct=90)
    assert targets(es, es_settings) == before


def test_interrupted_reindex_recovers(delta_store, embedder, es_settings):
    """A crash mid-build leaves an abandoned v2 (no alias); the next reindex deletes it and
    builds v2 afresh from Delta (the stale half-written document is gone)."""
    es = make_client(es_settings)
    seed(delta_store, embedder, es_settings, es, n=5)
    prefix = es_settings.elasticsearch.index_prefix
    abandoned = create_index(es, prefix, ROWS, 2, dims=384, model_id=MODEL, bulk_load=True)
    es.index(index=abandoned, id="half-written", document={"row_id": "half-written"})
    report = reindex(delta_store, es, es_settings, embedder)
    assert abandoned in report.abandoned_dropped
    assert targets(es, es_settings)[ROWS] == f"{prefix}-rows-v2"
    assert es.count(index=alias_name(prefix, ROWS))["count"] == 5
    assert not es.exists(index=alias_name(prefix, ROWS), id="half-written")


def test_searches_during_reindex_keep_answering(delta_store, embedder, es_settings):
    es = make_client(es_settings)
    seed(delta_store, embedder, es_settings, es, n=40)
    rows_alias = alias_name(es_settings.elasticsearch.index_prefix, ROWS)
    stop, answered, results, errors = threading.Event(), threading.Event(), [], []

    def search_loop() -> None:
        client = make_client(es_settings)
        while not stop.is_set():
            try:
                response = client.search(
                    index=rows_alias, query={"match": {"text": "spreadsheets"}}, size=1
                )
                hits = response["hits"]
                results.append((hits["hits"][0]["_index"], hits["total"]["value"]))
                answered.set()
            except Exception as exc:  # noqa: BLE001 - any failed search fails the test below
                errors.append(exc)

    worker = threading.Thread(target=search_loop)
    worker.start()
    try:
        assert answered.wait(30)
        report = reindex(delta_store, es, es_settings, embedder)
        answered.clear()
        assert answered.wait(30)  # at least one search after the swap
        drop_after_grace(es, es_settings, grace_s=0)
    finally:
        stop.set()
        worker.join()
    assert errors == []
    old, new = report.swaps[0].old, report.swaps[0].new
    assert {index for index, _ in results} == {old, new}
    assert {total for _, total in results} == {40}
