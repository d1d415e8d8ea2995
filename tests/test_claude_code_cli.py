"""The commands the Claude Code guide gives (README, docs/capture.md): `ctxdb jobs run` from any
folder without DAGSTER_HOME, quietly; `ctxdb serve` prints the viewer's URL; two ctxdb homes on
one index prefix are warned about."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen

import pytest
from claude_code_sessions import FIXTURES
from conftest_ports import free_port_pair

from ctxdb.capture.claude_code.importer import import_transcripts
from ctxdb.capture.claude_code.install import hook_config
from ctxdb.cli.dagster_env import JOB_SITE, job_environment, prefix_warning, project_instance_yaml
from ctxdb.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CTXDB = Path(sys.executable).with_name("ctxdb")
NOISE = ("BetaWarning", "PreviewWarning", "SupersessionWarning", "telemetry", "Traceback")


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_memory_job_runs_from_any_folder_without_dagster_home(
    settings: Settings, tmp_path: Path
) -> None:
    """The guide's `ctxdb jobs run memory_job` on an imported real transcript, from a folder
    that is not the checkout, without DAGSTER_HOME: it succeeds, prints no Dagster notice or
    banner, and says each thing once."""
    config = hook_config(settings)
    source = FIXTURES / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"
    imported = import_transcripts([source], Path(config.spool).parent, config.identity, 0)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env |= {"CTXDB_HOME": str(settings.home), "CTXDB_ES_CACHE_DIR": str(tmp_path / "es-cache")}
    env |= {"CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(CTXDB), "jobs", "run", "memory_job"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert not [word for word in NOISE if word in output]
    said = [line.split(" - ", 5)[-1] for line in output.splitlines() if " - INFO - " in line]
    landed = f"landed {imported.events} events from 1 files (0 duplicates, 0 quarantined)"
    assert sum(line.endswith(f" - {landed}") for line in said) == 1
    indexed = [line for line in said if " indexed, " in line]
    assert len(indexed) == 2 and len({line.split(":")[0] for line in indexed}) == 2
    assert len(said) == len(set(said))  # no line printed twice
    instance = settings.home / "dagster"
    assert (instance / "dagster.yaml").resolve() == project_instance_yaml()
    run_id = output.split(" - memory_job - ", 1)[1].split(" - ", 1)[0]
    assert (instance / "history").is_dir() and (instance / run_id).is_dir()  # the run's record


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
    assert "CTXDB_ELASTICSEARCH_INDEX_PREFIX" in warning and "\n" not in warning
    assert prefix_warning(own, claims) is None


def test_serve_prints_the_viewer_url(tmp_path: Path) -> None:
    free_port = free_port_pair()
    env = os.environ | {"CTXDB_HOME": str(tmp_path / "home")}
    env |= {"CTXDB_ELASTICSEARCH_INDEX_PREFIX": "t-serve"}
    env |= {"CTXDB_ES_CACHE_DIR": str(tmp_path / "es-cache")}
    log = tmp_path / "serve.log"
    with log.open("w") as errors:
        server = subprocess.Popen(
            [str(CTXDB), "serve", "--port", str(free_port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "viewer" not in line and time.monotonic() < deadline:
            line = server.stdout.readline()
        assert line.strip().startswith(f"ctxdb viewer: http://127.0.0.1:{free_port}/")
        # the URL it printed answers (then the stop below is a running server's, not a start's)
        answered = None
        while answered is None and time.monotonic() < deadline:
            try:
                with urlopen(f"http://127.0.0.1:{free_port}/openapi.json", timeout=5) as reply:
                    answered = reply.status
            except OSError:
                time.sleep(0.2)
        assert answered == 200, log.read_text()[-3000:]
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            pytest.fail(f"ctxdb serve outlived SIGTERM by 30 s:\n{log.read_text()[-3000:]}")
