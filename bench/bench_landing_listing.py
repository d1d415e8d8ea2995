"""Benchmark the landing listing and comparison: 10 new files among N landed, in the flat layout
(every file in one folder, as landing folders were written before date partitions) against the
date-partitioned one (`dt=YYYY-MM-DD` folders, `ctxdb.landing.partitions`), on local disk and on
S3 (a `moto_server` started here), issue 44 item 3.

    nice -n 10 .venv/bin/python bench/bench_landing_listing.py --local 10000,100000 --s3 10000

The N landed files are spread over `--days` days (one partition a day) and recorded in
`landed_files` as a landing would have (local files carry their day's mtime; objects on moto all
carry the time they were put, so the flat layout's landed rows there are all recent, while the
partitioned layout's rows of past days are dated by their partition, as real ones would be).
Then 10 files arrive (today's partition, or the flat folder) and a landing's discovery runs:
`list_files` from the landing cursor, then `files_to_land`. Prints one JSON object: per storage
and N, each layout's list and compare seconds (best of `--repeat`) and files listed, the files
found new (10), and the ratios partitioned / flat.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import polars as pl

from ctxdb.landing import partitions
from ctxdb.landing.cursor import landing_floor
from ctxdb.landing.listing import list_files
from ctxdb.landing.run import files_to_land
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.object_store import StorageOptions
from ctxdb.storage.tables import LANDED_FILES, LANDED_FILES_SCHEMA

NEW = 10
BUCKET = "bench-landing"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
BODY = b'{"not": "read by the listing"}\n'
Put = Callable[[str, datetime], None]
"""Writes one landing file at a relative path, dated (where the storage allows) at a time."""


def day_noon(days_ago: int, now: datetime) -> datetime:
    return (now - timedelta(days=days_ago)).replace(hour=12, minute=0, second=0, microsecond=0)


def relative(layout: str, n: int, day: datetime) -> str:
    if layout == "flat":
        return f"capture/chat/helper/old-{n:07d}.jsonl"
    return f"capture/chat/helper/{partitions.name(day)}/old-{n:07d}.jsonl"


def local_put(root: Path) -> Put:
    def put(path: str, at: datetime) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(BODY)
        os.utime(target, (at.timestamp(), at.timestamp()))

    return put


def s3_put(endpoint: str, prefix: str) -> Put:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())

    def put(path: str, at: datetime) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path}", Body=BODY)

    return put


def _keys() -> dict[str, str]:
    return {name.lower(): value for name, value in KEYS.items()}


def build(
    layout: str,
    n: int,
    days: int,
    uri: str,
    put: Put,
    options: StorageOptions | None,
    store: DeltaStore,
) -> None:
    """N old files over `days` days, recorded in `landed_files` as landed, then NEW new ones."""
    now = datetime.now(UTC)
    dated = [
        (relative(layout, i, day_noon(1 + i % days, now)), day_noon(1 + i % days, now))
        for i in range(n)
    ]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda item: put(*item), dated))
    day = dict(dated)
    landed = list_files(uri, options)
    rows = pl.DataFrame(
        {
            "source_file": [f.path for f in landed],
            "size": [f.size for f in landed],
            # a row of a past partition carries its day, as a real landing's would
            "mtime": [_landed_mtime(layout, f.path, f.mtime, uri, day) for f in landed],
        }
    ).with_columns(
        pl.col("mtime").cast(pl.Datetime("us", "UTC")),
        lines=pl.lit(1, pl.Int64),
        landed=pl.lit(1, pl.Int64),
        duplicates=pl.lit(0, pl.Int64),
        quarantined=pl.lit(0, pl.Int64),
        landed_at=pl.lit(now).dt.cast_time_unit("us"),
    )
    store.append(LANDED_FILES, rows, schema=LANDED_FILES_SCHEMA)
    today = "capture/chat/helper" + ("" if layout == "flat" else f"/{partitions.name(now)}")
    for i in range(NEW):
        put(f"{today}/new-{i}.jsonl", now)


def _landed_mtime(
    layout: str, path: str, listed: datetime | None, uri: str, day: dict[str, datetime]
) -> datetime | None:
    """The mtime a landing recorded for `path`: the listed one, but on moto, for a partition older
    than yesterday, its day (the time a real landing of it would have seen)."""
    if layout == "flat" or not uri.startswith("s3://"):
        return listed
    put_on = day[path.split(f"{uri.removeprefix('s3://')}/", 1)[1]]
    return put_on if put_on < max(day.values()) else listed


def discover(uri: str, options: StorageOptions | None, store: DeltaStore, repeat: int) -> dict:
    """Best-of-`repeat` seconds of a landing's listing and comparison, and what they found."""
    best: dict = {"list_s": float("inf"), "compare_s": float("inf")}
    for _ in range(repeat):
        started = time.perf_counter()
        files = list_files(uri, options, since=landing_floor(store))
        listed = time.perf_counter()
        todo = files_to_land(store, files)
        done = time.perf_counter()
        best["list_s"] = min(best["list_s"], round(listed - started, 4))
        best["compare_s"] = min(best["compare_s"], round(done - listed, 4))
        best["listed"], best["new"] = len(files), len(todo)
    return best


def one_size(
    storage: str, n: int, days: int, repeat: int, base: Path, endpoint: str | None
) -> dict:
    result: dict = {}
    for layout in ("flat", "partitioned"):
        store = DeltaStore(str(base / f"{storage}-{n}-{layout}" / "delta"))
        if endpoint is None:
            root = base / f"{storage}-{n}-{layout}" / "landing"
            uri, options, put = str(root), None, local_put(root)
        else:
            prefix = f"{n}-{layout}"
            uri = f"s3://{BUCKET}/{prefix}"
            options = {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ALLOW_HTTP": "true",
                "AWS_REGION": "us-east-1",
                **KEYS,
            }
            put = s3_put(endpoint, prefix)
        build(layout, n, days, uri, put, options, store)
        result[layout] = discover(uri, options, store, repeat)
        assert result[layout]["new"] == NEW, result[layout]
    flat, parted = result["flat"], result["partitioned"]
    result["list_ratio"] = round(parted["list_s"] / flat["list_s"], 4)
    result["list_and_compare_ratio"] = round(
        (parted["list_s"] + parted["compare_s"]) / (flat["list_s"] + flat["compare_s"]), 4
    )
    return result


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """`moto_server` on a free loopback port with the bucket created; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **_keys())
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.create_bucket(Bucket=BUCKET)
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=30)


def sizes(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--local", type=sizes, default=[10_000, 100_000])
    parser.add_argument("--s3", type=sizes, default=[10_000])
    parser.add_argument("--days", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench_landing_listing_"))
    report: dict = {"days": args.days, "new": NEW, "load": os.getloadavg()}
    try:
        for n in args.local:
            report[f"local/{n}"] = one_size("local", n, args.days, args.repeat, base, None)
        if args.s3:
            with moto_server(base / "moto.log") as endpoint:
                for n in args.s3:
                    report[f"s3/{n}"] = one_size("s3", n, args.days, args.repeat, base, endpoint)
        report["load_after"] = os.getloadavg()
        print(json.dumps(report, indent=2))  # noqa: T201 (benchmark output)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
