"""Issue 25: Delta and landing on object storage work the same way. With the Delta root and the
landing location on an S3 endpoint (moto, in this process) and no `AWS_*` variable set, erasure
and a retention sweep rewrite the landing file through the settings' storage options alone, and
a recorder's upload lands there too. (The 3-node stack with S3: tests/cluster/test_cluster_s3.py.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from conftest_turn_record import T0, Turn

from ctxdb.capture import Recorder
from ctxdb.landing.listing import list_files, read_bytes
from ctxdb.landing.run import land
from ctxdb.lifecycle import erase as erasure
from ctxdb.lifecycle import retention
from ctxdb.lifecycle.scope import Scope
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

BUCKET = "ctxdb-lifecycle"
REGION = "us-east-1"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
SERVER_START_S = 60.0


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`moto_server` on a free loopback port, with the bucket created. A process of its own:
    delta-rs holds the GIL in some calls (`DeltaTable.history`), so an S3 server on a thread of
    this process (`ThreadedMotoServer`) would never answer them."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    command = [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        s3 = boto3.client("s3", endpoint_url=url, region_name=REGION, **KEYS)
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                s3.create_bucket(Bucket=BUCKET)
                break
            except EndpointConnectionError:
                assert server.poll() is None and time.monotonic() < deadline, "no moto_server"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture
def on_s3(endpoint: str, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """`settings` with the storage root (Delta tables, landing, files) a fresh prefix of the bucket,
    the endpoint and keys given only as `object_store_options`: every `AWS_*` variable of this
    process is removed."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": REGION,
        **{name.upper(): value for name, value in KEYS.items()},
    }
    return settings.replace(
        storage_root=prefix,
        object_store_options=options,
        retention={"vacuum_hours": 0, "days": 10},
    )


def _client(settings: Settings):  # noqa: ANN202 - boto3's client type is generated
    return boto3.client(
        "s3",
        endpoint_url=settings.object_store_options["AWS_ENDPOINT_URL"],
        region_name=REGION,
        **KEYS,
    )


def _key(settings: Settings, name: str) -> str:
    return f"{settings.landing_uri.removeprefix(f's3://{BUCKET}/')}/{name}"


def _put(settings: Settings, name: str, lines: list[bytes]) -> None:
    body = b"".join(line + b"\n" for line in lines)
    _client(settings).put_object(Bucket=BUCKET, Key=_key(settings, name), Body=body)


def _get(settings: Settings, name: str) -> bytes:
    return _client(settings).get_object(Bucket=BUCKET, Key=_key(settings, name))["Body"].read()


def _lines(turn: Turn) -> list[bytes]:
    return [json.dumps(event).encode() for event in turn.basic().events]


def test_erasure_rewrites_an_s3_landing_file_with_the_storage_options_alone(
    on_s3: Settings, es
) -> None:
    erased = _lines(Turn("c-erased", "t1", user_id="u1"))
    kept = _lines(Turn("c-kept", "t1", user_id="u2"))
    _put(on_s3, "mixed.jsonl", [erased[0], kept[0], *erased[1:], *kept[1:]])
    store = DeltaStore.from_settings(on_s3)
    assert land(store, on_s3.landing_uri).landed == len(erased) + len(kept)

    report = erasure.erase(store, es, on_s3, Scope("user_id", "u1"))

    assert report.verified, report.message
    assert report.landing_lines_removed == len(erased)
    emptied = [b"", kept[0], *(b"" for _ in erased[1:]), *kept[1:]]  # numbers kept
    assert _get(on_s3, "mixed.jsonl") == b"".join(line + b"\n" for line in emptied)


def test_a_retention_sweep_rewrites_an_s3_landing_file_with_the_storage_options_alone(
    on_s3: Settings,
) -> None:
    old = _lines(Turn("c-old", "t1", start=T0 - timedelta(days=30)))
    new = _lines(Turn("c-new", "t1", start=T0))
    _put(on_s3, "days.jsonl", [*old, *new])
    store = DeltaStore.from_settings(on_s3)
    landed_then = T0 - timedelta(days=30)  # as the old turn happened: retention counts from it
    assert land(store, on_s3.landing_uri, now=landed_then).landed == len(old) + len(new)

    report = retention.sweep(store, None, on_s3, now=T0 + timedelta(days=1))

    assert report.landing["lines_removed"] == len(old)
    assert _get(on_s3, "days.jsonl") == b"\n" * len(old) + b"".join(line + b"\n" for line in new)


def test_a_recorder_uploads_to_an_s3_landing_with_the_storage_options_alone(
    on_s3: Settings, tmp_path: Path
) -> None:
    recorder = Recorder.from_settings(
        on_s3, tenant="acme", app="chat", agent="helper", project=tmp_path
    )
    with recorder.turn(user_id="u1", conversation_id="c1", turn_id="t1") as turn:
        turn.submission("a question landed in the bucket")
    recorder.close()

    options = on_s3.object_store_options
    assert [f.path for f in list_files(f"{on_s3.landing_uri}/capture", options)]
    assert land(DeltaStore.from_settings(on_s3), on_s3.landing_uri).landed > 0


def test_a_retention_sweep_archives_an_expired_s3_landing_file_in_s3(on_s3: Settings) -> None:
    settings = on_s3.replace(retention={"archive_days": 3})
    archive = settings.archive_uri
    assert archive == f"{settings.storage_root}/landing-archive"
    old = _lines(Turn("c-old", "t1", start=T0 - timedelta(days=30)))
    _put(settings, "old.jsonl", old)
    store = DeltaStore.from_settings(settings)
    landed_then = T0 - timedelta(days=30)  # as the old turn happened: retention counts from it
    assert land(store, settings.landing_uri, now=landed_then).landed == len(old)
    now = T0 + timedelta(days=1)

    report = retention.sweep(store, None, settings, now=now)

    assert report.landing["files_archived"] == 1
    options = settings.object_store_options
    assert list_files(settings.landing_uri, options) == []
    archived = f"{archive}/{now:%Y-%m-%d}/old.jsonl"
    assert [f.path for f in list_files(archive, options)] == [archived]
    assert read_bytes(archived, options) == b"".join(line + b"\n" for line in old)
    later = retention.sweep(store, None, settings, now=now + timedelta(days=4))
    assert later.landing["archive_days_removed"] == 1 and list_files(archive, options) == []
