"""Benchmark memory ceilings (issue 17): peak RSS of each stage of a full build of N events, of an
incremental run of M more events, and of the search service with the model loaded.

    .venv/bin/python bench/bench_memory.py --events 1000000 --increment-events 10000 \\
        --json bench/results/memory.json

Every stage runs in its own process, as Dagster's multiprocess executor runs each asset step, and
reports its peak resident set size: its own (`getrusage` `ru_maxrss`) or, where it starts worker
processes (derivation), the peak of its own plus its workers' sampled together; a run's ceiling is
the largest of its stages. The full build lands and derives the generated events, then embeds: the
embeddings cache holds random vectors for all but `--embed-texts` texts (embedding a million role
rows with the model takes hours here), which the model embeds for real in the same process, so the
stage's peak includes the loaded model and its inference buffers. The increment embeds every new
text with the model. The search process loads the model, serves the HTTP API in-process (FastAPI
test client, bearer tokens) and answers `--searches` queries as generated users. Setup steps
(generating events, filling the cache) run in processes of their own and are not measured.
Indices are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from reports import write_report
from stages import NOW, drop_indices, fill_cache, measured, pipeline_stage, spawn

EVENTS_PER_CONVERSATION = 33.0  # measured average of the generator
BUILD = ("land", "derive", "embed", "index", "check")


def stage(name: str, events: int, later: bool, args: argparse.Namespace) -> dict:
    """Run one stage in this process (settings come from the environment)."""
    from ctxdb.settings import get_settings
    from ctxdb.storage.delta import DeltaStore

    settings = get_settings()
    store = DeltaStore.from_settings(settings)
    now = NOW + timedelta(hours=1) if later else NOW
    if name == "generate":
        from ctxdb.sample.generate import generate_events, write_sample

        conversations = max(1, round(events / EVENTS_PER_CONVERSATION))
        generated = generate_events(
            users=args.users, conversations=conversations, seed=2 if later else 1, now=now
        )
        folder = Path(settings.landing_uri) / ("increment" if later else "")
        write_sample(generated, folder, per_file=100_000)
        return {"events": len(generated.events)}
    if name == "cache":
        return {"cached": fill_cache(store, settings, args.embed_texts)}
    if name in BUILD:
        return pipeline_stage(name, now)
    if name == "search":
        return _search(settings, store, args.searches)
    raise ValueError(f"unknown stage {name}")


def _search(settings, store, searches: int) -> dict:
    """The HTTP API with the model loaded, answering `searches` queries as generated users."""
    import polars as pl
    from fastapi.testclient import TestClient

    from ctxdb.auth.credentials import TokenStore
    from ctxdb.index.client import make_client
    from ctxdb.serve.http import create_app
    from ctxdb.storage.tables import ROLE_ROWS

    rows = store.read(ROLE_ROWS, columns=["tenant", "user_id", "text"]).filter(
        pl.col("text").str.len_chars() > 20
    )
    sample = rows.sample(n=min(searches, rows.height), seed=3)
    tokens = TokenStore(settings.tokens_path)
    issued: dict[tuple[str, str], str] = {}
    started = time.perf_counter()
    app = create_app(settings, make_client(settings))
    answered = 0
    with TestClient(app) as http:
        for tenant, user, text in sample.iter_rows():
            key = (tenant, user)
            if key not in issued:
                issued[key] = tokens.issue(user, tenant=tenant)
            response = http.post(
                "/v1/search",
                json={"query": " ".join(text.split()[:6]), "top_k": 10},
                headers={"Authorization": f"Bearer {issued[key]}"},
            )
            response.raise_for_status()
            answered += bool(response.json()["hits"])
    return {
        "searches": sample.height,
        "with_hits": answered,
        "seconds": time.perf_counter() - started,
        "query_model_id": app.state.service.embedder.embedder.model_id,
    }


def run_child(
    name: str, env: dict[str, str], args: argparse.Namespace, later: bool = False
) -> dict:
    command = [
        sys.executable,
        __file__,
        "--stage",
        name,
        "--events",
        str(args.increment_events if later else args.events),
        "--embed-texts",
        str(args.embed_texts),
        "--searches",
        str(args.searches),
        "--users",
        str(args.users),
    ]
    if later:
        command.append("--later")
    return spawn(command, env, f"{'increment ' if later else ''}{name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--increment-events", type=int, default=10_000)
    parser.add_argument("--embed-texts", type=int, default=2_000)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--users",
        type=int,
        help="Users the events spread over (default: 1 per 20 conversations of the full build).",
    )
    parser.add_argument(
        "--derive-only",
        action="store_true",
        help="Only land and derive (full build and increment): derivation's ceiling, no model or "
        "Elasticsearch.",
    )
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--later", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.users = args.users or max(1, round(args.events / EVENTS_PER_CONVERSATION) // 20)
    if args.stage:
        result = measured(lambda: stage(args.stage, args.events, args.later, args))
        print(json.dumps(result))  # noqa: T201
        return

    work = Path(tempfile.mkdtemp(prefix="bench-memory-", dir=args.out))
    prefix = f"bench-mem-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CTXDB_HOME": str(work)}
    env |= {"CTXDB_ELASTICSEARCH_INDEX_PREFIX": prefix}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    report: dict = {"events": args.events, "increment_events": args.increment_events}
    try:
        report["generate"] = run_child("generate", env, args)
        build = {name: run_child(name, env, args) for name in ("land", "derive")}
        if not args.derive_only:
            report["cache_setup"] = run_child("cache", env, args)
            build |= {name: run_child(name, env, args) for name in ("embed", "index", "check")}
        report["full_build"] = build
        report["full_build_peak_rss_mb"] = max(s["peak_rss_mb"] for s in build.values())
        run_child("generate", env, args, later=True)
        stages = BUILD[:2] if args.derive_only else BUILD
        increment = {name: run_child(name, env, args, later=True) for name in stages}
        report["increment"] = increment
        report["increment_peak_rss_mb"] = max(s["peak_rss_mb"] for s in increment.values())
        if not args.derive_only:
            report["search"] = run_child("search", env, args)
            report["search_peak_rss_mb"] = report["search"]["peak_rss_mb"]
    finally:
        drop_indices(prefix)
        shutil.rmtree(work, ignore_errors=True)
    write_report(report, args.json)


if __name__ == "__main__":
    main()
