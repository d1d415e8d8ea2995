"""What telling the pending landing files costs (issue 26 item 4): `files_to_land` over N landed
files (`landed_files` written in appends of 50 000 rows, one file a minute) and N + 10 listed files,
the 10 newest not landed yet: the landing cursor against the full comparison.

    .venv/bin/python bench/bench_landing_discovery.py --files 1000000

Each comparison runs in a process of its own and reports the landed rows it compared, its seconds
and its peak RSS before and after (the listing of N files is built first, in memory).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

import polars as pl

from ctxdb.landing.cursor import landed_since, landing_floor
from ctxdb.landing.listing import LandingFile
from ctxdb.landing.run import files_to_land
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, LANDED_FILES_SCHEMA

START = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK = 50_000
NEW = 10


def write(store: DeltaStore, files: int) -> None:
    for first in range(0, files, CHUNK):
        n = pl.int_range(first, min(first + CHUNK, files), eager=True)
        frame = pl.DataFrame({"n": n}).select(
            source_file="/landing/events-" + pl.col("n").cast(pl.String).str.zfill(8) + ".jsonl",
            size=pl.lit(1000, pl.Int64),
            mtime=pl.lit(START) + pl.duration(minutes=pl.col("n")),
            lines=pl.lit(10, pl.Int64),
            landed=pl.lit(10, pl.Int64),
            duplicates=pl.lit(0, pl.Int64),
            quarantined=pl.lit(0, pl.Int64),
            landed_at=pl.lit(START),
        )
        store.append(LANDED_FILES, frame, LANDED_FILES_SCHEMA)


def measure(store: DeltaStore, files: int, full: bool) -> dict:
    listed = [
        LandingFile(f"/landing/events-{i:08d}.jsonl", 1000, START + timedelta(minutes=i))
        for i in range(files + NEW)
    ]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.monotonic()
    pending = files_to_land(store, listed, full=full)
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    compared = landed_since(store, None if full else landing_floor(store)).height
    return {
        "mode": "full" if full else "cursor",
        "pending": len(pending),
        "landed_rows_compared": compared,
        "seconds": round(seconds, 2),
        "peak_rss_mib_before_after": [round(before), round(after)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "MODE"))
    args = parser.parse_args()
    if args.child:
        root, mode = args.child
        store = DeltaStore(root)
        if mode == "write":
            write(store, args.files - NEW)
        else:
            sys.stdout.write(json.dumps(measure(store, args.files - NEW, mode == "full")) + "\n")
        return
    root = tempfile.mkdtemp(prefix="landing-discovery-")
    base = [sys.executable, __file__, "--files", str(args.files)]
    subprocess.run([*base, "--child", root, "write"], check=True)
    for mode in ("full", "cursor"):
        out = subprocess.run([*base, "--child", root, mode], check=True, capture_output=True)
        sys.stdout.write(out.stdout.decode())
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
