"""Landing's known-id scan of the landed events (`waves.drop_known`): the incoming ids as an
imploded series (before issue 26 item 3: polars reads every file) against `storage.delta.among`
(now: files whose event-id statistics rule out the incoming ids' range are skipped).

    .venv/bin/python bench/bench_landing_checks.py --events 1000000 --out /tmp/ctxdb-lc

Builds `raw_turn_events` twice, in commits of 100k events: once with random ids (what the capture
SDK writes: uuid4) and once with time-ordered ids (a prefix that grows with each commit). A wave of
150k incoming events (1% of them already landed, from the last commit) is checked in a fresh
process per variant; prints one JSON line each: seconds, peak RSS above the start (MiB, sampled
every 5 ms), files
of the table the scan read, and the known ids found (the same in both variants).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
from bench_retention_streaming import PeakRss

from ctxdb.storage.delta import DeltaStore, among
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS

COMMIT = 100_000
WAVE = 150_000


def ids(layout: str, commit: int, start: int, count: int) -> pl.Expr:
    """`count` event ids of commit `commit`: random hex, or a commit prefix then random hex."""
    digest = pl.int_range(start, start + count).hash(seed=7).cast(pl.String)
    return digest if layout == "random" else pl.format(f"{commit:06d}-{{}}", digest)


def build(store: DeltaStore, layout: str, events: int) -> None:
    now = datetime.now(UTC)
    for commit, start in enumerate(range(0, events, COMMIT)):
        frame = pl.select(event_id=ids(layout, commit, start, COMMIT)).with_columns(
            schema_version=pl.lit(1, pl.Int32),
            type=pl.lit("user.submission"),
            occurred_at=pl.lit(now),
            tenant=pl.lit("acme"),
            app=pl.lit("chat"),
            agent=pl.lit("helper"),
            adapter=pl.lit("minimal"),
            user_id=pl.lit("u1"),
            conversation_id=pl.format("c{}", pl.int_range(start, start + COMMIT) // 30),
            turn_id=pl.lit("t1"),
            payload=pl.lit('{"text": "a question"}'),
            source_file=pl.lit(f"f{commit}.jsonl"),
            line_number=pl.int_range(1, COMMIT + 1),
            ingested_at=pl.lit(now),
            landed_version=pl.lit(commit, pl.Int64),
        )
        store.append(RAW_TURN_EVENTS, frame, RAW_EVENTS_SCHEMA)


def wave(layout: str, events: int) -> pl.DataFrame:
    """`WAVE` incoming events: 1% sent again from the last commit, the rest new."""
    last = events // COMMIT - 1
    again = pl.select(event_id=ids(layout, last, last * COMMIT, WAVE // 100))
    fresh = pl.select(event_id=ids(layout, last + 1, events, WAVE - again.height))
    return pl.concat([again, fresh])


def measure(root: str, layout: str, variant: str, events: int) -> dict:
    store = DeltaStore(root)
    incoming = wave(layout, events)
    before = store.version(RAW_TURN_EVENTS)
    err = tempfile.TemporaryFile()
    saved = os.dup(2)
    os.dup2(err.fileno(), 2)
    incoming_ids = incoming["event_id"]
    test = (
        pl.col("event_id").is_in(incoming_ids.implode())
        if variant == "imploded"
        else among(pl.col("event_id"), incoming_ids)
    )
    clock = time.perf_counter()
    with pl.Config(verbose=True), PeakRss() as rss:
        known = store.scan(RAW_TURN_EVENTS, before).filter(test).select("event_id").collect().height
    seconds = time.perf_counter() - clock
    os.dup2(saved, 2)
    err.seek(0)
    skipped = re.findall(rb"skipping (\d+) / (\d+) files", err.read())
    files = [int(b) - int(a) for a, b in skipped]
    return {
        "layout": layout,
        "variant": variant,
        "seconds": round(seconds, 2),
        "peak_rss_above_start_mib": round(rss.peak - rss.start, 1),
        "files_read": files,
        "known": known,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", default="/tmp/ctxdb-landing-checks")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        layout, variant = args.measure
        result = measure(f"{args.out}/{layout}", layout, variant, args.events)
        print(json.dumps(result))  # noqa: T201 (bench output)
        return
    for layout in ("random", "ordered"):
        if not (Path(args.out) / layout / RAW_TURN_EVENTS).exists():
            build(DeltaStore(f"{args.out}/{layout}"), layout, args.events)
        for variant in ("imploded", "among"):
            command = [sys.executable, __file__, "--events", str(args.events), "--out", args.out]
            subprocess.run([*command, "--measure", layout, variant], check=True)


if __name__ == "__main__":
    main()
