"""Find a JDK new enough for the embedded node: ES_JAVA_HOME, JAVA_HOME, then the JVM directory."""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ctxdb.node.errors import JavaNotFoundError
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 21
JVM_DIR = Path("/usr/lib/jvm")
"""Where installed JDKs are searched last (after ES_JAVA_HOME and JAVA_HOME)."""
_RELEASE_VERSION = re.compile(r'^JAVA_VERSION="([^"]+)"', re.MULTILINE)
_CLI_VERSION = re.compile(r'version "([^"]+)"')


@dataclass(frozen=True)
class Jdk:
    home: Path
    major: int


def java_major(version: str) -> int:
    """Feature release of a Java version string ('25.0.3' -> 25, '1.8.0_392' -> 8)."""
    parts = version.split(".")
    major = parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0]
    digits = re.match(r"\d+", major)
    if digits is None:
        raise ValueError(f"not a Java version: {version!r}")
    return int(digits.group())


def probe_jdk(home: Path) -> Jdk | None:
    """The JDK at `home` with its major version, or None when `home` holds no runnable java."""
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    release = home / "release"
    if release.is_file():
        found = _RELEASE_VERSION.search(release.read_text(errors="replace"))
        if found:
            return Jdk(home, java_major(found.group(1)))
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _CLI_VERSION.search(out.stderr + out.stdout)
    return Jdk(home, java_major(found.group(1))) if found else None


def _candidates(settings: Settings, jvm_dir: Path) -> list[tuple[str, Path]]:
    named = [("ES_JAVA_HOME", settings.node.es_java_home), ("JAVA_HOME", settings.node.java_home)]
    found = [(label, path) for label, path in named if path is not None]
    if jvm_dir.is_dir():
        found += [(str(jvm_dir), path) for path in sorted(jvm_dir.iterdir()) if path.is_dir()]
    return found


def find_jdk(settings: Settings, minimum: int = MIN_JAVA_MAJOR, jvm_dir: Path | None = None) -> Jdk:
    """The first JDK >= `minimum` (explicit homes first, then the newest in `jvm_dir`, default
    `JVM_DIR`)."""
    jvm_dir = jvm_dir or JVM_DIR
    seen: list[str] = []
    machine: list[Jdk] = []
    for label, path in _candidates(settings, jvm_dir):
        jdk = probe_jdk(path)
        seen.append(f"{path} ({'no java' if jdk is None else f'Java {jdk.major}'})")
        if jdk is None or jdk.major < minimum:
            if label in {"ES_JAVA_HOME", "JAVA_HOME"}:
                log.warning("%s=%s is not a JDK >= %d; searching further", label, path, minimum)
            continue
        if label in {"ES_JAVA_HOME", "JAVA_HOME"}:
            return jdk
        machine.append(jdk)
    if machine:
        return max(machine, key=lambda jdk: jdk.major)
    checked = "; ".join(seen) or "nothing"
    raise JavaNotFoundError(
        f"no JDK >= {minimum} found for Elasticsearch (checked ES_JAVA_HOME, JAVA_HOME and "
        f"{jvm_dir}: {checked}); install Java {minimum}+ or set ES_JAVA_HOME"
    )
