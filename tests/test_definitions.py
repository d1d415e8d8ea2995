"""The Dagster code location loads, in-process and through `dagster definitions validate`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dagster import Definitions

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_load() -> None:
    from pipelines.definitions import defs

    assert isinstance(defs, Definitions)
    repository = defs.get_repository_def()
    assert "memory_job" in repository.job_names
    assert {"delta", "es"} <= set(repository.get_top_level_resources())


def test_dagster_definitions_validate(tmp_path: Path) -> None:
    dagster = Path(sys.executable).with_name("dagster")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run(
        [str(dagster), "definitions", "validate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr
