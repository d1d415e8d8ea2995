"""Peak RSS of building the documents of a full index sync (issue 26 item 3): the whole base frame
at once against the streamed parts of `FULL_PART_ROWS` rows, on N synthetic role rows (and their
embedding statuses) written to a temporary Delta root in appends of 100 000 rows; and of the
embedding stage's full pass over the same rows (no watermark yet, every status already `ok`, so
it reads every row and status and embeds nothing), whole and in parts.

    .venv/bin/python bench/bench_full_sync_memory.py --rows 1000000

Each measurement runs in a process of its own and reports its `ru_maxrss`; the writes run in a
process of their own too. Elasticsearch is not involved: this is the Delta read and base build
that a full sync did in one piece before and now does part by part.
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
from datetime import UTC, datetime

import polars as pl

from ctxdb.embedding import stage
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index import incremental
from ctxdb.index.incremental import build_base, current_versions, full_parts
from ctxdb.index.sources import ROWS_SOURCE
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard
from ctxdb.storage.tables import (
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
)

MODEL = "all-MiniLM-L6-v2"
CHUNK = 100_000


def write(root: str, rows: int) -> None:
    """`rows` synthetic role rows of 10-row conversations, every one with an `ok` status."""
    store = DeltaStore(root)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    for start in range(0, rows, CHUNK):
        n = pl.int_range(start, min(start + CHUNK, rows), eager=True)
        ids = "r" + n.cast(pl.String)
        text = pl.lit("a sentence about the migration of the billing service, " * 4)
        role = pl.DataFrame({"row_id": ids, "n": n}).select(
            "row_id",
            tenant=pl.lit("t"),
            app=pl.lit("a"),
            agent=pl.lit("g"),
            user_id="u" + (pl.col("n") % 500).cast(pl.String),
            conversation_id="c" + (pl.col("n") // 10).cast(pl.String),
            turn_id="t" + (pl.col("n") // 2).cast(pl.String),
            role=pl.lit("assistant"),
            target=pl.lit("assistant"),
            tags=pl.lit(["x"]),
            event_type=pl.lit("assistant.completion"),
            batch_id=pl.lit(None, pl.String),
            ts=pl.lit(now),
            text=text + pl.col("row_id"),
            anchors_text=pl.lit("billing migration"),
            trigrams=pl.lit("bil ill lin ing mig igr gra rat ati tio ion " * 4),
            text_hash="h" + pl.col("row_id"),
            ref="conv:" + pl.col("row_id"),
            path=pl.lit("/"),
            ordinal=pl.lit(1, pl.Int32),
            visibility=pl.lit("public"),
            expires_at=pl.lit(datetime(2030, 1, 1, tzinfo=UTC)),
            derived_at=pl.lit(now),
        )
        store.append(ROLE_ROWS, role, ROLE_ROWS_SCHEMA)
        statuses = role.select(
            "row_id",
            model_id=pl.lit(MODEL),
            text_hash="text_hash",
            embedding_status=pl.lit("ok"),
            error=pl.lit(None, pl.String),
            attempts=pl.lit(1, pl.Int32),
            updated_at=pl.lit(now),
        )
        store.append(ROW_EMBEDDINGS, statuses, ROW_EMBEDDINGS_SCHEMA)


def measure(root: str, mode: str, part_rows: int) -> dict:
    """Build every document at once (`whole`) or part by part (`parts`), or run the embedding
    stage's full pass (`embed-whole`, `embed-parts`); peak RSS in MiB."""
    store = DeltaStore(root)
    if mode.startswith("embed"):
        stage.FULL_PART_ROWS = part_rows if mode == "embed-parts" else 10**12
        started = time.monotonic()
        report = embed_role_rows(store, SentenceTransformerEmbedder(model_id=MODEL))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        seconds = round(time.monotonic() - started, 1)
        return {
            "mode": mode,
            "rows": report.to_process,
            "seconds": seconds,
            "peak_rss_mib": round(peak),
        }
    versions = current_versions(store, ROWS_SOURCE.tables)
    incremental.FULL_PART_ROWS = part_rows
    count = full_parts(store, ROWS_SOURCE, versions) if mode == "parts" else 1
    started, docs = time.monotonic(), 0
    for number in range(count):
        docs += build_base(store, ROWS_SOURCE, versions, MODEL, Shard(number, count)).height
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "parts": count,
        "docs": docs,
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mib": round(peak),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--part-rows", type=int, default=incremental.FULL_PART_ROWS)
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "MODE"))
    args = parser.parse_args()
    if args.child:
        root, mode = args.child
        if mode == "write":
            write(root, args.rows)
        else:
            sys.stdout.write(json.dumps(measure(root, mode, args.part_rows)) + "\n")
        return
    root = tempfile.mkdtemp(prefix="full-sync-memory-")
    base = [sys.executable, __file__, "--rows", str(args.rows), "--part-rows", str(args.part_rows)]
    subprocess.run([*base, "--child", root, "write"], check=True)
    for mode in ("whole", "parts", "embed-whole", "embed-parts"):
        copy = f"{root}-{mode}"  # the embedding pass commits its watermark: each on a fresh copy
        shutil.copytree(root, copy)
        out = subprocess.run([*base, "--child", copy, mode], check=True, capture_output=True)
        sys.stdout.write(out.stdout.decode())
        shutil.rmtree(copy)
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
