"""The embedding prefill (issue 25: a second worker that helps the main job): the vector cache
filled shard by shard before the embedding stage, which then finds every text cached and writes
the same statuses as without it. Real Delta tables in tmp_path and the real model; the Dagster
asset run through `materialize`, one step per shard."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest_index import role_rows, write_rows
from dagster import DagsterInstance, materialize

from assets.embedding_prefill import PREFILL, embedding_prefill
from assets.embeddings import role_row_embeddings
from assets.shards import all_shards_tags, shard_count
from ctxdb.embedding.cache import read_vectors
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.prefill import count_uncached, prefill_shard
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard
from ctxdb.storage.tables import EMBEDDINGS, ROW_EMBEDDINGS
from pipelines.resources import build_resources

pytestmark = pytest.mark.model

SHARDS = 3
TOPICS = ["timezone bug", "retry budget", "parquet footer", "lease fencing", "trigram fuzz"]


def write_memory(store: DeltaStore, start: int = 0) -> int:
    """Role rows of six conversations: distinct texts, one text repeated, one blank row; returns
    how many distinct non-blank texts they hold."""
    texts = set()
    for n in range(6):
        rows = [f"conversation {n} on the {topic}" for topic in TOPICS[: 2 + n % 3]]
        rows += ["the same words in every conversation", "  "]
        texts.update(t for t in rows if t.strip())
        write_rows(store, role_rows(rows, conversation=f"c{n}", start=start))
    return len(texts)


def statuses(store: DeltaStore) -> pl.DataFrame:
    columns = ["row_id", "model_id", "text_hash", "embedding_status", "attempts"]
    return store.read(ROW_EMBEDDINGS).select(columns).sort("row_id")


def test_every_shard_prefilled_leaves_the_stage_only_cache_hits(tmp_path, embedder) -> None:
    store, plain = DeltaStore(str(tmp_path / "prefilled")), DeltaStore(str(tmp_path / "plain"))
    texts = write_memory(store)
    write_memory(plain)
    assert count_uncached(store, embedder.model_id) == texts

    done = [prefill_shard(store, embedder, Shard(i, SHARDS), batch_size=8) for i in range(SHARDS)]
    # the repeated text belongs to every shard, so each shard embeds it once: the cache may hold
    # it more than once, and readers keep one vector per hash
    assert sum(done) >= texts
    assert count_uncached(store, embedder.model_id) == 0
    assert not store.exists(ROW_EMBEDDINGS)  # the prefill wrote no status

    report = embed_role_rows(store, embedder, batch_size=8)
    reference = embed_role_rows(plain, embedder, batch_size=8)
    assert report.embedded == 0 and reference.embedded == texts
    assert report.cache_hits == reference.to_process - reference.skipped == report.to_process - 6
    assert statuses(store).equals(statuses(plain))
    ours = read_vectors(store, embedder.model_id).sort("text_hash")
    theirs = read_vectors(plain, embedder.model_id).sort("text_hash")
    assert ours["text_hash"].equals(theirs["text_hash"])
    assert all(
        sum(a * b for a, b in zip(x, y, strict=True)) > 0.9999
        for x, y in zip(ours["vector"].to_list(), theirs["vector"].to_list(), strict=True)
    )


def test_the_prefill_counts_only_what_the_next_run_embeds_and_deletes_nothing(
    delta_store, embedder
) -> None:
    write_memory(delta_store)
    embed_role_rows(delta_store, embedder, batch_size=8)
    assert count_uncached(delta_store, embedder.model_id) == 0

    write_rows(delta_store, role_rows(["a new question on fencing tokens"], conversation="c9"))
    gone = delta_store.read(ROW_EMBEDDINGS).height
    delta_store.delete("role_rows", "conversation_id = 'c0'")
    version = delta_store.version(ROW_EMBEDDINGS)
    assert count_uncached(delta_store, embedder.model_id) == 1
    assert sum(prefill_shard(delta_store, embedder, Shard(i, 2), batch_size=8) for i in (0, 1)) == 1
    assert delta_store.version(ROW_EMBEDDINGS) == version  # the stage drops statuses, not it
    report = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (report.to_process, report.cache_hits, report.embedded) == (1, 1, 0)
    assert delta_store.read(ROW_EMBEDDINGS).height < gone  # c0's statuses dropped by the stage


def run_assets(
    store: DeltaStore,
    threshold: int,
    tags: dict[str, str] | None = None,
    instance: DagsterInstance | None = None,
):
    home = Path(store.root).parent
    embedding = {"batch_size": 8, "prefill_min_texts": threshold}
    resources = build_resources(Settings(home=home, embedding=embedding))
    return materialize(
        [embedding_prefill, role_row_embeddings],
        resources=resources,
        tags=all_shards_tags() if tags is None else tags,
        instance=instance,
    )


def embedded_by_the_stage(result) -> int:
    """The `embedded` count of the stage's run (one materialization per shard partition, all
    with the run's metadata)."""
    (embedded,) = {
        e.step_materialization_data.materialization.metadata["embedded"].value
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == ROW_EMBEDDINGS
    }
    return embedded


def prefill_steps(result) -> list[str]:
    done = (e.step_key for e in result.all_events if e.is_step_success)
    return sorted(key for key in done if ".prefill_step[" in key)


def test_the_asset_fans_out_one_step_per_shard_from_the_threshold(tmp_path) -> None:
    big, small = (DeltaStore(str(tmp_path / name / "delta")) for name in ("big", "small"))
    texts = write_memory(big)
    write_memory(small)

    fanned = run_assets(big, threshold=texts)
    assert fanned.success
    count = shard_count()
    assert prefill_steps(fanned) == sorted(
        f"{PREFILL}.prefill_step[{i}_of_{count}]" for i in range(count)
    )
    assert embedded_by_the_stage(fanned) == 0  # every text was in the cache already
    assert {e.asset_key.to_user_string() for e in fanned.get_asset_materialization_events()} >= {
        PREFILL,
        ROW_EMBEDDINGS,
        EMBEDDINGS,
    }

    alone = run_assets(small, threshold=texts + 1)  # under the threshold: no prefill step
    assert alone.success and prefill_steps(alone) == []
    assert embedded_by_the_stage(alone) == texts
    assert statuses(big).equals(statuses(small))

    again = run_assets(big, threshold=1)  # nothing left to embed: no step either
    assert again.success and prefill_steps(again) == []


def test_a_run_of_one_shard_gets_no_prefill(tmp_path) -> None:
    store = DeltaStore(str(tmp_path / "delta"))
    write_memory(store)
    one = run_assets(store, threshold=1, tags={"dagster/partition": "0"})
    assert one.success and prefill_steps(one) == []
    assert embedded_by_the_stage(one) > 0  # the shard embedded its own texts


def test_a_failing_prefill_step_leaves_its_texts_to_the_stage(tmp_path, monkeypatch) -> None:
    """The object store failing under a prefill step: stood in for by a `prefill_shard` that
    raises what a throttled S3 append raises. The run still succeeds and the stage embeds it
    all."""
    import assets.embedding_prefill as prefill_asset

    def throttled(*args, **kwargs) -> int:
        raise OSError("object store error: SlowDown (503)")

    monkeypatch.setattr(prefill_asset, "prefill_shard", throttled)
    store = DeltaStore(str(tmp_path / "delta"))
    texts = write_memory(store)
    with DagsterInstance.ephemeral() as instance:
        result = run_assets(store, threshold=1, instance=instance)
        logged = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert result.success and len(prefill_steps(result)) == shard_count()
    assert embedded_by_the_stage(result) == texts
    warnings = [message for message in logged if "prefill failed" in message]
    assert len(warnings) == shard_count() and "SlowDown" in warnings[0]


def test_a_full_pass_prefill_deletes_no_status(delta_store, embedder) -> None:
    """Statuses of another model make the next run a full pass (`pass_bounds` since None): the
    prefill reads every part and, unlike the stage, drops no status of a row that is gone."""
    write_memory(delta_store)
    embed_role_rows(delta_store, embedder, batch_size=8)
    delta_store.delete("role_rows", "conversation_id = 'c1'")
    version, before = delta_store.version(ROW_EMBEDDINGS), statuses(delta_store)
    other = SentenceTransformerEmbedder(batch_size=8, model_id="all-MiniLM-L6-v2@other")
    assert count_uncached(delta_store, other.model_id) > 0
    assert sum(prefill_shard(delta_store, other, Shard(i, 2), batch_size=8) for i in (0, 1))
    assert delta_store.version(ROW_EMBEDDINGS) == version
    assert statuses(delta_store).equals(before)
    report = embed_role_rows(delta_store, other, batch_size=8)
    assert report.embedded == 0 and report.cache_hits > 0
    assert statuses(delta_store).height < before.height  # the stage dropped c1's
