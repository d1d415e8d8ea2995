"""The servers of the cluster stack and the helpers its tests share (imported by name; the
fixtures that start and stop the servers are in tests/cluster/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import boto3
import polars as pl
import pyarrow.fs as pafs
from conftest_ports import free_port_pair
from server_processes import SCRIPTS, start_process, stop_process, wait_ready

from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
KEYS_ENV = {name.upper(): value for name, value in KEYS.items()}
BUILT_AT = datetime(2026, 12, 1, tzinfo=UTC)


def free_ports(count: int) -> list[int]:
    """`count` loopback ports p, each with p and p + 100 free, no two of them overlapping."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port_pair()
        taken = {p + d for p in ports for d in (0, 100)}
        if port not in taken and port + 100 not in taken:
            ports.append(port)
    return ports


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 endpoint with one bucket, and how ctxdb reaches it."""

    endpoint: str
    bucket: str
    process: subprocess.Popen
    log: Path

    @property
    def env(self) -> dict[str, str]:
        """The AWS environment of a process that reaches the endpoint: pyarrow's S3 filesystem
        (the landing location) reads only this; delta-rs reads it under its storage options."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
            **KEYS_ENV,
        }

    @property
    def storage_options(self) -> dict[str, str]:
        """CTXDB_OBJECT_STORE_OPTIONS for the endpoint: plain HTTP, fake keys. delta-rs 1.x
        commits with conditional puts (If-None-Match), which moto honours: no locking provider."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": REGION,
            **KEYS_ENV,
        }

    def prefix(self) -> str:
        """A fresh `s3://<bucket>/<unique>` for one test's Delta root and landing location."""
        return f"s3://{self.bucket}/{uuid.uuid4().hex[:12]}"

    def settings(self, settings: Settings) -> Settings:
        """`settings` with its storage root (Delta tables, landing, files) a fresh prefix."""
        return settings.replace(
            storage_root=self.prefix(), object_store_options=self.storage_options
        )

    def upload(self, folder: Path, uri: str) -> None:
        """Put every file of `folder` under the `s3://` prefix `uri` (this endpoint's own
        client, whatever the process's AWS environment says)."""
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, **KEYS)
        for path in sorted(folder.iterdir()):
            s3.upload_file(str(path), bucket, f"{prefix}/{path.name}")

    def alive(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=5) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False


def start_s3_server(folder: Path, bucket: str, timeout_s: float) -> S3Server:
    """`moto_server` on a free loopback port, ready, with `bucket` created."""
    (port,) = free_ports(1)
    log = folder / "moto.log"
    command = [str(SCRIPTS / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    process = start_process(command, log)
    server = S3Server(f"http://127.0.0.1:{port}", bucket, process, log)
    try:
        wait_ready(f"moto_server on {server.endpoint}", server.alive, process, log, timeout_s)
        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name=REGION, **KEYS)
        s3.create_bucket(Bucket=bucket)
    except BaseException:
        stop_process(process)
        raise
    return server


def environment(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a ctxdb process (CLI, Dagster, Celery worker) on `settings`' memory."""
    env = {
        **os.environ,
        "CTXDB_HOME": str(settings.home),
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PATH": f"{SCRIPTS}{os.pathsep}{os.environ['PATH']}",
    }
    if settings.storage_root:
        env["CTXDB_STORAGE_ROOT"] = settings.storage_root
        env["CTXDB_OBJECT_STORE_OPTIONS"] = json.dumps(settings.object_store_options)
    return {**env, **extra}


def ctxdb(settings: Settings, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Run the `ctxdb` CLI on `settings`' memory; the result, whatever its exit status."""
    return subprocess.run(
        [str(SCRIPTS / "ctxdb"), *args],
        cwd=ROOT,
        env=environment(settings),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def build_records(settings: Settings, sample: Path) -> DeltaStore:
    """The sample landed into `settings`' landing location and derived (at a fixed time)."""
    if "://" in settings.landing_uri:
        pafs.copy_files(str(sample), settings.landing_uri)
    else:
        shutil.copytree(sample, settings.landing_uri)
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri, now=BUILT_AT)
    derive(store, settings, now=BUILT_AT)
    return store


def table_rows(store: DeltaStore, table: str) -> int:
    dt = store.table(table)
    return 0 if dt is None else store.scan(table).select(pl.len()).collect().item()
