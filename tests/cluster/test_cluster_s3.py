"""Issue 25 item 5 (b): Delta tables and the landing location on an S3 endpoint (moto). Landing
and derivation on an `s3://` Delta root and landing location give the same tables as a local
build of the same sample events, table by table."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest
from cluster_stack import BUILT_AT, SCRIPTS, S3Server, build_records, environment, start_s3_server
from server_processes import SERVER_START_S, stop_process

from ctxdb.landing.listing import list_files
from ctxdb.landing.run import land
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, QUARANTINED_EVENTS, RAW_TURN_EVENTS, ROLE_ROWS

pytestmark = pytest.mark.cluster


def table_names(root: str) -> set[str]:
    """The Delta tables under `root` (folders holding a `_delta_log`)."""
    fs, base = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)
    found = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    return {
        Path(info.path).parent.name
        for info in found
        if info.type == pafs.FileType.Directory and Path(info.path).name == "_delta_log"
    }


def comparable(frame: pl.DataFrame, landing: str) -> pl.DataFrame:
    """`frame` with landing paths relative to the landing location, in an order of its content
    (equal rows are interchangeable)."""
    for name, kind in frame.schema.items():
        if kind == pl.String:
            frame = frame.with_columns(pl.col(name).str.replace(landing, "<landing>", literal=True))
    return frame.with_columns(_order=frame.hash_rows()).sort("_order").drop("_order")


def test_land_and_derive_on_s3_equal_a_local_build(
    s3_server: S3Server, sample_events: Path, tmp_path: Path
) -> None:
    # three batches in two worker processes: the workers reach the object store too
    local = Settings(home=tmp_path / "local", derive_batch_conversations=10, derive_processes=2)
    remote = s3_server.settings(local)
    assert remote.delta_uri.startswith("s3://") and remote.landing_uri.startswith("s3://")
    local_store = build_records(local, sample_events)
    remote_store = build_records(remote, sample_events)

    tables = table_names(local.delta_uri)
    assert {RAW_TURN_EVENTS, LANDED_FILES, ROLE_ROWS} <= tables
    assert table_names(remote.delta_uri) == tables
    different = []
    for table in sorted(tables):
        # a landed file's mtime is the file system's or the object store's own
        times = ["mtime"] if table == LANDED_FILES else []
        left = comparable(local_store.read(table).drop(times), local.landing_uri)
        right = comparable(remote_store.read(table).drop(times), remote.landing_uri)
        if left.schema != right.schema or not left.equals(right):
            different.append(table)
    assert different == []
    assert remote_store.read(LANDED_FILES)["mtime"].null_count() == 0
    assert {table: local_store.read(table).height for table in tables}[ROLE_ROWS] > 100


@pytest.mark.es
def test_an_object_store_gone_mid_derivation_fails_the_run_in_one_line(
    cluster_settings: Settings, sample_events: Path, tmp_path: Path
) -> None:
    """The object store's failing: a moto server of this test's own, stopped once the
    derivation's first batch committed its role rows; the rest of the run cannot write."""
    server = start_s3_server(tmp_path, "ctxdb-outage", SERVER_START_S)
    try:
        settings = server.settings(cluster_settings)
        # the landing location's AWS environment is this server's, not the session's
        env = {**environment(settings), **server.env}
        server.upload(sample_events, settings.landing_uri)
        landed = subprocess.run(
            [str(SCRIPTS / "ctxdb"), "land"], env=env, capture_output=True, text=True, timeout=300
        )
        assert landed.returncode == 0, landed.stderr[-3000:]
        # one conversation per batch, in this process: many commits, one after another
        env |= {"CTXDB_DERIVE_BATCH_CONVERSATIONS": "1", "CTXDB_DERIVE_PROCESSES": "1"}
        derive = subprocess.Popen(
            [str(SCRIPTS / "ctxdb"), "derive"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first_commit = f"/{ROLE_ROWS}/_delta_log/"
        deadline = time.monotonic() + 300
        while first_commit not in server.log.read_text(errors="replace"):
            assert derive.poll() is None, derive.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no role_rows commit within 300 s"
            time.sleep(0.02)
    finally:
        stop_process(server.process)
    assert derive.poll() is None, "the derivation was over before the object store went"
    out, err = derive.communicate(timeout=600)

    assert derive.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    # Wherever the connection breaks, the line names the table and its s3:// location, then the
    # cause: "connection refused" between requests, "object store error (Generic S3 error)" in
    # the middle of a response (docs/scale-out.md).
    table = re.match(r"error: cannot \w+ table (\w+) at (\S+): \S", lines[0])
    assert table is not None, lines[0]
    assert table[2] == f"{settings.delta_uri}/{table[1]}", lines[0]
    assert out == ""


def test_landing_reaches_s3_with_the_object_store_options_alone(
    s3_server: S3Server, sample_events: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The landing location is listed and read with CTXDB_OBJECT_STORE_OPTIONS: no `AWS_*`
    variable is set in this process, and landing gives what a local landing of the same files
    gives; a refused event's raw line is read back from the object store as it was written."""
    for name in s3_server.env:
        monkeypatch.delenv(name, raising=False)
    settings = s3_server.settings(Settings(home=tmp_path / "remote"))
    s3_server.upload(sample_events, settings.landing_uri)
    store = DeltaStore.from_settings(settings)
    listed = list_files(settings.landing_uri, store.storage_options)
    assert [f.path.rsplit("/", 1)[-1] for f in listed] == sorted(
        p.name for p in sample_events.iterdir()
    )
    local = Settings(home=tmp_path / "local")
    shutil.copytree(sample_events, local.landing_uri)
    expected = land(DeltaStore.from_settings(local), local.landing_uri, now=BUILT_AT)
    landed = land(store, settings.landing_uri, now=BUILT_AT)
    assert landed.landed > 0 and (landed.files, landed.landed, landed.quarantined) == (
        expected.files,
        expected.landed,
        expected.quarantined,
    )

    owner = store.read(RAW_TURN_EVENTS).row(0, named=True)
    clash = {
        "event_id": "owner-clash-1",
        "schema_version": 1,
        "type": "turn.started",
        "occurred_at": "2026-11-30T00:00:00Z",
        "tenant": owner["tenant"],
        "app": owner["app"],
        "agent": "helper",
        "adapter": "minimal",
        "user_id": "someone-else",
        "conversation_id": owner["conversation_id"],
        "turn_id": "t-clash",
        "payload": {},
    }
    line = json.dumps(clash, separators=(" , ", " : "))  # spacing no re-serialization gives
    folder = tmp_path / "clash"
    folder.mkdir()
    (folder / "zz-clash.jsonl").write_text(line + "\n")
    s3_server.upload(folder, settings.landing_uri)
    assert land(store, settings.landing_uri, now=BUILT_AT).quarantined == 1
    refused = store.read(QUARANTINED_EVENTS).filter(pl.col("event_id") == "owner-clash-1")
    assert refused["reason"].to_list() == ["conversation_owner_mismatch"]
    assert refused["raw_line"].to_list() == [line]
