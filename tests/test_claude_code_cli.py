"""The commands the Claude Code guide gives (README, docs/capture.md): `ctxdb jobs run` from any
folder without DAGSTER_HOME, quietly; `ctxdb serve` prints the viewer's URL; two ctxdb homes on
one index prefix are warned about."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest_ports import free_port_pair

from ctxdb.cli.dagster_env import JOB_SITE, job_environment, prefix_warning, project_instance_yaml
from ctxdb.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CTXDB = Path(sys.executable).with_name("ctxdb")
NOISE = ("BetaWarning", "PreviewWarning", "SupersessionWarning", "telemetry", "Traceback")


def test_a_job_runs_from_any_folder_without_dagster_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env |= {"CTXDB_HOME": str(tmp_path / "home"), "CTXDB_INDEX_PREFIX": f"t{os.getpid()}cc"}
    env |= {"CTXDB_ES_CACHE_DIR": str(tmp_path / "es-cache")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(CTXDB), "jobs", "run", "compaction_job"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "compaction_job" in output and "compacted 0 tables" in output
    assert not [word for word in NOISE if word in output]
    instance = tmp_path / "home" / "dagster"
    assert (instance / "dagster.yaml").resolve() == project_instance_yaml()
    run_id = output.split(" - compaction_job - ", 1)[1].split(" - ", 1)[0]
    assert (instance / "history").is_dir() and (instance / run_id).is_dir()  # the run's record
    said = [line.split(" - ", 5)[-1] for line in output.splitlines() if " - INFO - " in line]
    assert len(said) == len(set(said))  # no line printed twice


def test_job_environment_keeps_a_set_dagster_home_and_adds_the_warning_filter(
    tmp_path: Path,
) -> None:
    settings = Settings(home=tmp_path / "home")
    env = job_environment(settings, {"DAGSTER_HOME": "/srv/dagster", "PYTHONPATH": "/x"})
    assert env["DAGSTER_HOME"] == "/srv/dagster"
    assert env["PYTHONPATH"] == os.pathsep.join([str(JOB_SITE), "/x"])
    assert not (tmp_path / "home" / "dagster").exists()
    default = job_environment(settings, {})
    assert default["DAGSTER_HOME"] == str((tmp_path / "home" / "dagster").absolute())


def test_two_homes_on_one_index_prefix_are_warned_about(tmp_path: Path) -> None:
    claims = tmp_path / "claims.json"
    ann = Settings(home=tmp_path / "ann", elasticsearch={"index_prefix": "shared"})
    bob = Settings(home=tmp_path / "bob", elasticsearch={"index_prefix": "shared"})
    own = Settings(home=tmp_path / "bob", elasticsearch={"index_prefix": "bob"})
    ann.home.mkdir()
    assert prefix_warning(ann, claims) is None
    assert prefix_warning(ann, claims) is None
    warning = prefix_warning(bob, claims)
    assert warning is not None and str(ann.home.absolute()) in warning
    assert "CTXDB_INDEX_PREFIX" in warning and "\n" not in warning
    assert prefix_warning(own, claims) is None


def test_serve_prints_the_viewer_url(tmp_path: Path) -> None:
    free_port = free_port_pair()
    env = os.environ | {"CTXDB_HOME": str(tmp_path / "home"), "CTXDB_INDEX_PREFIX": "t-serve"}
    env |= {"CTXDB_ES_CACHE_DIR": str(tmp_path / "es-cache")}
    server = subprocess.Popen(
        [str(CTXDB), "serve", "--port", str(free_port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "viewer" not in line and time.monotonic() < deadline:
            line = server.stdout.readline()
        assert line.strip().startswith(f"ctxdb viewer: http://127.0.0.1:{free_port}/")
    finally:
        server.terminate()
        server.wait(30)
