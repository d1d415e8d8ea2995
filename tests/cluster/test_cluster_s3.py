"""Issue 25 item 5 (b): Delta tables and the landing location on an S3 endpoint (moto). Landing
and derivation on an `s3://` Delta root and landing location give the same tables as a local
build of the same sample events, table by table."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest
from cluster_stack import S3Server, build_records

from ctxdb.settings import Settings
from ctxdb.storage.tables import LANDED_FILES, RAW_TURN_EVENTS, ROLE_ROWS

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
