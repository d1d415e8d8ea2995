"""Benchmark the retention sweep's delete of embedding statuses: keyed by the statuses'
`expires_at` (`ctxdb.lifecycle.retention.purge_statuses`) against the delete by row id alone it
replaced (issue 44 item 3).

    nice -n 10 .venv/bin/python bench/bench_retention_statuses.py --rows 400000 --files 20

`--rows` statuses (hashed row ids, as the embedding stage writes them) in `--files` appends, one
per embedding run, a day apart; the oldest run's rows (`1/files` of them) have expired. Each way
deletes those statuses from its own copy of the table in a fresh process. Prints one JSON object:
per way the seconds, the child's RSS before and its peak, the bytes it read (`/proc/self/io`
rchar), the statuses deleted; and the ratios (keyed / by key).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta

import polars as pl

from ctxdb.lifecycle.purge import delete_keys
from ctxdb.lifecycle.retention import Expired, purge_statuses
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA

WAYS = ("by_key", "keyed")


def row_id(n: int) -> str:
    return "turn-transcript-" + hashlib.sha256(str(n).encode()).hexdigest()


def build(root: str, rows: int, files: int, now: datetime) -> list[str]:
    """The statuses, one append per embedding run; the row ids of the expired (first) run."""
    store = DeltaStore(root)
    per = rows // files
    for run in range(files):
        ids = [row_id(run * per + i) for i in range(per)]
        written = now - timedelta(days=files - run)
        frame = pl.DataFrame({"row_id": ids, "text_hash": ids}).with_columns(
            model_id=pl.lit("all-MiniLM-L6-v2"),
            embedding_status=pl.lit("ok"),
            error=pl.lit(None, pl.String),
            attempts=pl.lit(1, pl.Int32),
            updated_at=pl.lit(written),
            expires_at=pl.lit(written + timedelta(days=files - 0.5 if run else 0.5)),
        )
        store.append(ROW_EMBEDDINGS, frame, schema=ROW_EMBEDDINGS_SCHEMA)
    return [row_id(i) for i in range(per)]


def bytes_read() -> int:
    """Bytes this process has read through system calls (`rchar`: the table's files, cached or
    not, and the Delta log)."""
    with open("/proc/self/io") as io:
        return int(next(line for line in io if line.startswith("rchar:")).split()[1])


def one_way(way: str, root: str, expired_ids: list[str], now: datetime, out: dict) -> None:
    """Delete the expired statuses `way` (keyed | by-key), reporting into `out`."""
    store = DeltaStore(root)
    keys = pl.DataFrame({"row_id": expired_ids})
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    read_before = bytes_read()
    started = time.perf_counter()
    if way == "keyed":
        derived = now - timedelta(days=400)
        expired = Expired(now, {}, expired_ids, pl.DataFrame(), derived_until=derived)
        deleted = purge_statuses(store, expired, "bench")
    else:
        deleted = delete_keys(store, ROW_EMBEDDINGS, keys, "bench")
    seconds = time.perf_counter() - started
    read = bytes_read() - read_before
    out[way] = {
        "seconds": round(seconds, 3),
        "rss_before_mb": round(rss_before, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "read_mb": round(read / 2**20, 2),
        "deleted": deleted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--files", type=int, default=20)
    args = parser.parse_args()
    now = datetime.now(UTC)
    base = tempfile.mkdtemp(prefix="bench_statuses_")
    try:
        expired_ids = build(os.path.join(base, "a"), args.rows, args.files, now)
        shutil.copytree(os.path.join(base, "a"), os.path.join(base, "b"))
        context = multiprocessing.get_context("spawn")
        result = context.Manager().dict()
        for way, copy in zip(WAYS, ("a", "b"), strict=True):
            child = context.Process(
                target=one_way, args=(way, os.path.join(base, copy), expired_ids, now, result)
            )
            child.start()
            child.join()
        report = dict(result)
        report["rows"], report["files"], report["load"] = args.rows, args.files, os.getloadavg()
        report["seconds_ratio"] = round(report["keyed"]["seconds"] / report["by_key"]["seconds"], 3)
        growth = {w: report[w]["peak_rss_mb"] - report[w]["rss_before_mb"] for w in WAYS}
        report["read_ratio"] = round(report["keyed"]["read_mb"] / report["by_key"]["read_mb"], 3)
        report["rss_growth_ratio"] = round(growth["keyed"] / max(growth["by_key"], 1.0), 3)
        print(json.dumps(report, indent=2))  # noqa: T201 (benchmark output)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
