"""The one way ctxdb reaches files outside Delta's own reads and writes: landing files (listing,
reading, erasure's and retention's rewrites, the retention archive), capture uploads, a table's
folder (older versions, file counts) and the conversation files root.

An `s3://` location is reached with the object-store options (`CTXDB_OBJECT_STORE_OPTIONS`,
delta-rs keys such as `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`), so one setting
names the endpoint and keys of Delta and of every other object-store access; without options
pyarrow resolves the location itself, from the `AWS_*` environment, as delta-rs then does."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow.fs as pafs

StorageOptions = Mapping[str, str]
"""The object-store options (`CTXDB_OBJECT_STORE_OPTIONS`, delta-rs keys); keys are
case-insensitive."""
S3_SCHEMES = ("s3://", "s3a://")
S3_OPTIONS = {
    "aws_access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "aws_default_region": "region",
    "aws_region": "region",
}
"""delta-rs S3 options and the `pyarrow.fs.S3FileSystem` argument each one sets (a later key
wins: `AWS_REGION` over `AWS_DEFAULT_REGION`). The endpoint, plain HTTP and virtual-hosted
addressing are read in `s3_arguments`; other keys (locking, conditional puts) concern Delta
commits only."""


def s3_arguments(options: StorageOptions) -> dict[str, object]:
    """`S3FileSystem` arguments for delta-rs storage options: keys, region, endpoint (its
    scheme, or `AWS_ALLOW_HTTP`, picks http) and virtual-hosted addressing."""
    lowered = {key.lower(): value for key, value in options.items()}
    arguments: dict[str, object] = {
        S3_OPTIONS[key]: lowered[key] for key in S3_OPTIONS if key in lowered
    }
    endpoint = lowered.get("aws_endpoint_url") or lowered.get("aws_endpoint")
    if endpoint:
        scheme, _, host = endpoint.rpartition("://")
        arguments["endpoint_override"] = host
        arguments["scheme"] = scheme or "https"
    if lowered.get("aws_allow_http", "").lower() == "true":
        arguments["scheme"] = "http"
    if lowered.get("aws_virtual_hosted_style_request", "").lower() == "true":
        arguments["force_virtual_addressing"] = True
    return arguments


def filesystem(
    location: str, storage_options: StorageOptions | None = None
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and base path of a local path (as given) or an object-store URI;
    an `s3://` URI whose `storage_options` name keys, region, endpoint or addressing gets an S3
    filesystem built from them (delta-rs' client timeouts concern Delta alone: pyarrow keeps the
    AWS SDK's bounds, a 1 s connect and a read stalled for 3 s, tried 3 times)."""
    if "://" not in location:
        return pafs.LocalFileSystem(), location
    arguments = s3_arguments(storage_options or {})
    if arguments and location.startswith(S3_SCHEMES):
        return pafs.S3FileSystem(**arguments), location.split("://", 1)[1]
    return pafs.FileSystem.from_uri(location)


def absolute(location: str) -> str:
    """An object-store URI as it is, a local path made absolute."""
    return location if "://" in location else str(Path(location).resolve())
