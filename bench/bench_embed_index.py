"""Benchmark embedding and indexing of generated role rows against bare library calls.

    ELASTICSEARCH_URL=http://127.0.0.1:9299 .venv/bin/python bench/bench_embed_index.py \
        --rows 100000 --min-words 15 --max-words 45

Same run, same texts:
  1. bare `model.encode` over the texts vs the embedding stage (`embed_role_rows`: Delta read,
     cache lookup, token truncation, batching, cache and status writes);
  2. bare `helpers.bulk` of the finished, already serialized documents into a scratch index vs
     the indexing stage (`sync_live`: Delta reads, document building with stems and vectors,
     serialization, bulk requests in flight on a small thread pool, refresh);
  3. a second run of both stages with no change vs the first.
Prints one JSON object with rows/s of each and the three ratios (targets >= 0.9, >= 0.8, < 5 %).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
from elasticsearch import Elasticsearch, helpers
from stages import cache_random_vectors

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.documents import index_actions
from ctxdb.index.incremental import build_base, current_versions
from ctxdb.index.mappings import ROWS, alias_name, index_body
from ctxdb.index.sources import ROWS_SOURCE
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import KINDS, ensure_index
from ctxdb.settings import Settings, get_settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA
from ctxdb.text import text_hash, trigrams

WORDS = (
    "spreadsheet timezone conversion openpyxl dataframe column pivot chart forecast revenue "
    "invoice customer report error traceback import module function parameter value string "
    "date month quarter budget python pandas excel formula cell sheet workbook export csv "
    "query database index search vector embedding model latency deploy server request response "
    "cache retry timeout the a of to and in for with on by from after before fixed found wrote "
    "updated checked compared merged cleaned loaded saved returned produced explained answered "
    "user assistant summary note file attachment meeting schedule travel budget plan draft"
).split()


def generate_rows(n: int, min_words: int, max_words: int, seed: int = 7) -> pl.DataFrame:
    """`n` assistant role rows with unique texts of min..max words, 4 rows per turn."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    texts = [
        " ".join(rng.choices(WORDS, k=rng.randint(min_words, max_words))) + f" case {i}"
        for i in range(n)
    ]
    i = pl.int_range(0, n, eager=True)
    return pl.DataFrame({"i": i, "text": texts}).with_columns(
        row_id=pl.format("row-{}", pl.col("i")),
        tenant=pl.lit("t1"),
        app=pl.lit("bench"),
        agent=pl.lit("agent"),
        user_id=pl.format("u{}", pl.col("i") // 400),
        conversation_id=pl.format("c{}", pl.col("i") // 40),
        turn_id=pl.format("turn{}", pl.col("i") // 4),
        role=pl.lit("assistant"),
        target=pl.lit("assistant"),
        tags=pl.lit(["chat:assistant"]),
        event_type=pl.lit(None, pl.String),
        batch_id=pl.lit(None, pl.String),
        ts=pl.lit(now) - pl.duration(minutes=pl.col("i")),
        anchors_text=pl.lit(""),
        trigrams=pl.col("text").map_elements(trigrams, return_dtype=pl.String),
        text_hash=pl.col("text").map_elements(text_hash, return_dtype=pl.String),
        ref=pl.format("conv:ar:turn{}.assistant.completion", pl.col("i") // 4),
        path=pl.format("conv:ar:turn{}.assistant.completion", pl.col("i") // 4),
        ordinal=pl.lit(0, pl.Int32),
        visibility=pl.lit("public"),
        expires_at=pl.lit(now + timedelta(days=365)),
        derived_at=pl.lit(now),
    )


def workspace(name: str, batch_size: int) -> tuple[Settings, Elasticsearch, DeltaStore]:
    """Settings with a fresh `bench-<name>-<hex>` index prefix, a client, and an empty Delta
    store in a temporary directory."""
    settings = get_settings().replace(
        elasticsearch={"index_prefix": f"bench-{name}-{uuid.uuid4().hex[:8]}"},
        embedding={"batch_size": batch_size},
    )
    return settings, make_client(settings), DeltaStore(tempfile.mkdtemp(prefix=f"bench-{name}-"))


def fill_cache(store: DeltaStore, model_id: str, hashes: pl.Series, seed: int = 7) -> None:
    """Random unit vectors for `hashes` in the embeddings cache (rows embedded by a past run)."""
    cache_random_vectors(store, model_id, hashes, np.random.default_rng(seed))


def add_row_options(parser: argparse.ArgumentParser, rows: int) -> None:
    """The options of a benchmark on generated role rows: how many (`rows` by default), their
    length in words (`generate_rows`), and the embedding batch size (`workspace`)."""
    parser.add_argument("--rows", type=int, default=rows)
    parser.add_argument("--min-words", type=int, default=15)
    parser.add_argument("--max-words", type=int, default=45)
    parser.add_argument("--batch-size", type=int, default=64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_row_options(parser, rows=100_000)
    parser.add_argument("--rounds", type=int, default=4, help="alternations of bare and stage")
    parser.add_argument(
        "--embed-rows",
        type=int,
        default=None,
        help="embed only this many rows with the model (the rest come from a filled cache)",
    )
    args = parser.parse_args()

    settings, es, store = workspace("embed", args.batch_size)
    prefix = settings.elasticsearch.index_prefix
    rows = generate_rows(args.rows, args.min_words, args.max_words)
    embed_rows = min(args.embed_rows or args.rows, args.rows)
    embedder = SentenceTransformerEmbedder(batch_size=args.batch_size)
    embedder.encode(rows.get_column("text").head(64).to_list())  # load and warm up, untimed
    out: dict = {
        "rows": args.rows,
        "embed_rows": embed_rows,
        "rounds": args.rounds,
        "words": [args.min_words, args.max_words],
        "batch_size": args.batch_size,
    }

    # bare and stage alternate over `rounds` slices of the texts, so load from other processes
    # on the machine hits both alike; each stage run sees only its slice as new rows
    bare_embed_s = stage_embed_s = 0.0
    per_round = -(-embed_rows // args.rounds)
    for start_row in range(0, embed_rows, per_round):
        part = rows.slice(start_row, min(per_round, embed_rows - start_row))
        start = time.perf_counter()
        embedder.model.encode(
            part.get_column("text").to_list(),
            batch_size=args.batch_size,
            normalize_embeddings=True,
        )
        bare_embed_s += time.perf_counter() - start
        store.append(ROLE_ROWS, part, ROLE_ROWS_SCHEMA)
        start = time.perf_counter()
        report = embed_role_rows(store, embedder, batch_size=args.batch_size)
        stage_embed_s += time.perf_counter() - start
        assert report.embedded == part.height, report

    if embed_rows < args.rows:  # the other rows get cached vectors (as after an earlier run)
        rest = rows.slice(embed_rows)
        fill_cache(store, embedder.model_id, rest.get_column("text_hash"))
        store.append(ROLE_ROWS, rest, ROLE_ROWS_SCHEMA)
        start = time.perf_counter()
        hits = embed_role_rows(store, embedder, batch_size=args.batch_size)
        out["cache_hit_stage_rows_per_s"] = round(hits.cache_hits / (time.perf_counter() - start))

    # the very documents the stage sends, already serialized: the bare bulk only transmits them
    source = ROWS_SOURCE
    base = build_base(store, source, current_versions(store, source.tables), embedder.model_id)
    docs = source.complete(store, base, embedder.model_id)
    body = index_body(ROWS)

    def bare_bulk(name: str) -> float:
        es.indices.create(index=name, settings=body["settings"], mappings=body["mappings"])
        actions = list(index_actions(docs, name, finish=source.finish))
        began = time.perf_counter()
        helpers.bulk(es, actions, chunk_size=settings.elasticsearch.chunk_size)
        es.indices.refresh(index=name)
        return time.perf_counter() - began

    def stage(run_settings) -> tuple[float, int]:
        for kind in KINDS:  # index creation is a one-off, outside the throughput timing
            ensure_index(
                es,
                run_settings.elasticsearch.index_prefix,
                kind,
                dims=384,
                model_id=embedder.model_id,
            )
        began = time.perf_counter()
        reports = sync_live(store, es, run_settings, model_id=embedder.model_id)
        return time.perf_counter() - began, next(r for r in reports if r.kind == ROWS).indexed

    # bare, stage, bare, stage: outside load hits both alike; the second stage indexes into
    # fresh indices under another prefix (a full sync again)
    bare_index_s = bare_bulk(f"{prefix}-scratch-1")
    stage_index_s, indexed = stage(settings)
    bare_index_s += bare_bulk(f"{prefix}-scratch-2")
    other = settings.replace(elasticsearch={"index_prefix": f"{prefix}-b"})
    seconds, more = stage(other)
    stage_index_s, indexed = stage_index_s + seconds, indexed + more
    bare_index_s, stage_index_s = bare_index_s / 2, stage_index_s / 2

    start = time.perf_counter()
    again_embed = embed_role_rows(store, embedder, batch_size=args.batch_size)
    again_index = sync_live(store, es, settings, model_id=embedder.model_id)
    second_s = time.perf_counter() - start
    assert again_embed.embedded == 0 and all(r.skipped for r in again_index)

    first_s = stage_embed_s * args.rows / embed_rows + stage_index_s  # every row embedded
    out.update(
        bare_encode_rows_per_s=round(embed_rows / bare_embed_s, 1),
        embed_stage_rows_per_s=round(embed_rows / stage_embed_s, 1),
        embed_ratio=round(bare_embed_s / stage_embed_s, 3),
        bare_bulk_rows_per_s=round(args.rows / bare_index_s, 1),
        index_stage_rows_per_s=round(indexed / 2 / stage_index_s, 1),
        index_ratio=round(bare_index_s / stage_index_s, 3),
        first_run_s=round(first_s, 2),
        second_run_s=round(second_s, 3),
        second_run_share=round(second_s / first_s, 5),
        second_run_vs_index_stage=round(second_s / stage_index_s, 4),
        docs_in_index=es.count(index=alias_name(prefix, ROWS))["count"],
    )
    print(json.dumps(out, indent=2))  # noqa: T201 (benchmark output)
    for name in es.indices.get(index=f"{prefix}-*", expand_wildcards="all"):
        es.indices.delete(index=name)


if __name__ == "__main__":
    main()
