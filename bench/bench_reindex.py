"""Benchmark `reindex`: a rebuild with cached embeddings versus one that re-embeds every text.

    ELASTICSEARCH_URL=http://127.0.0.1:9299 .venv/bin/python bench/bench_reindex.py --rows 2000

Seeds N generated role rows (embedded and indexed through the pipeline), then times
  1. a reindex with the same model (every vector from the Delta cache), and
  2. a reindex with a new model id (same weights, so every text is embedded again),
each including build, verification and the atomic alias swap, and the search latency (the real
`SearchService` as one user, all three arms) at rest versus while the re-embedding reindex runs.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid

from bench_embed_index import add_row_options, fill_cache, generate_rows, workspace

from ctxdb.contract.identity import Principal
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.lifecycle.reindex import drop_after_grace, reindex
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA

QUERIES = ("workbook formulas lost", "kubectl pod restarts", "timezone conversion bug", "recipe")


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1] if len(samples) >= 20 else max(samples)


def search_until(
    service: SearchService, principal: Principal, stop: threading.Event
) -> list[float]:
    """Search in a loop until `stop` is set; every call must succeed. Returns latencies (ms)."""
    latencies = []
    while not stop.is_set():
        query = QUERIES[len(latencies) % len(QUERIES)]
        start = time.perf_counter()
        service.search(principal, SearchRequest(query=query, top_k=5))
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def measure_during(service: SearchService, principal: Principal, run) -> tuple[float, list]:
    """Run `run()` while one thread searches in a loop; (seconds of `run`, search latencies)."""
    stop = threading.Event()
    during: list[float] = []
    searcher = threading.Thread(
        target=lambda: during.extend(search_until(service, principal, stop)), daemon=True
    )
    searcher.start()
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    stop.set()
    searcher.join()
    return seconds, during


def latency(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": round(statistics.median(samples), 1),
        "p95_ms": round(p95(samples), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_row_options(parser, rows=2000)
    parser.add_argument("--rest-queries", type=int, default=200)
    parser.add_argument(
        "--cached-only",
        action="store_true",
        help="Seed the embeddings cache with random unit vectors instead of embedding every "
        "text, and time only the cached reindex (for sizes the model cannot embed in a run).",
    )
    args = parser.parse_args()

    settings, es, store = workspace("reindex", args.batch_size)
    prefix = settings.elasticsearch.index_prefix
    rows = generate_rows(args.rows, args.min_words, args.max_words)
    store.append(ROLE_ROWS, rows, ROLE_ROWS_SCHEMA)
    embedder = SentenceTransformerEmbedder(batch_size=args.batch_size)
    start = time.perf_counter()
    if args.cached_only:
        fill_cache(store, embedder.model_id, rows["text_hash"])
    embed_role_rows(store, embedder, batch_size=args.batch_size, progress_every_s=30)
    sync_live(store, es, settings, model_id=embedder.model_id)
    seed_s = time.perf_counter() - start

    service = SearchService(settings, es, ModelQueryEmbedder(embedder))
    principal = Principal(user_id="u0")
    for query in QUERIES * 5:  # warm-up: model, caches and connections
        service.search(principal, SearchRequest(query=query, top_k=5))
    at_rest: list[float] = []
    for i in range(args.rest_queries):
        start = time.perf_counter()
        service.search(principal, SearchRequest(query=QUERIES[i % len(QUERIES)], top_k=5))
        at_rest.append((time.perf_counter() - start) * 1000)

    reports = {}
    cached_s, during_cached = measure_during(
        service,
        principal,
        lambda: reports.update(cached=reindex(store, es, settings, embedder, min_coverage_pct=100)),
    )
    drop_after_grace(es, settings, grace_s=0)
    out = {
        "rows": args.rows,
        "words": [args.min_words, args.max_words],
        "seed": "random cached vectors" if args.cached_only else "embedded by the model",
        "seed_embed_and_index_s": round(seed_s, 2),
        "reindex_cached_s": round(cached_s, 2),
        "reindex_cached_embedded": reports["cached"].embed.embedded,
        "reindex_cached_rows_per_s": round(args.rows / cached_s, 1),
        "search_at_rest": latency(at_rest),
        "search_during_cached_reindex": latency(during_cached),
        "p95_ratio_during_cached_vs_rest": round(p95(during_cached) / p95(at_rest), 2),
    }
    if not args.cached_only:
        new_model = SentenceTransformerEmbedder(
            batch_size=args.batch_size,
            model_id=f"{embedder.model_id}@bench-{uuid.uuid4().hex[:6]}",
        )
        fresh_s, during = measure_during(
            service,
            principal,
            lambda: reports.update(
                fresh=reindex(store, es, settings, new_model, min_coverage_pct=100)
            ),
        )
        drop_after_grace(es, settings, grace_s=0)
        out |= {
            "reindex_reembed_s": round(fresh_s, 2),
            "reindex_reembed_embedded": reports["fresh"].embed.embedded,
            "reindex_reembed_rows_per_s": round(args.rows / fresh_s, 1),
            "speedup_cached": round(fresh_s / cached_s, 1),
            "search_during_reindex": latency(during),
            "p95_ratio_during_vs_rest": round(p95(during) / p95(at_rest), 2),
        }
    out["docs_in_index"] = es.count(index=alias_name(prefix, ROWS))["count"]
    print(json.dumps(out, indent=2))  # noqa: T201 (benchmark output)
    for name in es.indices.get(index=f"{prefix}-*", expand_wildcards="all"):
        es.indices.delete(index=name)


if __name__ == "__main__":
    main()
