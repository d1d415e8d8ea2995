"""The landing location on S3 is reached with the object-store options (CTXDB_OBJECT_STORE_OPTIONS),
not pyarrow's own reading of the AWS environment: the options become the S3 filesystem's
arguments. (Landing on a real S3 endpoint with the options alone: tests/cluster/test_cluster_s3.py.)
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs

from ctxdb.landing.listing import list_files
from ctxdb.settings import OBJECT_STORE_TIMEOUTS, Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.object_store import filesystem, s3_arguments

MOTO_LIKE = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ALLOW_HTTP": "true",
    "AWS_REGION": "eu-west-3",
    "AWS_ACCESS_KEY_ID": "key-id",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_S3_LOCKING_PROVIDER": "none",  # a Delta-commit option: not the filesystem's
}


def constructed(fs: pafs.FileSystem) -> dict:
    """The arguments an S3 filesystem was built with (what pyarrow pickles it by)."""
    return fs.__reduce__()[1][0]


def test_object_store_options_become_the_s3_filesystem_arguments() -> None:
    assert s3_arguments(MOTO_LIKE) == {
        "access_key": "key-id",
        "secret_key": "secret",
        "region": "eu-west-3",
        "endpoint_override": "127.0.0.1:9000",
        "scheme": "http",
    }
    fs, base = filesystem("s3://landing-bucket/events/day1", MOTO_LIKE)
    assert isinstance(fs, pafs.S3FileSystem) and base == "landing-bucket/events/day1"
    built = constructed(fs)
    assert (built["endpoint_override"], built["scheme"], built["region"]) == (
        "127.0.0.1:9000",
        "http",
        "eu-west-3",
    )
    assert (built["access_key"], built["secret_key"]) == ("key-id", "secret")


def test_option_keys_are_case_insensitive_and_the_endpoint_scheme_counts() -> None:
    lower = {"aws_endpoint_url": "https://s3.example:8443", "aws_default_region": "us-east-2"}
    assert s3_arguments(lower) == {
        "region": "us-east-2",
        "endpoint_override": "s3.example:8443",
        "scheme": "https",
    }
    both = {"AWS_DEFAULT_REGION": "us-east-2", "AWS_REGION": "ap-south-1"}
    assert s3_arguments(both) == {"region": "ap-south-1"}
    virtual = s3_arguments({"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "TRUE"})
    assert virtual == {"force_virtual_addressing": True}


def test_local_locations_ignore_the_options(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("{}\n")
    fs, base = filesystem(str(tmp_path), MOTO_LIKE)
    assert isinstance(fs, pafs.LocalFileSystem) and base == str(tmp_path)
    assert [f.path for f in list_files(str(tmp_path), MOTO_LIKE)] == [str(tmp_path / "a.jsonl")]


def test_the_store_carries_the_settings_options_to_landing(tmp_path: Path) -> None:
    """`land` and the landing sensor hand `store.storage_options` to the listing: the settings'
    options are the ones a DeltaStore from settings holds."""
    settings = Settings(home=tmp_path, object_store_options=MOTO_LIKE)
    assert DeltaStore.from_settings(settings).storage_options == {
        **OBJECT_STORE_TIMEOUTS,
        **MOTO_LIKE,
    }
