"""The memory path's stages for the benchmarks that measure them one process each
(`bench_memory.py`, `bench_scale.py`): a stage runs in a process of its own, as Dagster's
multiprocess executor runs each asset step, and reports its result with its peak resident set
size and CPU seconds; the parent adds the wall seconds.

A stage's peak is the largest of its own `ru_maxrss` and the sum of its process tree's resident
sets sampled together every 50 ms (derivation's worker processes: `ru_maxrss` of the children is
the largest child, not the sum). Its CPU seconds are its own plus its waited children's; the work
Elasticsearch does for it is not in them (the node is another process), only in its wall time.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

NOW = datetime(2026, 12, 1, tzinfo=UTC)
"""The clock of a benchmark's first build (fixed, so a seed always gives the same memory)."""


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    """User and system seconds of this process and of its children that were waited for."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class TreeRss:
    """The peak of this process's resident set plus its descendants' at the same moment (a
    derivation's worker processes), sampled every 50 ms from /proc (Linux; psutil is not a
    dependency of ctxdb)."""

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


def measured(run: Callable[[], dict]) -> dict:
    """`run()`'s result with the peak RSS (tree and own, MB) and CPU seconds it took."""
    cpu = cpu_seconds()
    with TreeRss() as tree:
        result = run()
    result["peak_rss_mb"] = round(max(peak_rss_mb(), tree.peak_kb / 1024), 1)
    result["own_peak_rss_mb"] = round(peak_rss_mb(), 1)
    result["cpu_s"] = round(cpu_seconds() - cpu, 1)
    return result


def pipeline_stage(name: str, now: datetime) -> dict:
    """One stage of `memory_job` on the memory the environment's settings name: `land`,
    `derive`, `embed` (the configured backend, cache first), `index` (the live sync), `check`
    (the index's document counts against Delta) or `checks` (the job's asset checks: those counts
    and the turn record's consistency checks)."""
    from ctxdb.settings import get_settings
    from ctxdb.storage.delta import DeltaStore

    settings = get_settings()
    store = DeltaStore.from_settings(settings)
    if name == "land":
        from ctxdb.landing.run import land

        return {"landed": land(store, settings.landing_uri, now=now).landed}
    if name == "derive":
        from ctxdb.record.run import derive

        return {"events": derive(store, settings, now=now).events}
    if name == "embed":
        from ctxdb.embedding.backends import memory_embedder
        from ctxdb.embedding.stage import embed_role_rows

        embedder = memory_embedder(settings.embedding, store)  # CTXDB_EMBEDDING_BACKEND
        report = embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
        return {
            "to_process": report.to_process,
            "embedded": report.embedded,
            "cache_hits": report.cache_hits,
            "model_id": embedder.model_id,
        }
    if name == "index":
        from ctxdb.index.client import make_client
        from ctxdb.index.sync import sync_live

        model_id = stored_model_id(settings, store)
        reports = sync_live(store, make_client(settings), settings, model_id=model_id)
        return {r.kind: r.indexed for r in reports}
    if name in ("check", "checks"):
        from ctxdb.index.checks import count_mismatches
        from ctxdb.index.client import make_client
        from ctxdb.record import checks

        counts = count_mismatches(store, make_client(settings), settings.elasticsearch.index_prefix)
        result = {"ok": all(c.ok for c in counts)}
        if name == "checks":
            record = [
                checks.closed_turns_have_one_turn_log(store),
                checks.turn_logs_have_user_and_final_rows(store),
                checks.role_rows_have_turn_log(store),
            ]
            result["record_ok"] = all(c.passed for c in record)
        return result
    raise ValueError(f"unknown stage {name}")


def stored_model_id(settings, store) -> str:
    """The id the configured backend (for `auto`, the memory's) stores and indexes vectors under."""
    from ctxdb.embedding.backends import resolve_backend
    from ctxdb.embedding.ids import backend_model_id
    from ctxdb.embedding.stage import stored_model_ids

    name = settings.embedding.model
    stored = stored_model_ids(store, [name])
    backend = resolve_backend(settings.embedding.backend, name, stored, settings.embedding.device)
    return backend_model_id(name, backend)


def cache_random_vectors(store, model_id: str, hashes, rng) -> None:
    """Random unit vectors from `rng` for `hashes` in the embeddings cache, as a past run of
    `model_id` would have left them."""
    import numpy as np
    import polars as pl

    from ctxdb.storage.tables import EMBEDDINGS, EMBEDDINGS_SCHEMA

    vectors = rng.standard_normal((hashes.len(), 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    frame = pl.DataFrame(
        {
            "model_id": [model_id] * hashes.len(),
            "text_hash": hashes,
            "vector": pl.Series(vectors).cast(pl.List(pl.Float32)),
            "created_at": [datetime.now(UTC)] * hashes.len(),
        }
    )
    store.append(EMBEDDINGS, frame, EMBEDDINGS_SCHEMA)


def fill_cache(store, settings, leave: int) -> int:
    """Random unit vectors in the embeddings cache for every distinct role-row text not cached
    yet, but the last `leave` of them (which the embedding stage then embeds with the model)."""
    import numpy as np
    import polars as pl

    from ctxdb.storage.tables import ROLE_ROWS

    hashes = (
        store.scan(ROLE_ROWS)
        .select(pl.col("text_hash").unique().sort())
        .collect(engine="streaming")
        .get_column("text_hash")
    )
    hashes = hashes.head(max(0, hashes.len() - leave))
    rng = np.random.default_rng(7)
    model_id = stored_model_id(settings, store)
    for start in range(0, hashes.len(), 50_000):
        cache_random_vectors(store, model_id, hashes.slice(start, 50_000), rng)
    return hashes.len()


def spawn(command: list[str], env: dict[str, str], label: str) -> dict:
    """Run a stage process; its last stdout line (JSON) with the wall seconds added."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"stage {label} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"{label}: {result}", file=sys.stderr, flush=True)  # noqa: T201
    return result


def drop_indices(prefix: str) -> None:
    """Delete every index of `prefix` (the benchmark's own)."""
    from ctxdb.index.client import make_client
    from ctxdb.settings import get_settings

    es = make_client(get_settings())
    for name in es.indices.get(index=f"{prefix}-*", expand_wildcards="all"):
        es.indices.delete(index=name)
