"""The embedded node's distribution: fetch the zip from Maven Central, verify it, unpack it once."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxdb.node.errors import ChecksumError, EmbeddedNodeError, MavenError
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

ARTIFACT = "org.elasticsearch.distribution.integ-test-zip:elasticsearch:{version}:zip"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
ROOT_CACHE = Path("/var/lib/ctxdb-es")

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


def sha512_of(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha512").hexdigest()


def verify_zip(path: Path, expected: str) -> None:
    """Raise ChecksumError unless the file at `path` has SHA-512 `expected`."""
    actual = sha512_of(path)
    if actual != expected:
        raise ChecksumError(
            f"{path} is corrupt: SHA-512 {actual[:16]}... but the pinned value is "
            f"{expected[:16]}...; delete it and start again to download a fresh copy"
        )


@contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive lock on `path` (shared by processes); EmbeddedNodeError after `timeout`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with path.open("w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedNodeError(
                        f"another ctxdb process held {path} for {timeout:.0f} s"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def download_zip(settings: Settings, target: Path) -> None:
    """Fetch the integ-test zip with `mvn dependency:copy` (Maven's local repository caches it)."""
    mvn = shutil.which(settings.node.mvn)
    if mvn is None:
        raise MavenError(
            f"Maven executable {settings.node.mvn!r} not found; install Maven "
            "(apt-get install maven) or set CTXDB_ES_MVN"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    artifact = ARTIFACT.format(version=settings.node.version)
    command = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        f"{DEPENDENCY_PLUGIN}:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={target.parent}",
        "-Dmdep.overWriteReleases=true",
    ]
    log.info("downloading %s with Maven", artifact)
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=settings.node.download_timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise MavenError(
            f"mvn did not fetch {artifact} within {settings.node.download_timeout_s:.0f} s"
        ) from exc
    if done.returncode != 0 or not target.is_file():
        lines = (done.stdout + done.stderr).strip().splitlines()[-8:]
        raise MavenError(
            f"mvn could not fetch {artifact} (exit {done.returncode}):\n" + "\n".join(lines)
        )


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
    with file_lock(cache / ".lock", settings.node.download_timeout_s + 300):
        if not (home / "bin" / "elasticsearch").is_file():
            unpack(ensure_zip(settings, cache), home)
            log.info("unpacked Elasticsearch %s into %s", settings.node.version, home)
    return home
