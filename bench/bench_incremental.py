"""Benchmark work proportional to change (issue 17): the cost of a memory_job run that finds no
change, and of one that adds 1% new events, at two memory sizes, stage by stage.

    .venv/bin/python bench/bench_incremental.py --events 200000,2000000 \
        --json bench/results/incremental.json

For each size: sample events (the generator, ~0.24 role rows per event) are landed and derived by
the real pipeline; the embeddings cache is filled with random unit vectors for every text (as
after an earlier run, so no model runs here); then the embedding stage and the index sync build
the memory once (the full build). Then, timed stage by stage (land, derive, embed, index, count
check) and repeated: a run with nothing new, and a run after 1% more events (new conversations)
were written to the landing directory. For comparison the same process times what a no-change
run read before issue 17 (every role row and status for the embedding stage) and the on-demand id
verification (`verify_ids`, which the count check used to be). Indices are deleted afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench_embed_index import fill_cache
from reports import write_report

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.checks import count_mismatches, verify_ids
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    EMBEDDINGS,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
)

EVENTS_PER_CONVERSATION = 33.0  # measured average of the generator
STAGES = ("land", "derive", "embed", "index", "check")


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def fill_missing_vectors(store: DeltaStore, model_id: str, seed: int) -> int:
    """Cache vectors for every role-row text not cached yet (setup, untimed)."""
    hashes = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA, columns=["text_hash"]).get_column("text_hash")
    if store.exists(EMBEDDINGS):
        cached = store.scan(EMBEDDINGS).select("text_hash").collect().get_column("text_hash")
        hashes = hashes.filter(~hashes.is_in(cached.implode()))
    hashes = hashes.unique()
    if hashes.len():
        fill_cache(store, model_id, hashes, seed=seed)
    return hashes.len()


def memory_job(ctx: dict, now: datetime) -> dict[str, float]:
    """One memory_job run (land, derive, embed, index, count check), seconds per stage."""
    store, settings, es, embedder = ctx["store"], ctx["settings"], ctx["es"], ctx["embedder"]
    prefix = settings.elasticsearch.index_prefix
    seconds = {}
    _, seconds["land"] = timed(land, store, ctx["landing"], now=now)
    _, seconds["derive"] = timed(derive, store, settings, now=now)
    _, seconds["embed"] = timed(embed_role_rows, store, embedder)
    _, seconds["index"] = timed(sync_live, store, es, settings, model_id=embedder.model_id)
    checks, seconds["check"] = timed(count_mismatches, store, es, prefix)
    assert all(c.ok for c in checks), checks
    seconds["total"] = sum(seconds[s] for s in STAGES)
    return seconds


def measure(events: int, increment: float, repeats: int, out: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-incremental-", dir=out))
    settings = get_settings().replace(
        home=work, elasticsearch={"index_prefix": f"bench-inc-{uuid.uuid4().hex[:8]}"}
    )
    es = make_client(settings)
    store = DeltaStore(str(work / "delta"))
    embedder = SentenceTransformerEmbedder()  # never loaded: every text is a cache hit
    landing = work / "landing"
    now = datetime(2026, 12, 1, tzinfo=UTC)
    conversations = max(1, round(events / EVENTS_PER_CONVERSATION))
    users = max(1, conversations // 20)
    generated = generate_events(users=users, conversations=conversations, seed=1, now=now)
    write_sample(generated, landing, per_file=100_000)
    del generated
    ctx = {"store": store, "settings": settings, "es": es, "embedder": embedder}
    ctx["landing"] = str(landing)
    report: dict[str, Any] = {"events": events}
    try:
        _, report["setup_land_s"] = timed(land, store, str(landing), now=now)
        _, report["setup_derive_s"] = timed(derive, store, settings, now=now)
        fill_missing_vectors(store, embedder.model_id, seed=1)
        _, report["full_embed_s"] = timed(embed_role_rows, store, embedder)
        _, report["full_index_s"] = timed(
            sync_live, store, es, settings, model_id=embedder.model_id
        )
        report["role_rows"] = store.read(ROLE_ROWS, columns=["row_id"]).height
        report["docs"] = {
            kind: es.count(index=alias_name(settings.elasticsearch.index_prefix, kind))["count"]
            for kind in (ROWS, TURNS)
        }
        runs = [memory_job(ctx, now + timedelta(minutes=i + 1)) for i in range(repeats)]
        report["no_change_s"] = {
            stage: round(statistics.median(r[stage] for r in runs), 4) for stage in runs[0]
        }
        _, before = timed(
            lambda: (
                store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA, columns=["row_id", "text", "text_hash"]),
                store.read(ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA),
            )
        )
        report["no_change_embed_reads_before_s"] = round(before, 4)
        _, report["verify_ids_s"] = timed(
            verify_ids, store, es, settings.elasticsearch.index_prefix
        )

        later = now + timedelta(hours=1)
        extra = generate_events(
            users=users,
            conversations=max(1, round(conversations * increment)),
            seed=2,
            now=later,
        )
        write_sample(extra, landing / "increment", per_file=100_000)
        report["increment_events"] = len(extra.events)
        inc: dict[str, float] = {}
        _, inc["land"] = timed(land, store, str(landing), now=later)
        _, inc["derive"] = timed(derive, store, settings, now=later)
        # the new texts' vectors are cached (untimed) before the embedding stage runs, so the
        # increment is timed without a model, like the full build
        fill_missing_vectors(store, embedder.model_id, seed=2)
        _, inc["embed"] = timed(embed_role_rows, store, embedder)
        _, inc["index"] = timed(sync_live, store, es, settings, model_id=embedder.model_id)
        checks, inc["check"] = timed(
            count_mismatches, store, es, settings.elasticsearch.index_prefix
        )
        assert all(c.ok for c in checks), checks
        inc["total"] = sum(inc[s] for s in STAGES)
        report["increment_s"] = {k: round(v, 4) for k, v in inc.items()}
        full = sum(report[k] for k in ("setup_land_s", "setup_derive_s", "full_embed_s"))
        full += report["full_index_s"]
        report["full_build_s"] = round(full, 2)
        report["increment_vs_full"] = round(inc["total"] / full, 4)
    finally:
        prefix = settings.elasticsearch.index_prefix
        for name in es.indices.get(index=f"{prefix}-*", expand_wildcards="all"):
            es.indices.delete(index=name)
        shutil.rmtree(work, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="200000,2000000", help="Comma-separated sizes.")
    parser.add_argument("--increment", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3, help="No-change runs (median).")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", type=Path, help="Also write the report here.")
    args = parser.parse_args()
    sizes = [int(s) for s in args.events.split(",")]
    reports = [measure(n, args.increment, args.repeats, args.out) for n in sizes]
    result: dict[str, Any] = {"sizes": reports}
    if len(reports) > 1:
        small, big = reports[0], reports[-1]
        result["role_rows_ratio"] = round(big["role_rows"] / small["role_rows"], 2)
        result["no_change_ratio"] = {
            stage: round(big["no_change_s"][stage] / small["no_change_s"][stage], 2)
            for stage in small["no_change_s"]
        }
    write_report(result, args.json)


if __name__ == "__main__":
    main()
