"""Issue 12, findings 20 and 24: failures reach the operator as one line naming what failed and
why, with a non-zero exit status, never as a Python traceback (CLI and Dagster job logs)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from dagster import DagsterEventType, DagsterInstance
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

import ctxdb.storage.delta as delta_module
from ctxdb.cli import main
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.errors import StorageError
from pipelines.ops_jobs import retention_job

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def write_events(landing: Path, seed: int = 0) -> None:
    generated = generate_events(users=2, conversations=2, seed=seed, now=NOW, days=3)
    write_sample(generated, landing, files_root=landing.parent / "files", per_file=500)


def run_cli(
    args: list[str], env: dict[str, str], prefix: tuple[str, ...] = (), **kw
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, CTXDB, *args], env={**os.environ, **env}, capture_output=True, text=True, **kw
    )


def assert_one_error_line(stderr: str, *, alone: bool = True) -> str:
    """One `error:` line, no Python traceback and (when `alone`) nothing else; returns it."""
    assert "Traceback (most recent call last)" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    if alone:
        assert stderr.strip() == lines[0], stderr
    return lines[0]


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`ctxdb <args>` in this process: (exit status, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(args)
    return int(exited.value.code or 0), capsys.readouterr().err


def unprivileged() -> tuple[str, ...]:
    """The prefix that makes permissions bind the command: chmod does not stop root, so as root
    it runs without capabilities (still uid 0, so it can reach a checkout private to root, which
    `nobody` could not)."""
    if os.geteuid() != 0:
        return ()
    return ("setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A scratch directory, its read-only parts made writable again to remove it."""
    path = Path(tempfile.mkdtemp(prefix="ctxdb-ro-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    for sub in path.rglob("*"):
        if sub.is_dir():
            sub.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


def test_finding_20_read_only_delta_directory_is_one_line(shared_dir: Path) -> None:
    env = {"CTXDB_HOME": str(shared_dir), "HOME": str(shared_dir)}
    write_events(shared_dir / "landing" / "a")
    first = run_cli(["land"], env)
    assert first.returncode == 0, first.stderr
    write_events(shared_dir / "landing" / "b", seed=1)
    for path in shared_dir.rglob("*"):
        read_only = "delta" in path.relative_to(shared_dir).parts
        if path.is_dir():
            path.chmod(0o555 if read_only else 0o755)
        else:
            path.chmod(0o444 if read_only else 0o644)
    done = run_cli(["land"], env, unprivileged(), cwd=shared_dir)
    assert done.returncode == 1
    # delta-rs may also print a panic note of its own Rust worker thread (not a Python traceback)
    line = assert_one_error_line(done.stderr, alone=False)
    assert line.startswith("error: cannot write table ")
    assert "raw_turn_events" in line or "quarantined_events" in line
    assert line.endswith("permission denied (read-only directory?)")


@pytest.mark.parametrize("root", ["read-only directory", "regular file"])
def test_issue_24_finding_6_first_landing_onto_an_unwritable_delta_root_is_one_line(
    root: str, shared_dir: Path
) -> None:
    env = {"CTXDB_HOME": str(shared_dir), "HOME": str(shared_dir)}
    write_events(shared_dir / "landing")
    delta = shared_dir / "delta"  # still empty: the landing would create its first table
    prefix: tuple[str, ...] = ()
    if root == "regular file":
        delta.write_text("not a directory\n")
        expected = "not a directory (a file is in the way)"
    else:
        delta.mkdir(mode=0o555)
        delta.chmod(0o555)
        prefix = unprivileged()
        expected = "permission denied (read-only directory?)"
    done = run_cli(["land"], env, prefix, cwd=shared_dir)
    assert done.returncode == 1
    line = assert_one_error_line(done.stderr, alone=False)
    table = r"(raw_turn_events|quarantined_events|landed_files)"
    assert re.fullmatch(
        rf"error: cannot write table {table} at {delta}/\1: {re.escape(expected)}", line
    )
    assert "TableNotFoundError" not in done.stderr


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        DeltaError(
            "Generic LocalFileSystem error: Unable to copy data to file: No space left on device "
            "(os error 28)"
        ),
    ],
)
def test_finding_20_disk_full_is_one_line(
    failure: Exception,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A fake write: no small file system can be mounted here, so the Delta writers (a table's
    # creation before its first MERGE, a plain write) are replaced by ones that fail as delta-rs
    # does on a full disk (an OSError, or its `(os error 28)` text).
    def full_disk(*args, **kwargs):
        raise failure

    class FullDisk(DeltaTable):
        create = staticmethod(full_disk)

    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    write_events(tmp_path / "landing")
    monkeypatch.setattr(delta_module, "DeltaTable", FullDisk)
    monkeypatch.setattr(delta_module, "write_deltalake", full_disk)
    status, stderr = run_main(["land"], capsys)
    assert status == 1
    line = assert_one_error_line(stderr)
    assert line.startswith("error: cannot write table ")
    assert line.endswith(": disk full (no space left on device)")
    with pytest.raises(StorageError) as raised:
        DeltaStore(str(tmp_path / "delta")).overwrite("turn_logs", pl.DataFrame({"a": [1]}))
    assert raised.value.table == "turn_logs" and raised.value.errno == errno.ENOSPC


def test_finding_20_job_log_has_the_one_line_cause(
    ops_settings: Settings, resources: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same fake full disk (see above) under a Dagster run: the run log names table and cause.
    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(delta_module, "write_deltalake", full_disk)
    with DagsterInstance.ephemeral() as instance:
        result = retention_job.execute_in_process(
            run_config={"ops": {"retention_sweep": {"config": {"dry_run": False}}}},
            resources=resources,
            instance=instance,
            raise_on_error=False,
        )
        assert not result.success
        errors = [
            e.user_message
            for e in instance.all_logs(result.run_id)
            if e.level >= 40 and e.dagster_event is None
        ]
        failures = result.all_events
    lines = [m for m in errors if m.startswith("retention_sweep failed: cannot write table ")]
    assert lines and lines[0].endswith(": disk full (no space left on device)"), errors
    assert any(e.event_type == DagsterEventType.STEP_FAILURE for e in failures)


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A home with a token store; returns alice's token."""
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", f"t-cli-{tmp_path.name[-12:].lower()}")
    from ctxdb.auth.credentials import TokenStore

    return TokenStore(tmp_path / "auth" / "tokens.json").issue("alice", tenant="t1")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["search", "x", "--knob", "weight_semantic=0", "--token", "ctxdb_0000_secret"],
            "unknown or revoked",
        ),
        (
            ["search", "x", "--knob", "weight_semantic=0", "--token", "not-a-token"],
            "unknown or revoked",
        ),
        (
            ["search", "--window", "2026-02-01..2026-01-01T00:00:00Z"],
            "since must not be after until",
        ),
        (["pull", "conv:fi:conv_c1.turn_t1.files/../../x"], "unsafe path"),
        (["pull", "not-a-ref"], "not a conv: ref"),
        (["erase"], "exactly one of --user or --conversation"),
        (["tokens", "revoke", "nope"], ""),  # a torn token store: any one line will do
    ],
)
def test_finding_24_cli_errors_are_one_line(
    args: list[str], expected: str, cli_home: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if args[0] == "tokens":  # a torn write left two JSON documents in the token store
        store = Path(os.environ["CTXDB_HOME"]) / "auth" / "tokens.json"
        store.write_text(store.read_text() + "{}")
    elif "--token" not in args and args[0] != "erase":
        args = [*args, "--token", cli_home]
    status, stderr = run_main(args, capsys)
    assert status != 0
    assert expected in assert_one_error_line(stderr)


@pytest.mark.es
def test_finding_24_pull_of_missing_or_looping_ref_is_one_line(
    search_env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from conftest_search import APP, TENANT

    from ctxdb.storage.conversation_files import turn_file_path

    settings = search_env.settings
    monkeypatch.setenv("CTXDB_HOME", str(settings.home))
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", settings.elasticsearch.index_prefix)
    monkeypatch.chdir(tmp_path)
    turn_dir = Path(settings.files) / turn_file_path(TENANT, APP, "alice", "c-sheets", "t2")
    (turn_dir / "files" / "cycle").symlink_to("cycle")
    token = ["--token", search_env.tokens["alice"]]
    for ref, expected in [
        ("conv:fi:conv_c-sheets.turn_t2.files/missing.xlsx", "not found"),
        ("conv:fi:conv_c-sheets.turn_t2.files/cycle", "not found"),
        ("conv:fi:conv_c-nobody.turn_t9.files/x", "not found"),
    ]:
        status, stderr = run_main(["pull", ref, *token], capsys)
        assert status == 1
        assert expected in assert_one_error_line(stderr)
    status, stderr = run_main(
        ["pull", "conv:fi:conv_c-sheets.turn_t2.files/fixed.xlsx", "-o", "/nonexistent/x", *token],
        capsys,
    )
    assert status == 1
    assert "FileNotFoundError" in assert_one_error_line(stderr)
