"""Fan-out of the embedding stage (issue 17 item 4): one process vs two shard processes.

    .venv/bin/python bench/bench_fanout.py --conversations 120 --rounds 3 \
        --out bench/results/fanout.json

Rows: the sample generator's events for `--conversations` conversations, landed and derived once
into a scratch home; their non-blank role rows, each text made unique with a numbered suffix (the
generator repeats its texts, and the stage embeds a text once per run: shards sharing a text
would each embed it), are the input of every run. Each run starts from a fresh Delta root holding
only these `role_rows` (no statuses, no cached vectors), so every run embeds the same rows from
scratch.

Modes, interleaved in rotated order for `--rounds` rounds (the 2 cores are shared, so each round
sees about the same load):

- `one`: one process, intra-op threads 1, `embed_role_rows` over every row (one partition);
- `fan`: two processes at once, threads 1 each, `embed_role_rows(shard=Shard(i, 2))`;
- `one-2t`: one process with threads 2 (the unpartitioned stage as configured by default on
  a 2-core machine), for reference.

The embedder is the configured one (`CTXDB_EMBEDDING_BACKEND`; `auto`, the default, gives these
fresh roots ONNX fp32; `torch` measures sentence-transformers), threads set per process.

Every process loads the model and encodes a warm-up batch first, then waits at a start line; the
clock runs from the release until the last process has committed its statuses. Reported: seconds
and rows/s per run, each process's CPU seconds, medians per mode, the speed-up fan/one and
fan/one-2t, the shards' row split, and the 1-minute load average before and after each run.
Because other processes share the cores, the summary also gives `cpu_speedup_bound`: one
process's CPU seconds over the busier shard process's, the speed-up the fan-out reaches when each
process has a core to itself (the work split and the fan-out's own overhead, without the load).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import polars as pl
import typer

from ctxdb.embedding.backends import make_embedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard, all_shards
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA
from ctxdb.text import text_hash

MODES = {"one": [(None, 1)], "fan": [("0", 1), ("1", 1)], "one-2t": [(None, 2)]}
WARMUP = ["a short warm-up text", "another one, a little longer than the first"] * 8


def build_rows(home: Path, conversations: int) -> DeltaStore:
    """Land and derive the sample once; returns a store holding its non-blank role rows with
    unique texts."""
    settings = get_settings().replace(home=home)
    store = DeltaStore.from_settings(settings)
    unique = DeltaStore(str(home / "unique"))
    if not unique.exists(ROLE_ROWS):
        generated = generate_events(users=4, conversations=conversations, seed=17)
        write_sample(generated, Path(settings.landing_uri), files_root=Path(settings.files))
        land(store, settings.landing_uri)
        derive(store, settings)
        rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA).filter(
            pl.col("text").str.strip_chars() != ""
        )
        rows = rows.with_columns(
            pl.format("{} (note {})", "text", pl.int_range(pl.len())).alias("text")
        )
        rows = rows.with_columns(
            pl.col("text").map_elements(text_hash, return_dtype=pl.String).alias("text_hash")
        )
        unique.append(ROLE_ROWS, rows, ROLE_ROWS_SCHEMA)
    return unique


def fresh_root(source: DeltaStore, scratch: Path, name: str) -> Path:
    """A Delta root with a copy of `role_rows` only."""
    root = scratch / name
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(source.uri(ROLE_ROWS), root / ROLE_ROWS)
    return root


def worker(root: str, shard: str, threads: int, go: str) -> None:
    """One embedding process: load, warm up, wait for the start line, embed, report."""
    settings = get_settings().embedding.model_copy(update={"threads": threads})
    embedder = make_embedder(settings, batch_size=64)
    embedder.encode(WARMUP)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while not Path(go).exists():
        time.sleep(0.001)
    part = None if shard == "all" else Shard(int(shard), 2)
    cpu = time.process_time()
    report = embed_role_rows(DeltaStore(root), embedder, shard=part)
    done = {
        "end": time.time(),
        "cpu_s": time.process_time() - cpu,
        "rows": report.to_process,
        "embedded": report.embedded,
        "model_id": embedder.model_id,
    }
    sys.stdout.write(json.dumps(done) + "\n")


def run_mode(mode: str, source: DeltaStore, scratch: Path) -> dict:
    """Start the mode's processes, release them together, time until the last one is done."""
    root = fresh_root(source, scratch, mode)
    go = scratch / f"go-{mode}"
    go.unlink(missing_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", str(root), shard or "all", str(threads), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for shard, threads in MODES[mode]
    ]
    for process in processes:
        if process.stdout.readline().strip() != "ready":
            raise SystemExit(f"{mode}: a worker did not start")
    load_before = os.getloadavg()[0]
    started = time.time()
    go.touch()
    done = [json.loads(process.communicate()[0].strip().splitlines()[-1]) for process in processes]
    seconds = max(d["end"] for d in done) - started
    rows = sum(d["rows"] for d in done)
    return {
        "mode": mode,
        "seconds": round(seconds, 2),
        "rows": rows,
        "rows_per_s": round(rows / seconds, 1),
        "per_process_rows": [d["rows"] for d in done],
        "per_process_cpu_s": [round(d["cpu_s"], 1) for d in done],
        "model_id": done[0]["model_id"],
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def cpu_bound(runs: list[dict]) -> float:
    """The wall-clock speed-up fan/one when each process has a free core of its own: one
    process's CPU seconds over the busier shard's (medians); what the shared machine's load
    lets the wall clock show is `speedup_fan_vs_one`."""
    one = statistics.median(r["per_process_cpu_s"][0] for r in runs if r["mode"] == "one")
    fan = statistics.median(max(r["per_process_cpu_s"]) for r in runs if r["mode"] == "fan")
    return round(one / fan, 2)


def main(
    conversations: Annotated[int, typer.Option(help="Sample conversations (4 users).")] = 120,
    rounds: Annotated[int, typer.Option(help="Interleaved rounds of every mode.")] = 3,
    home: Annotated[Path | None, typer.Option(help="Scratch home (default: a temp dir).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON here.")] = None,
) -> None:
    scratch = home or Path(tempfile.mkdtemp(prefix="ctxdb-fanout-"))
    source = build_rows(scratch / "home", conversations)
    rows = source.read(ROLE_ROWS, ROLE_ROWS_SCHEMA, columns=["conversation_id"])
    split = [rows.filter(s.expr()).height for s in all_shards(2)]
    order = list(MODES)
    runs = []
    for round_ in range(rounds):
        for mode in order[round_ % len(order) :] + order[: round_ % len(order)]:
            result = run_mode(mode, source, scratch / "runs")
            result["round"] = round_
            runs.append(result)
            typer.echo(json.dumps(result))
    medians = {
        mode: statistics.median(r["seconds"] for r in runs if r["mode"] == mode) for mode in MODES
    }
    summary = {
        "rows": rows.height,
        "shard_rows": split,
        "cores": os.cpu_count(),
        "median_seconds": medians,
        "speedup_fan_vs_one": round(medians["one"] / medians["fan"], 2),
        "speedup_fan_vs_one_2_threads": round(medians["one-2t"] / medians["fan"], 2),
        "cpu_speedup_bound": cpu_bound(runs),
        "runs": runs,
    }
    typer.echo(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=2))
    if out is not None:
        out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        typer.run(main)
