"""Benchmark the cluster stack (issue 25): (a) search p95 with all 3 nodes up vs one node killed
(target: at most 1.5x), (b) memory_job on two Celery workers vs one on the same data (target: at
least 1.6x faster): by default the chitchat set's real chat (distinct texts, so embedding-bound),
whose embedding the prefill spreads over the workers (one step per shard), ONNX, one intra-op
thread per worker; and (c) the same target measured on the sharded runs: two `shards_job`
partitions launched together on two Celery workers vs on one, on a sample of a few thousand role
rows with unique texts (embedding-bound), ONNX, one intra-op thread per worker. Starts its own
servers with tests/cluster/cluster_stack.py's helpers. Not a test: run it by hand (minutes).

    .venv/bin/python bench/bench_cluster.py --searches 400
    .venv/bin/python bench/bench_cluster.py --measure memory
    .venv/bin/python bench/bench_cluster.py --measure shards --shard-conversations 600
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "cluster"), str(ROOT / "tests")]

import polars as pl  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
from cluster_stack import (  # noqa: E402
    SCRIPTS,
    S3Server,
    build_records,
    ctxdb,
    environment,
    free_ports,
    start_s3_server,
    table_rows,
)
from dagster import DagsterInstance, RunsFilter  # noqa: E402
from dagster._core.instance.ref import InstanceRef  # noqa: E402
from elasticsearch import Elasticsearch  # noqa: E402
from local_cluster import (  # noqa: E402
    LocalCluster,
    kill_node,
    restart_node,
    start_cluster,
    stop_cluster,
)
from run_shards import steps  # noqa: E402
from server_processes import (  # noqa: E402
    RedisServer,
    redis_server_running,
    start_process,
    stop_process,
)
from test_cluster_celery import memory_job, start_workers  # noqa: E402

from ctxdb.index.mappings import ROWS, alias_name  # noqa: E402
from ctxdb.sample.generate import generate_events, write_sample  # noqa: E402
from ctxdb.settings import Settings, get_settings  # noqa: E402
from ctxdb.storage.delta import DeltaStore  # noqa: E402
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA  # noqa: E402
from ctxdb.text import text_hash  # noqa: E402

SHARD_ENV = {
    "CTXDB_SHARDS": "2",
    "CTXDB_EMBEDDING_BACKEND": "onnx",
    "CTXDB_EMBEDDING_THREADS": "1",
}
"""Workers and launchers of (c): two shard partitions, ONNX fp32, one core's worth per worker."""
MEMORY_ENV = {"CTXDB_EMBEDDING_BACKEND": "onnx", "CTXDB_EMBEDDING_THREADS": "1"}
"""Workers and launcher of (b): ONNX fp32, one core's worth per worker (as in (c))."""
CHITCHAT_EVENTS = ROOT / "bench" / "data" / "chitchat" / "events.jsonl"
"""(b)'s default events: real chat, so the texts are distinct and the run embedding-bound."""
MEMORY_RETENTION_DAYS = 3650  # the chat is years old: keep it
EMBEDDING_STEP = re.compile(r"^(embedding_prefill\.|role_row_embeddings$)")
TICK = os.sysconf("SC_CLK_TCK")


def report(text: str) -> None:
    print(text, flush=True)  # noqa: T201


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1]


def search_p95(url: str, alias: str, queries: list[str]) -> float:
    """p95 in ms of one `match` search per query on `alias` through the node at `url`."""
    times = []
    with Elasticsearch(url, request_timeout=60) as es:
        for query in queries:
            started = time.perf_counter()
            es.search(index=alias, query={"match": {"text": query}}, size=10)
            times.append((time.perf_counter() - started) * 1000)
    return p95(times)


def timed_memory_job(
    settings: Settings, redis: RedisServer, folder: Path, workers: int
) -> dict[str, object]:
    """One memory_job run on `workers` solo-pool Celery workers: wall seconds, the seconds of its
    embedding-bound part (first prefill step's start to `role_row_embeddings`' end) and its
    steps."""
    folder.mkdir()
    names = tuple(f"w{i}" for i in range(workers))
    executor_env, processes = start_workers(settings, redis, folder, names, **MEMORY_ENV)
    try:
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        env = environment(settings, **executor_env, **MEMORY_ENV)
        run = memory_job(env, folder / "home", folder / "run.log")
        if run.wait(timeout=1800) != 0:
            raise RuntimeError((folder / "run.log").read_text()[-3000:])
        seconds = time.perf_counter() - started
    finally:
        for process, _ in processes:
            stop_process(process)
    steps_of = run_steps(folder / "home", "memory_job")
    embedding = [step for key, step in steps_of.items() if EMBEDDING_STEP.search(key)]
    return {
        "seconds": seconds,
        "embedding_s": max(s["end"] for s in embedding) - min(s["start"] for s in embedding),
        "steps": steps_of,
        "load": (load_before, os.getloadavg()[0]),
    }


def measure_memory(
    base: Settings, s3: S3Server, redis: RedisServer, folder: Path, events: Path
) -> None:
    """(b): memory_job on one and then two workers, each on a fresh prefix with `events` landed."""
    results = {}
    for workers in (1, 2):
        settings = s3.settings(
            base.replace(
                elasticsearch={"index_prefix": f"bench{workers}w"},
                retention={"days": MEMORY_RETENTION_DAYS},
            )
        )
        pafs.copy_files(str(events), f"{settings.landing_uri}/{events.name}")
        results[workers] = result = timed_memory_job(
            settings, redis, folder / f"{workers}w", workers
        )
        rows = table_rows(DeltaStore.from_settings(settings), ROLE_ROWS)
        load = " -> ".join(f"{x:.1f}" for x in result["load"])
        report(
            f"memory_job, {rows} role rows, {workers} worker(s): {result['seconds']:.1f} s, "
            f"embedding part {result['embedding_s']:.1f} s, load {load}"
        )
        steps_of = result["steps"]
        origin = min(step["start"] for step in steps_of.values())
        report(f"  {step_line(steps_of, origin)}")
    whole = results[1]["seconds"] / results[2]["seconds"]
    part = results[1]["embedding_s"] / results[2]["embedding_s"]
    report(f"  speed-up {whole:.2f}x whole run, {part:.2f}x embedding part (target >= 1.6x)")


def measure_search(
    base: Settings, node_settings: Settings, cluster: LocalCluster, sample: Path, searches: int
) -> None:
    """(a): search p95 with all 3 nodes up, then with node 2 killed (restarted after)."""
    store = build_records(base, sample)
    synced = ctxdb(base, "index", "sync")
    if synced.returncode != 0:
        raise RuntimeError(synced.stderr[-3000:])
    texts = store.read(ROLE_ROWS, columns=["text"])["text"].to_list()
    queries = [" ".join(t.split()[:4]) for t in texts if t.split()][:searches]
    queries = (queries * (searches // max(len(queries), 1) + 1))[:searches]
    alias = alias_name(base.elasticsearch.index_prefix, ROWS)
    search_p95(cluster.urls[0], alias, queries[:50])  # warm up
    up = search_p95(cluster.urls[0], alias, queries)
    kill_node(cluster.nodes[2])
    with Elasticsearch(cluster.urls[0], request_timeout=150) as es:
        es.cluster.health(wait_for_nodes="2", timeout="120s")
    down = search_p95(cluster.urls[0], alias, queries)
    restart_node(node_settings, cluster, cluster.nodes[2], 300)
    report(f"search p95 (ms), {len(queries)} searches: 3 nodes {up:.1f}, one killed {down:.1f}")
    report(f"  ratio {down / up:.2f}x (target <= 1.5x)")


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system, with waited children) of the live processes in group `pgid`."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += sum(int(field) for field in fields[11:15])
    return total / TICK


def unique_texts(store: DeltaStore) -> int:
    """Rewrite `role_rows` with every non-blank text made unique (a numbered suffix): the generator
    repeats its texts and a run embeds a text once, so only unique texts make the runs
    embedding-bound. Returns the row count."""
    rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA).filter(pl.col("text").str.strip_chars() != "")
    numbered = pl.format("{} (note {})", "text", pl.int_range(pl.len()))
    rows = rows.with_columns(numbered.alias("text"))
    rows = rows.with_columns(
        pl.col("text").map_elements(text_hash, return_dtype=pl.String).alias("text_hash")
    )
    store.overwrite(ROLE_ROWS, rows, ROLE_ROWS_SCHEMA)
    return rows.height


def shard_run(env: dict[str, str], home: Path, log: Path, partition: str):
    """`shards_job` from the Celery code location for one partition, its instance in `home`."""
    home.mkdir()
    command = [str(SCRIPTS / "dagster"), "job", "execute", "-m", "pipelines.celery_definitions"]
    command += ["-j", "shards_job", "--tags", json.dumps({"dagster/partition": partition})]
    return start_process(command, log, {**env, "DAGSTER_HOME": str(home)})


def run_steps(home: Path, job: str = "shards_job") -> dict[str, dict]:
    """The steps of the one run of `job` in the instance at `home`: worker, start, end."""
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        (run,) = instance.get_runs(RunsFilter(job_name=job))
        return steps(instance, run.run_id)


def timed_shard_runs(
    settings: Settings, redis: RedisServer, folder: Path, workers: int
) -> dict[str, object]:
    """Both shard partitions launched at once on `workers` solo-pool workers: wall seconds until
    both runs exit, each worker's CPU seconds over that span, and each run's steps."""
    folder.mkdir()
    names = tuple(f"w{i}" for i in range(workers))
    executor_env, processes = start_workers(settings, redis, folder, names, **SHARD_ENV)
    env = environment(settings, **executor_env, **SHARD_ENV)
    try:
        cpu_before = [group_cpu_s(process.pid) for process, _ in processes]
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        runs = [shard_run(env, folder / f"home{p}", folder / f"run{p}.log", p) for p in "01"]
        launchers_cpu = 0.0
        for partition, run in zip("01", runs, strict=True):
            while run.poll() is None:
                launchers_cpu = max(launchers_cpu, group_cpu_s(run.pid))
                time.sleep(0.5)
            if run.returncode != 0:
                raise RuntimeError((folder / f"run{partition}.log").read_text()[-3000:])
        seconds = time.perf_counter() - started
        cpu = [group_cpu_s(p.pid) - b for (p, _), b in zip(processes, cpu_before, strict=True)]
        return {
            "seconds": seconds,
            "worker_cpu_s": cpu,
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "steps": {p: run_steps(folder / f"home{p}") for p in "01"},
        }
    finally:
        for process, _ in processes:
            stop_process(process)


def step_line(steps_of: dict[str, dict], origin: float) -> str:
    """Each step of a run: its worker and its start/end in seconds from `origin`."""
    return ", ".join(
        f"{key} on {step.get('worker', '?').split('@')[0]} "
        f"{step['start'] - origin:.1f}-{step['end'] - origin:.1f} s"
        for key, step in sorted(steps_of.items(), key=lambda item: item[1]["start"])
    )


def measure_shards(
    base: Settings, s3: S3Server, redis: RedisServer, folder: Path, conversations: int
) -> None:
    """(c): both shard partitions on two workers vs on one, each on a fresh prefix of the same
    sample (landed, derived and its texts made unique before the clock starts)."""
    sample = folder / "shard_sample"
    generated = generate_events(users=3, conversations=conversations, seed=7)
    write_sample(generated, sample, per_file=400)
    results = {}
    for workers in (1, 2):
        settings = s3.settings(base.replace(elasticsearch={"index_prefix": f"shards{workers}w"}))
        rows = unique_texts(build_records(settings, sample))
        results[workers] = timed_shard_runs(settings, redis, folder / f"shards{workers}w", workers)
        result = results[workers]
        cpu = [round(c, 1) for c in result["worker_cpu_s"]]
        report(
            f"shards_job x2 partitions, {rows} role rows, {workers} worker(s): "
            f"{result['seconds']:.1f} s, worker CPU s {cpu}"
            f", load {result['load_before']:.1f} -> {result['load_after']:.1f}"
        )
        origin = min(step["start"] for run in result["steps"].values() for step in run.values())
        for partition, steps_of in result["steps"].items():
            report(f"  partition {partition}: {step_line(steps_of, origin)}")
    report(f"  speed-up {results[1]['seconds'] / results[2]['seconds']:.2f}x (target >= 1.6x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=400)
    parser.add_argument("--conversations", type=int, default=48)
    parser.add_argument("--shard-conversations", type=int, default=600)
    parser.add_argument(
        "--memory-events", type=Path, default=CHITCHAT_EVENTS, help="JSONL events that (b) lands"
    )
    parser.add_argument(
        "--measure", nargs="+", choices=("search", "memory", "shards"), default=["search", "memory"]
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ctxdb-bench-cluster-"))
    sample = folder / "sample"
    generated = generate_events(users=3, conversations=args.conversations, seed=7)
    write_sample(generated, sample, per_file=400)
    node_settings = get_settings().replace(node={"heap": "512m"})
    with ExitStack() as started:  # whatever started is stopped, even when a later start fails
        started.callback(shutil.rmtree, folder, ignore_errors=True)
        cluster = start_cluster(node_settings, free_ports(3), 300)
        started.callback(stop_cluster, node_settings, cluster)
        s3 = start_s3_server(folder, "ctxdb-bench", 60)
        started.callback(stop_process, s3.process)
        os.environ.update(s3.env)  # the landing location (pyarrow) reads the AWS environment
        redis = started.enter_context(redis_server_running(folder))
        base = get_settings().replace(
            home=folder / "home",
            elasticsearch={"url": cluster.urls[0], "index_prefix": "benchcluster"},
        )
        if "search" in args.measure:
            measure_search(base, node_settings, cluster, sample, args.searches)
        if "memory" in args.measure:
            measure_memory(base, s3, redis, folder, args.memory_events)
        if "shards" in args.measure:
            measure_shards(base, s3, redis, folder, args.shard_conversations)


if __name__ == "__main__":
    main()
