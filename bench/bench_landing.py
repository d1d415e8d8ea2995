"""Benchmark landing and derivation (issues 3, 17): events/s, landing vs a plain Arrow->Delta
append with each line scanner (native and pure Python, same files), and the cost of an
incremental run that adds 1% new events. Not a test: run it by hand.

    .venv/bin/python bench/bench_landing.py --events 1000000 --out /tmp/ctxdb-bench [--stages]
"""

from __future__ import annotations

import argparse
import gc
import resource
import shutil
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import stage_cpu
from deltalake import write_deltalake
from reports import write_report

from ctxdb.contract.events import MAX_EVENT_BYTES
from ctxdb.landing import mirror
from ctxdb.landing.listing import list_files, read_bytes
from ctxdb.landing.run import land
from ctxdb.landing.scan import _native
from ctxdb.record.batches import worker_count
from ctxdb.record.run import derive
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS

EVENTS_PER_CONVERSATION = 33.0  # measured average of the generator


CPU: dict[str, float] = {}


def timed(fn, *args, **kwargs):
    """Run `fn`; return its value and wall seconds (CPU seconds of this process and its children
    are kept in CPU under the function's name, since the shared machine is often contended)."""
    start, cpu = time.perf_counter(), _cpu()
    value = fn(*args, **kwargs)
    CPU[fn.__name__] = CPU.get(fn.__name__, 0.0) + _cpu() - cpu
    return value, time.perf_counter() - start


def _cpu() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def landing_floors(paths: list[str], threads: int, scanners: list[str]) -> dict[str, float]:
    """Seconds for the parts of landing no implementation can skip, measured on the same files:
    reading (and gunzipping) them, and each scanner's contract check of every line (the native
    one keeping nothing beyond its own buffers, the Python one building its accepted rows)."""
    start = time.perf_counter()
    files = [read_bytes(path) for path in paths]
    floors = {"floor_read_s": round(time.perf_counter() - start, 2)}
    checks = {
        "native": lambda data: _native.scan_events(data, MAX_EVENT_BYTES, threads),
        "python": lambda data: mirror.scan(data, MAX_EVENT_BYTES),
    }
    for scanner in scanners:
        start = time.perf_counter()
        for data in files:
            checks[scanner](data)
        floors[f"floor_{scanner}_scan_s"] = round(time.perf_counter() - start, 2)
    return floors


def derive_and_increment(
    args: argparse.Namespace,
    store: DeltaStore,
    settings: Settings,
    now: datetime,
    conversations: int,
    t_land: float,
    cpu_land: float,
    stages_land: dict,
) -> dict:
    """Derivation of the landed events (in `settings.derive_processes` processes, and again in
    one process on a copy of the landed table, side by side), then 1% more events landed and
    derived incrementally."""
    single = DeltaStore(str(args.out / "delta-one-process"))
    shutil.copytree(store.uri(RAW_TURN_EVENTS), single.uri(RAW_TURN_EVENTS))
    one_process = settings.model_copy(update={"derive_processes": 1})
    stage_cpu.taken()
    derived_one, t_derive_one = timed(derive, single, one_process, now=now)
    cpu_derive_one = CPU.pop("derive")
    stages_derive_one = stage_cpu.taken()
    shutil.rmtree(single.root)
    derived, t_derive = timed(derive, store, settings, now=now)
    cpu_derive = CPU["derive"]
    stages_derive = stage_cpu.taken()
    landing = args.out / "landing"
    extra = generate_events(
        users=max(1, conversations // 20),
        conversations=max(1, round(conversations * args.increment)),
        seed=2,
        now=now + timedelta(hours=1),
    )
    write_sample(extra, landing / "increment", per_file=100_000)
    extra_landed, t_land_inc = timed(
        land, store, str(landing), now=now + timedelta(hours=1), threads=args.threads
    )
    stages_land_inc = stage_cpu.taken()
    extra_derived, t_derive_inc = timed(derive, store, settings, now=now + timedelta(hours=1))
    stages_derive_inc = stage_cpu.taken()
    full = t_land + t_derive
    incremental = t_land_inc + t_derive_inc
    stages = {}
    if args.stages:
        stages["increment_stages"] = {
            "land": stage_cpu.compared(stages_land, stages_land_inc),
            "derive": stage_cpu.compared(stages_derive, stages_derive_inc),
            "derive_one_process": stage_cpu.compared(stages_derive_one, stages_derive_inc),
        }
    return stages | {
        "derive_s": round(t_derive, 2),
        "derive_events_per_s": round(derived.events / t_derive),
        "derive_cpu_s": round(cpu_derive, 2),
        "derive_processes": worker_count(settings.derive_processes, derived.batches),
        "derive_one_process_s": round(t_derive_one, 2),
        "derive_one_process_events_per_s": round(derived_one.events / t_derive_one),
        "derive_one_process_cpu_s": round(cpu_derive_one, 2),
        "derive_speedup_vs_one_process": round(t_derive_one / t_derive, 2),
        "turns": derived.turns,
        "conversations": derived.conversations,
        "increment_events": extra_landed.landed,
        "increment_land_s": round(t_land_inc, 2),
        "increment_derive_s": round(t_derive_inc, 2),
        "increment_conversations": extra_derived.conversations,
        "increment_cost_vs_full": round(incremental / full, 4),
        "increment_cost_vs_full_cpu": round(
            (CPU["land"] + CPU["derive"] - cpu_derive) / (cpu_land + cpu_derive), 4
        ),
        "derived_rows": {t: w["inserted"] for t, w in derived.written.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/ctxdb-bench"))
    parser.add_argument("--increment", type=float, default=0.01)
    parser.add_argument(
        "--threads", type=int, default=0, help="Landing validation threads (0: one per core)."
    )
    parser.add_argument("--plain-repeats", type=int, default=3, help="Plain appends (median).")
    parser.add_argument(
        "--scanners",
        default="native,python",
        help="Line scanners to land with, each into its own table (the first one is derived).",
    )
    parser.add_argument("--no-derive", action="store_true", help="Measure landing only.")
    parser.add_argument(
        "--stages", action="store_true", help="Also time each stage (bench/stage_cpu.py)."
    )
    parser.add_argument("--json", type=Path, help="Also write the report here.")
    args = parser.parse_args()
    if args.stages:
        stage_cpu.install()
    shutil.rmtree(args.out, ignore_errors=True)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    conversations = max(1, round(args.events / EVENTS_PER_CONVERSATION))
    generated, t_gen = timed(
        generate_events,
        users=max(1, conversations // 20),
        conversations=conversations,
        seed=1,
        now=now,
    )
    landing = args.out / "landing"
    _, t_write = timed(write_sample, generated, landing, per_file=100_000)
    lines = len(generated.events) + len(generated.malformed)
    events_generated = len(generated.events)
    # The generator's million dicts would otherwise stay on the heap, and every collection of
    # Python's cyclic GC during landing would walk them (the plain append allocates no objects).
    del generated
    gc.collect()
    settings = Settings(home=args.out)
    scanners = args.scanners.split(",")
    report: dict = {
        "events_generated": events_generated,
        "lines": lines,
        "generate_s": round(t_gen, 2),
        "write_jsonl_s": round(t_write, 2),
    }
    landings = {}
    for scanner in scanners:
        store = DeltaStore(str(args.out / f"delta-{scanner}"))
        stage_cpu.taken()
        landed, t_land = timed(
            land, store, str(landing), now=now, threads=args.threads, scanner=scanner
        )
        landings[scanner] = (store, landed, t_land, CPU.pop("land"), stage_cpu.taken())
    store, landed, t_land, cpu_land, stages_land = landings[scanners[0]]
    rows = store.table(RAW_TURN_EVENTS).to_pyarrow_table().cast(RAW_EVENTS_SCHEMA)
    plain_runs = [
        timed(write_deltalake, str(args.out / f"plain_append_{n}"), rows, mode="append")[1]
        for n in range(args.plain_repeats)
    ]
    t_plain = statistics.median(plain_runs)
    cpu_plain = CPU["write_deltalake"] / args.plain_repeats
    report |= {
        "plain_append_s": round(t_plain, 2),
        "plain_append_runs_s": [round(t, 2) for t in plain_runs],
        "plain_append_rows_per_s": round(rows.num_rows / t_plain),
        "plain_append_cpu_s": round(cpu_plain, 2),
    }
    for scanner, (_, stats, seconds, cpu, _) in landings.items():
        report[f"landing_{scanner}"] = {
            "landed": stats.landed,
            "duplicates": stats.duplicates,
            "quarantined": stats.quarantined,
            "land_s": round(seconds, 2),
            "land_events_per_s": round(lines / seconds),
            "land_cpu_s": round(cpu, 2),
            "landing_vs_plain_append": round((lines / seconds) / (rows.num_rows / t_plain), 3),
            "landing_vs_plain_append_cpu": round((lines / cpu) / (rows.num_rows / cpu_plain), 3),
        }
    if len(landings) > 1:
        tables = [s.table(RAW_TURN_EVENTS).to_pyarrow_table() for s, *_ in landings.values()]
        keys = [("line_number", "ascending"), ("source_file", "ascending")]
        sorted_tables = [t.drop(["ingested_at"]).sort_by(keys) for t in tables]
        report["scanners_land_equal_rows"] = all(
            t.equals(sorted_tables[0]) for t in sorted_tables[1:]
        )
    report |= landing_floors([f.path for f in list_files(str(landing))], args.threads, scanners)
    if not args.no_derive:
        report |= derive_and_increment(
            args, store, settings, now, conversations, t_land, cpu_land, stages_land
        )
    write_report(report, args.json)


if __name__ == "__main__":
    main()
