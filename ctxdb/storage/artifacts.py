"""Pinned artifacts from Maven Central: fetched once with `mvn`, verified by digest, cached on
disk under a lock shared by processes. The Elasticsearch distribution and the embedding models'
jars both come this way."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class ArtifactError(Exception):
    """An artifact could not be fetched or verified (the message is one line to show)."""


class MavenFetchError(ArtifactError):
    """`mvn` is missing, refused the download or timed out."""


class DigestMismatch(ArtifactError):
    """A cached file does not match its pinned digest."""


class LockTimeout(ArtifactError):
    """Another process held the cache lock too long."""


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of the file at `path` (`algorithm`: sha256, sha512, ...)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def verify_digest(path: Path, expected: str, algorithm: str) -> None:
    """Raise DigestMismatch unless the file at `path` has digest `expected`."""
    actual = file_digest(path, algorithm)
    if actual != expected.strip().lower():
        raise DigestMismatch(
            f"{path} is corrupt: {algorithm.upper()} {actual[:16]}... but the pinned value is "
            f"{expected[:16]}...; delete it and start again to download a fresh copy"
        )


@contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """Hold an exclusive lock on `path` (shared by processes); LockTimeout after `timeout`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with path.open("w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"another ctxdb process held {path} for {timeout:.0f} s"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


MVN = "mvn"
"""The Maven executable every pinned artifact (the node's zip, the model jars) is fetched with."""


def maven_copy(mvn: str, artifact: str, target: Path, timeout_s: float, hint: str) -> None:
    """Fetch `artifact` (Maven coordinates) into `target`'s folder with `mvn dependency:copy`
    (Maven's local repository caches it); `hint` says how to get `mvn` when it is missing."""
    executable = shutil.which(mvn)
    if executable is None:
        raise MavenFetchError(f"Maven executable {mvn!r} not found; {hint}")
    target.parent.mkdir(parents=True, exist_ok=True)
    command = [
        executable,
        "-B",
        "-q",
        "-Dstyle.color=never",
        f"{DEPENDENCY_PLUGIN}:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={target.parent}",
        "-Dmdep.overWriteReleases=true",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise MavenFetchError(f"mvn did not fetch {artifact} within {timeout_s:.0f} s") from exc
    if done.returncode != 0 or not target.is_file():
        lines = (done.stdout + done.stderr).strip().splitlines()[-8:]
        raise MavenFetchError(
            f"mvn could not fetch {artifact} (exit {done.returncode}):\n" + "\n".join(lines)
        )
