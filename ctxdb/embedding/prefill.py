"""Prefill of the vector cache in parallel steps, so a second worker speeds up the main job.

The embedding stage of a run over every shard (`memory_job`) is one step: it reads the role rows
changed since its watermark and embeds the texts no cache holds. When that is many texts, the
prefill embeds them first, shard by shard, one step per shard (on Celery or Kubernetes workers,
or in the multiprocess executor's processes), and writes only to the cache (`embeddings`: one
vector per model and text hash). The stage then finds them cached and writes statuses and
watermarks as always. Correctness stays with the stage: a prefill that fails or is skipped leaves
the texts for the stage to embed, and a text embedded twice (the same text in two shards, a
rerun) is appended twice with the same vector, and every reader keeps one vector per hash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import polars as pl

from ctxdb.embedding.cache import cached_hashes, embed_texts
from ctxdb.embedding.model import Embedder
from ctxdb.embedding.stage import BLANK, candidate_parts, pass_bounds, rows_to_embed
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard

log = logging.getLogger(__name__)


def uncached_texts(store: DeltaStore, model_id: str, shard: Shard | None) -> Iterator[pl.DataFrame]:
    """Part by part, the distinct (text_hash, text) that the next embedding run over every shard
    will send to the model (restricted to the role rows of `shard`): rows changed since its
    watermark or left to retry, not blank, not in the cache. Reads only."""
    bounds = pass_bounds(store, model_id, None)
    if bounds is None:
        return
    for rows, statuses in candidate_parts(store, model_id, bounds, shard, drop_gone=False):
        todo = rows_to_embed(rows, statuses, model_id).filter(~BLANK)
        texts = todo.unique("text_hash", keep="first").select("text_hash", "text")
        hits = cached_hashes(store, model_id, texts.get_column("text_hash"))
        yield texts.filter(~pl.col("text_hash").is_in(hits.implode()))


def count_uncached(store: DeltaStore, model_id: str) -> int:
    """How many texts the next embedding run over every shard will send to the model."""
    return sum(part.height for part in uncached_texts(store, model_id, None))


def prefill_shard(
    store: DeltaStore,
    embedder: Embedder,
    shard: Shard,
    *,
    batch_size: int,
    progress: Callable[[str], None] = log.info,
) -> int:
    """Embed the uncached texts of `shard` into the cache; returns how many were embedded (a
    failed text is left for the stage, which retries it and records its failure)."""
    embedded = 0
    for texts in uncached_texts(store, embedder.model_id, shard):
        if texts.is_empty():
            continue
        embedder.load()  # a model that cannot load raises EmbedderUnavailable once, here
        failures = embed_texts(store, embedder, texts, batch_size=batch_size, progress=progress)
        embedded += texts.height - len(failures)
    return embedded
