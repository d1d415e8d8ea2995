"""Benchmark the cluster stack (issue 25): (a) search p95 with all 3 nodes up vs one node killed
(target: at most 1.5x), (b) memory_job on two Celery workers vs one on the same data (target: at
least 1.6x faster). Starts its own servers with tests/cluster/cluster_stack.py's helpers. Not a
test: run it by hand (several minutes).

    .venv/bin/python bench/bench_cluster.py --searches 400
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "cluster"), str(ROOT / "tests")]

import pyarrow.fs as pafs  # noqa: E402
from cluster_stack import (  # noqa: E402
    RedisServer,
    build_records,
    ctxdb,
    environment,
    free_ports,
    start_process,
    start_s3_server,
    stop_process,
    wait_ready,
)
from elasticsearch import Elasticsearch  # noqa: E402
from test_cluster_celery import memory_job, start_workers  # noqa: E402

from ctxdb.index.mappings import ROWS, alias_name  # noqa: E402
from ctxdb.node.cluster import kill_node, restart_node, start_cluster, stop_cluster  # noqa: E402
from ctxdb.sample.generate import generate_events, write_sample  # noqa: E402
from ctxdb.settings import Settings, get_settings  # noqa: E402
from ctxdb.storage.tables import ROLE_ROWS  # noqa: E402


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


def start_redis(folder: Path) -> RedisServer:
    (port,) = free_ports(1)
    binary = shutil.which("redis-server") or "redis-server"
    command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder)]
    process = start_process(command + ["--save", "", "--appendonly", "no"], folder / "redis.log")
    server = RedisServer(port, process)
    wait_ready("redis-server", server.alive, process, folder / "redis.log", 60)
    return server


def timed_memory_job(settings: Settings, redis: RedisServer, folder: Path, workers: int) -> float:
    """Seconds of one memory_job run on `workers` solo-pool Celery workers."""
    folder.mkdir()
    names = tuple(f"w{i}" for i in range(workers))
    executor_env, processes = start_workers(settings, redis, folder, names)
    try:
        started = time.perf_counter()
        run = memory_job(environment(settings, **executor_env), folder / "home", folder / "run.log")
        if run.wait(timeout=1800) != 0:
            raise RuntimeError((folder / "run.log").read_text()[-3000:])
        return time.perf_counter() - started
    finally:
        for process, _ in processes:
            stop_process(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=400)
    parser.add_argument("--conversations", type=int, default=48)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ctxdb-bench-cluster-"))
    sample = folder / "sample"
    generated = generate_events(users=3, conversations=args.conversations, seed=7)
    write_sample(generated, sample, per_file=400)
    node_settings = get_settings().replace(node={"heap": "512m"})
    cluster = start_cluster(node_settings, free_ports(3), 300)
    s3 = start_s3_server(folder, "ctxdb-bench", 60)
    os.environ.update(s3.env)  # the landing location (pyarrow) reads the AWS environment only
    redis = start_redis(folder)
    try:
        base = get_settings().replace(
            home=folder / "home",
            elasticsearch={"url": cluster.urls[0], "index_prefix": "benchcluster"},
        )
        store = build_records(base, sample)
        synced = ctxdb(base, "index", "sync")
        if synced.returncode != 0:
            raise RuntimeError(synced.stderr[-3000:])
        texts = store.read(ROLE_ROWS, columns=["text"])["text"].to_list()
        queries = [" ".join(t.split()[:4]) for t in texts if t.split()][: args.searches]
        queries = (queries * (args.searches // max(len(queries), 1) + 1))[: args.searches]
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

        times = {}
        for workers in (1, 2):
            settings = s3.settings(base.replace(elasticsearch={"index_prefix": f"bench{workers}w"}))
            pafs.copy_files(str(sample), settings.landing_uri)
            times[workers] = timed_memory_job(settings, redis, folder / f"{workers}w", workers)
        report(f"memory_job (s): 1 worker {times[1]:.1f}, 2 workers {times[2]:.1f}")
        report(f"  speed-up {times[1] / times[2]:.2f}x (target >= 1.6x)")
    finally:
        stop_process(redis.process)
        stop_process(s3.process)
        stop_cluster(node_settings, cluster)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
