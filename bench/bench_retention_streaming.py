"""Peak memory of the retention sweep's live-id check and cache prune: whole tables read (the code
before issue 26 item 3) against the pending ids pushed into the scans and the cache compared in
parts (now).

    .venv/bin/python bench/bench_retention_streaming.py --rows 1000000 --out /tmp/ctxdb-rs

Builds `role_rows` (row_id, conversation_id, turn_id, text_hash, a text), `turn_logs` and the
embedding cache (`--rows` entries, short vectors: only the key columns are read) in Delta files of
100k rows, then runs each variant in a fresh process and prints one JSON line per run: the peak
RSS above the RSS at the start (sampled every 5 ms, MiB), seconds and the result size;
`--part-rows` takes several sizes of the cache prune's parts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from retention_whole_table import whole_table_stale  # noqa: E402

from ctxdb.index.mappings import ROWS, TURNS  # noqa: E402
from ctxdb.lifecycle import retention  # noqa: E402
from ctxdb.lifecycle.purge import part_count  # noqa: E402
from ctxdb.lifecycle.retention import drop_live_ids  # noqa: E402
from ctxdb.storage.delta import DeltaStore  # noqa: E402
from ctxdb.storage.tables import EMBEDDINGS, ROLE_ROWS, TURN_LOGS  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
FILE_ROWS = 100_000
PENDING = 10_000


def build(store: DeltaStore, rows: int) -> None:
    """Role rows (four per turn), their turns and a cache with one entry per row, 5% of which no
    row references (their rows are gone)."""
    created = datetime.now(UTC) - timedelta(hours=1)
    for start in range(0, rows, FILE_ROWS):
        i = pl.int_range(start, min(start + FILE_ROWS, rows), eager=True).alias("i")
        frame = i.to_frame().with_columns(
            row_id=pl.format("row-{}", "i"),
            conversation_id=pl.format("c{}", pl.col("i") // 20),
            turn_id=pl.format("t{}", pl.col("i") // 4),
            text_hash=pl.format("h{}", "i"),
            text=pl.format("answer {} about the spreadsheet timezone fix", "i"),
        )
        store.append(ROLE_ROWS, frame.filter(pl.col("i") % 20 != 0).drop("i"))
        store.append(TURN_LOGS, frame.filter(pl.col("i") % 4 == 0).select(TURN_LOGS_KEY))
        store.append(
            EMBEDDINGS,
            frame.select(
                model_id=pl.lit("all-MiniLM-L6-v2"),
                text_hash="text_hash",
                vector=pl.lit([0.1] * 8, pl.List(pl.Float32)),
                created_at=pl.lit(created),
            ),
        )


TURN_LOGS_KEY = ["conversation_id", "turn_id"]


def pending(rows: int) -> pl.DataFrame:
    """`PENDING` row ids spread over the table (every 20th one gone) and a quarter as many turns."""
    step = max(1, rows // PENDING) - 3  # not a multiple of 20: about 1 in 20 ids is gone
    ids = [f"row-{i}" for i in range(0, rows, step)][:PENDING]
    turns = [f"c{i // 20}:t{i // 4}" for i in range(0, rows, step * 4)][: PENDING // 4]
    return pl.DataFrame({"kind": [ROWS] * len(ids) + [TURNS] * len(turns), "doc_id": ids + turns})


def whole_live(store: DeltaStore, waiting: pl.DataFrame) -> pl.DataFrame:
    """The live check as it was: every live row id and turn id read, then an anti-join."""
    rows = store.scan(ROLE_ROWS).select(pl.col("row_id").alias("doc_id")).collect()
    turns = (
        store.scan(TURN_LOGS)
        .select(pl.concat_str("conversation_id", pl.lit(":"), "turn_id").alias("doc_id"))
        .collect()
    )
    live = pl.concat([rows.with_columns(kind=pl.lit(ROWS)), turns.with_columns(kind=pl.lit(TURNS))])
    return waiting.join(live, on=["kind", "doc_id"], how="anti")


def rss_mib() -> float:
    """This process's resident set size now (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE / 2**20


class PeakRss:
    """The highest RSS seen (sampled every 5 ms in a thread) while the block runs."""

    def __enter__(self) -> PeakRss:
        self.start = self.peak = rss_mib()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.done.wait(0.005):
            self.peak = max(self.peak, rss_mib())

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, rss_mib())


def measure(root: str, variant: str, rows: int, part_rows: int) -> dict:
    """Run one variant in this process and measure it."""
    store = DeltaStore(root)
    waiting = pending(rows)
    retention.CACHE_PART_ROWS = part_rows
    with PeakRss() as rss:
        clock = time.perf_counter()
        result = run(store, variant, waiting)
        seconds = time.perf_counter() - clock
    return {
        "variant": variant,
        "rows": rows,
        "part_rows": part_rows if variant == "cache_parts" else None,
        "seconds": round(seconds, 2),
        "peak_rss_above_start_mib": round(rss.peak - rss.start, 1),
        "result": result,
    }


def run(store: DeltaStore, variant: str, waiting: pl.DataFrame) -> int:
    """One variant's work; returns its result size."""
    if variant == "live_whole":
        return whole_live(store, waiting).height
    if variant == "live_pushed":
        return drop_live_ids(store, waiting).height
    before = datetime.now(UTC)
    if variant == "cache_whole":
        return whole_table_stale(store, before).height
    # cache_parts: the prune's comparison, part by part (without its delete)
    parts = part_count(store, (EMBEDDINGS, ROLE_ROWS), retention.CACHE_PART_ROWS)
    return sum(retention._stale_entries(store, before, n, parts).height for n in range(parts))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", default="/tmp/ctxdb-retention-streaming")
    parser.add_argument("--part-rows", type=int, nargs="+", default=[retention.CACHE_PART_ROWS])
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        result = measure(args.out, args.measure, args.rows, args.part_rows[0])
        print(json.dumps(result))  # noqa: T201 (bench output)
        return
    root = Path(args.out)
    if not (root / ROLE_ROWS).exists():
        build(DeltaStore(str(root)), args.rows)
    command = [sys.executable, __file__, "--rows", str(args.rows), "--out", args.out]
    runs = [("live_whole", 0), ("live_pushed", 0), ("cache_whole", 0)]
    for variant, part_rows in [*runs, *(("cache_parts", n) for n in args.part_rows)]:
        sizes = ["--part-rows", str(part_rows or args.part_rows[0])]
        subprocess.run([*command, *sizes, "--measure", variant], check=True)


if __name__ == "__main__":
    main()
