"""The embedded node manager: lifecycle on a second node, and every start-up error path.

Lifecycle tests start their own node on a free port (own instance dir, 512 MB heap) from the
session's cache, so they never touch the node the rest of the suite uses.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest_ports import free_port_pair
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.health import check_cluster, cluster_status
from ctxdb.node import distribution, embedded, java
from ctxdb.node.errors import (
    ChecksumError,
    JavaNotFoundError,
    MavenError,
    NodeStartError,
    PortInUseError,
)
from ctxdb.node.java import find_jdk, java_major
from ctxdb.settings import Settings

_register_all()
runner = CliRunner()

JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


def node_settings(base: Settings, port: int, **extra) -> Settings:
    """Settings for a second embedded node sharing the session's cache (and unpacked home).

    `extra` overrides fields of the node group (`settings.node`).
    """
    node = {
        "port": port,
        "heap": "512m",
        "cache_dir": distribution.cache_root(base),
        "version": base.node.version,
        **extra,
    }
    return Settings(elasticsearch={"url": f"http://127.0.0.1:{port}"}, node=node)


def cli_env(settings: Settings) -> dict[str, str]:
    return {
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_ES_PORT": str(settings.node.port),
        "CTXDB_ES_HEAP": settings.node.heap,
        "CTXDB_ES_CACHE_DIR": str(settings.node.cache_dir),
    }


@pytest.fixture
def second_node(es_base_settings: Settings) -> Iterator[Settings]:
    """Settings of a not-yet-started second node; stopped and its instance dir removed after."""
    settings = node_settings(es_base_settings, free_port_pair())
    yield settings
    embedded.stop(settings)
    shutil.rmtree(embedded.EmbeddedNode.from_settings(settings).instance, ignore_errors=True)


def test_lifecycle_start_idempotent_start_status_stop(second_node: Settings) -> None:
    with ThreadPoolExecutor(2) as pool:
        racing = list(pool.map(lambda _: embedded.start(second_node), range(2)))
    assert sorted(result.already_running for result in racing) == [False, True]
    assert len({result.pid for result in racing}) == 1
    first = next(result for result in racing if not result.already_running)
    assert first.url == second_node.elasticsearch.url
    assert check_cluster(second_node).startswith("9.")

    again = embedded.start(second_node)
    assert again.already_running and again.pid == first.pid

    status = cluster_status(second_node)
    assert status.version == second_node.node.version
    assert status.health in {"green", "yellow"}
    assert status.cluster_name == f"ctxdb-{second_node.node.port}"
    assert 400 * 2**20 <= status.heap_max_bytes <= 600 * 2**20

    env = cli_env(second_node)
    started = runner.invoke(app, ["es", "start"], env=env)
    assert started.exit_code == 0 and "already running" in started.output
    shown = runner.invoke(app, ["es", "status"], env=env)
    assert shown.exit_code == 0
    assert f"version: {second_node.node.version}" in shown.output
    assert f"pid {first.pid}" in shown.output
    logged = runner.invoke(app, ["es", "logs", "-n", "5"], env=env)
    assert logged.exit_code == 0 and f"ctxdb-{second_node.node.port}" in logged.output

    stopped = runner.invoke(app, ["es", "stop"], env=env)
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert embedded.running_pid(embedded.EmbeddedNode.from_settings(second_node)) is None
    assert not embedded.pid_alive(first.pid)
    assert not embedded.port_busy(second_node.node.port)
    assert embedded.stop(second_node) is False
    after = runner.invoke(app, ["es", "status"], env=env)
    assert after.exit_code == 1 and "not running" in after.output


def test_node_dying_at_start_up_reports_its_log(second_node: Settings) -> None:
    with pytest.raises(NodeStartError) as failure:
        embedded.start(second_node, extra_config={"ctxdb.no.such.setting": "x"})
    message = str(failure.value)
    assert "died during start-up" in message
    assert "unknown setting [ctxdb.no.such.setting]" in message
    assert embedded.running_pid(embedded.EmbeddedNode.from_settings(second_node)) is None


def test_slow_start_up_times_out_and_leaves_nothing_running(es_base_settings: Settings) -> None:
    settings = node_settings(es_base_settings, free_port_pair(), start_timeout_s=2.0)
    node = embedded.EmbeddedNode.from_settings(settings)
    try:
        with pytest.raises(NodeStartError, match="did not start within 2 s"):
            embedded.start(settings)
        assert embedded.running_pid(node) is None
        assert not embedded.port_busy(settings.node.port)
    finally:
        embedded.stop(settings)
        shutil.rmtree(node.instance, ignore_errors=True)


@pytest.mark.parametrize("busy_offset", [0, embedded.TRANSPORT_OFFSET])
def test_port_in_use_is_refused(es_base_settings: Settings, busy_offset: int) -> None:
    port = free_port_pair()
    settings = node_settings(es_base_settings, port)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port + busy_offset))
        squatter.listen()
        with pytest.raises(PortInUseError, match=f"port {port + busy_offset} "):
            embedded.start(settings)
        result = runner.invoke(app, ["es", "start"], env=cli_env(settings))
    assert result.exit_code == 1
    assert result.output.startswith("error: port") and len(result.output.splitlines()) == 1
    assert not embedded.EmbeddedNode.from_settings(settings).instance.exists()


def test_missing_java_is_a_clear_error(
    es_base_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = node_settings(es_base_settings, free_port_pair(), es_java_home=None, java_home=None)
    monkeypatch.setattr(java, "JVM_DIR", tmp_path / "no-jvms")  # a machine without JDKs
    with pytest.raises(JavaNotFoundError, match="no JDK >= 21 found"):
        embedded.start(settings)
    assert not embedded.EmbeddedNode.from_settings(settings).instance.exists()


def old_jdk(tmp_path: Path) -> Path:
    """The machine's Java 17, or (where it has none) a stand-in JDK home that reports Java 17:
    this test is about the search rejecting a too-old JDK, so a stand-in is allowed."""
    if JAVA_17.is_dir():
        return JAVA_17
    home = tmp_path / "jdk-17"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\necho 'openjdk version \"17.0.15\"' >&2\n")
    (home / "bin" / "java").chmod(0o755)
    return home


def test_java_17_is_too_old(tmp_path: Path) -> None:
    jdk17 = old_jdk(tmp_path)
    settings = Settings(node={"es_java_home": jdk17, "java_home": None})
    with pytest.raises(JavaNotFoundError) as failure:
        find_jdk(settings, jvm_dir=tmp_path / "no-jvms")
    assert f"{jdk17} (Java 17)" in str(failure.value)
    assert "set ES_JAVA_HOME" in str(failure.value)


def test_jdk_search_skips_old_explicit_home_and_picks_a_new_one(tmp_path: Path) -> None:
    settings = Settings(node={"es_java_home": old_jdk(tmp_path), "java_home": None})
    jdk = find_jdk(settings, jvm_dir=Path("/usr/lib/jvm"))
    assert jdk.major >= 21
    assert os.access(jdk.home / "bin" / "java", os.X_OK)


@pytest.mark.parametrize(
    ("version", "major"), [("25.0.3", 25), ("21", 21), ("17.0.15", 17), ("1.8.0_392", 8)]
)
def test_java_major(version: str, major: int) -> None:
    assert java_major(version) == major


def test_corrupt_cached_zip_is_detected(tmp_path: Path) -> None:
    settings = Settings(node={"cache_dir": tmp_path, "version": "9.2.4"})
    cached = distribution.zip_path(tmp_path, "9.2.4")
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"PK\x03\x04 truncated download")
    with pytest.raises(ChecksumError, match="is corrupt"):
        distribution.ensure_home(settings, tmp_path)
    assert not distribution.home_path(tmp_path, "9.2.4").exists()


def test_cli_start_with_corrupt_zip_exits_with_one_line(
    es_base_settings: Settings, tmp_path: Path
) -> None:
    cached = distribution.zip_path(tmp_path, es_base_settings.node.version)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not a zip")
    settings = node_settings(es_base_settings, free_port_pair(), cache_dir=tmp_path)
    result = runner.invoke(app, ["es", "start"], env=cli_env(settings))
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "is corrupt" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_unpinned_version_needs_a_checksum() -> None:
    with pytest.raises(ChecksumError, match="CTXDB_ES_ZIP_SHA512"):
        distribution.expected_sha512(Settings(node={"version": "9.9.9"}))
    pinned = Settings(node={"version": "9.9.9", "zip_sha512": "AB" * 64})
    assert distribution.expected_sha512(pinned) == "ab" * 64


def test_verified_zip_unpacks_with_run_bits(es_base_settings: Settings, tmp_path: Path) -> None:
    cache = distribution.cache_root(es_base_settings)
    zip_file = distribution.ensure_zip(es_base_settings, cache)
    home = tmp_path / "home"
    distribution.unpack(zip_file, home)
    launcher = home / "bin" / "elasticsearch"
    assert launcher.stat().st_mode & stat.S_IXUSR
    assert (home / "lib").is_dir() and (home / "config" / "jvm.options").is_file()


def test_missing_mvn_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(node={"cache_dir": tmp_path})
    monkeypatch.setenv("PATH", str(tmp_path / "no-mvn-here"))
    with pytest.raises(MavenError, match="not found"):
        distribution.ensure_home(settings, tmp_path)


def test_mvn_failure_is_reported(tmp_path: Path) -> None:
    """A version Maven Central does not have: mvn exits non-zero and its error is relayed."""
    settings = Settings(node={"cache_dir": tmp_path, "version": "0.0.1", "zip_sha512": "0" * 128})
    with pytest.raises(MavenError, match="mvn could not fetch"):
        distribution.ensure_home(settings, tmp_path)
