"""The embedded node's distribution: fetch the zip from Maven Central, verify it, unpack it once."""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxdb.node.errors import ChecksumError, EmbeddedNodeError, MavenError
from ctxdb.settings import Settings
from ctxdb.storage import artifacts
from ctxdb.storage.artifacts import (
    MVN,
    DigestMismatch,
    LockTimeout,
    MavenFetchError,
    maven_copy,
    verify_digest,
)

log = logging.getLogger(__name__)

ARTIFACT = "org.elasticsearch.distribution.integ-test-zip:elasticsearch:{version}:zip"
ROOT_CACHE = Path("/var/lib/ctxdb-es")
DOWNLOAD_TIMEOUT_S = 1800.0
"""Limit of the node zip's `mvn` download."""

PINNED_SHA512: dict[str, str] = {
    "9.2.4": (
        "5da6465950f7d26ca293794ead3d840f0698ce99bb15b5db7d10c19199e3431d"
        "ba21c83c737f4befa4fc282e12e5f215343a4cb7da52ac85e52b0c488e7b7057"
    ),
}


def cache_root(settings: Settings) -> Path:
    """Where zips, homes and node instances live.

    `CTXDB_ES_CACHE_DIR` wins; under root a system location the node's user can traverse;
    otherwise the user's cache directory.
    """
    if settings.node.cache_dir is not None:
        return settings.node.cache_dir
    if os.geteuid() == 0:
        return ROOT_CACHE
    return Path.home() / ".cache" / "ctxdb" / "elasticsearch"


def zip_path(cache: Path, version: str) -> Path:
    return cache / "downloads" / f"elasticsearch-{version}.zip"


def home_path(cache: Path, version: str) -> Path:
    return cache / f"elasticsearch-{version}"


def expected_sha512(settings: Settings) -> str:
    """The zip's expected checksum: `CTXDB_ES_ZIP_SHA512`, else the one pinned for the version."""
    expected = settings.node.zip_sha512 or PINNED_SHA512.get(settings.node.version)
    if expected is None:
        raise ChecksumError(
            f"no pinned SHA-512 for Elasticsearch {settings.node.version}; set CTXDB_ES_ZIP_SHA512 "
            f"to the value Maven Central publishes, or use {', '.join(PINNED_SHA512)}"
        )
    return expected.strip().lower()


def verify_zip(path: Path, expected: str) -> None:
    """Raise ChecksumError unless the file at `path` has SHA-512 `expected`."""
    try:
        verify_digest(path, expected, "sha512")
    except DigestMismatch as exc:
        raise ChecksumError(str(exc)) from exc


@contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive lock on `path` (shared by processes); EmbeddedNodeError after `timeout`."""
    try:
        with artifacts.file_lock(path, timeout):
            yield
    except LockTimeout as exc:
        raise EmbeddedNodeError(str(exc)) from exc


def download_zip(settings: Settings, target: Path) -> None:
    """Fetch the integ-test zip with `mvn dependency:copy` (Maven's local repository caches it)."""
    artifact = ARTIFACT.format(version=settings.node.version)
    log.info("downloading %s with Maven", artifact)
    hint = "install Maven (apt-get install maven)"
    try:
        maven_copy(MVN, artifact, target, DOWNLOAD_TIMEOUT_S, hint)
    except MavenFetchError as exc:
        raise MavenError(str(exc)) from exc


def ensure_zip(settings: Settings, cache: Path) -> Path:
    """The verified zip in `cache`, downloading it first if it is not there yet."""
    expected = expected_sha512(settings)
    path = zip_path(cache, settings.node.version)
    if not path.is_file():
        download_zip(settings, path)
    verify_zip(path, expected)
    return path


def unpack(zip_file: Path, home: Path) -> None:
    """Extract the zip's single top folder into `home`, restoring file modes (bin/* run bits)."""
    staging = home.with_name(f".{home.name}.unpacking")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with zipfile.ZipFile(zip_file) as archive:
        for info in archive.infolist():
            extracted = Path(archive.extract(info, staging))
            mode = (info.external_attr >> 16) & 0o7777
            if mode and not info.is_dir():
                extracted.chmod(mode)
    tops = list(staging.iterdir())
    if len(tops) != 1 or not (tops[0] / "bin" / "elasticsearch").is_file():
        shutil.rmtree(staging, ignore_errors=True)
        raise ChecksumError(f"{zip_file} is not an Elasticsearch distribution")
    (tops[0] / "bin" / "elasticsearch").chmod(0o755)
    tops[0].rename(home)
    staging.rmdir()


def ensure_home(settings: Settings, cache: Path) -> Path:
    """The unpacked distribution home; downloads and unpacks only on the first call."""
    home = home_path(cache, settings.node.version)
    with file_lock(cache / ".lock", DOWNLOAD_TIMEOUT_S + 300):
        if not (home / "bin" / "elasticsearch").is_file():
            unpack(ensure_zip(settings, cache), home)
            log.info("unpacked Elasticsearch %s into %s", settings.node.version, home)
    return home
