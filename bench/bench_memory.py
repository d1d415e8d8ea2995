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
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

NOW = datetime(2026, 12, 1, tzinfo=UTC)
EVENTS_PER_CONVERSATION = 33.0  # measured average of the generator
BUILD = ("land", "derive", "embed", "index", "check")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TreeRss:
    """The peak of this process's resident set plus its descendants' at the same moment (a
    derivation's worker processes), sampled every 50 ms from /proc (Linux; psutil is not a
    dependency of ctxdb, and `ru_maxrss` of the children is the largest child, not the sum)."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_kb = max(self.peak_kb, sum(_rss_kb(pid) for pid in _tree(os.getpid())))


def _tree(root: int) -> list[int]:
    """`root` and every process below it."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


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
    if name == "land":
        from ctxdb.landing.run import land

        return {"landed": land(store, settings.landing_uri, now=now).landed}
    if name == "derive":
        from ctxdb.record.run import derive

        return {"events": derive(store, settings, now=now).events}
    if name == "cache":
        return {"cached": _fill_cache(store, settings, args.embed_texts)}
    if name == "embed":
        from ctxdb.embedding.backends import memory_embedder
        from ctxdb.embedding.stage import embed_role_rows

        embedder = memory_embedder(settings.embedding, store)  # CTXDB_EMBEDDING_BACKEND
        report = embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
        return {
            "embedded": report.embedded,
            "cache_hits": report.cache_hits,
            "model_id": embedder.model_id,
        }
    if name == "index":
        from ctxdb.index.client import make_client
        from ctxdb.index.sync import sync_live

        model_id = _model_id(settings, store)
        reports = sync_live(store, make_client(settings), settings, model_id=model_id)
        return {r.kind: r.indexed for r in reports}
    if name == "check":
        from ctxdb.index.checks import count_mismatches
        from ctxdb.index.client import make_client

        checks = count_mismatches(store, make_client(settings), settings.elasticsearch.index_prefix)
        return {"ok": all(c.ok for c in checks)}
    if name == "search":
        return _search(settings, store, args.searches)
    raise ValueError(f"unknown stage {name}")


def _model_id(settings, store) -> str:
    """The id the configured backend (for `auto`, the memory's) stores and indexes vectors under."""
    from ctxdb.embedding.backends import resolve_backend
    from ctxdb.embedding.runtime import backend_model_id
    from ctxdb.embedding.stage import stored_model_ids

    name = settings.embedding.model
    stored = stored_model_ids(store, [name])
    backend = resolve_backend(settings.embedding.backend, name, stored, settings.embedding.device)
    return backend_model_id(name, backend)


def _fill_cache(store, settings, leave: int) -> int:
    """Random unit vectors for every role-row text not cached, but the last `leave` of them."""
    import numpy as np
    import polars as pl

    from ctxdb.storage.tables import EMBEDDINGS, EMBEDDINGS_SCHEMA, ROLE_ROWS

    hashes = store.read(ROLE_ROWS, columns=["text_hash"]).get_column("text_hash").unique().sort()
    hashes = hashes.head(max(0, hashes.len() - leave))
    rng = np.random.default_rng(7)
    model_id = _model_id(settings, store)
    for start in range(0, hashes.len(), 50_000):
        part = hashes.slice(start, 50_000)
        vectors = rng.standard_normal((part.len(), 384), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        frame = pl.DataFrame(
            {
                "model_id": [model_id] * part.len(),
                "text_hash": part,
                "vector": pl.Series(vectors).cast(pl.List(pl.Float32)),
                "created_at": [datetime.now(UTC)] * part.len(),
            }
        )
        store.append(EMBEDDINGS, frame, EMBEDDINGS_SCHEMA)
    return hashes.len()


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
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"stage {name} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"{'increment ' if later else ''}{name}: {result}", file=sys.stderr)  # noqa: T201
    return result


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
        with TreeRss() as tree:
            result = stage(args.stage, args.events, args.later, args)
        result["peak_rss_mb"] = round(max(peak_rss_mb(), tree.peak_kb / 1024), 1)
        result["own_peak_rss_mb"] = round(peak_rss_mb(), 1)
        print(json.dumps(result))  # noqa: T201
        return

    work = Path(tempfile.mkdtemp(prefix="bench-memory-", dir=args.out))
    prefix = f"bench-mem-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CTXDB_HOME": str(work), "CTXDB_INDEX_PREFIX": prefix}
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
        _drop_indices(prefix)
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)  # noqa: T201


def _drop_indices(prefix: str) -> None:
    from ctxdb.index.client import make_client
    from ctxdb.settings import get_settings

    es = make_client(get_settings())
    for name in es.indices.get(index=f"{prefix}-*", expand_wildcards="all"):
        es.indices.delete(index=name)


if __name__ == "__main__":
    main()
