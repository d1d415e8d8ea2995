"""The Dagster code location loads, in-process and through `dagster definitions validate`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import Definitions, asset, materialize
from pydantic import SecretStr

from ctxdb.settings import Settings, get_settings
from pipelines.resources import build_resources
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.settings import SettingsResource

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_load() -> None:
    from pipelines.definitions import defs

    assert isinstance(defs, Definitions)
    repository = defs.get_repository_def()
    assert "memory_job" in repository.job_names
    assert {"settings", "delta", "es", "embedder"} <= set(repository.get_top_level_resources())


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `command` from the repository root with `env`, its output captured as text."""
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_dagster_definitions_validate(tmp_path: Path) -> None:
    dagster = Path(sys.executable).with_name("dagster")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    done = _run([str(dagster), "definitions", "validate"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


def _import_in_fresh_interpreter(modules: list[str], env: dict[str, str]) -> str:
    """Import `modules` in a fresh interpreter; its stderr ('' when every import worked)."""
    script = f"import importlib\nfor m in {modules!r}: importlib.import_module(m)\n"
    done = _run([sys.executable, "-c", script], env)
    return "" if done.returncode == 0 else done.stderr


def test_no_module_reads_the_settings_at_import() -> None:
    """Settings no module could read (a shard count and Celery JSON that fail validation):
    every asset, resource and pipeline module imports; building the Definitions reads them."""
    env = {**os.environ, "CTXDB_SHARDS": "zero", "CTXDB_CELERY_CONFIG_SOURCE": "{not json"}
    code_locations = {"definitions", "celery_definitions", "demo"}
    modules = [
        f"{package}.{path.stem}"
        for package in ("assets", "resources", "pipelines")
        for path in sorted((ROOT / package).glob("*.py"))
        if path.stem not in code_locations
    ]
    assert len(modules) > 20
    assert _import_in_fresh_interpreter(modules, env) == ""
    failure = _import_in_fresh_interpreter(["pipelines.definitions"], env)
    assert "validation error for Settings\nshards" in failure


def test_resources_are_built_from_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One path from the settings to every resource: the `settings` resource pins what the code
    location loaded (never a secret or the object-store options), every other resource reads it,
    and a secret is read from the environment when the run starts."""
    monkeypatch.setenv("ELASTICSEARCH_API_KEY", "a2V5OnNlY3JldA==")
    monkeypatch.setenv("CTXDB_OBJECT_STORE_OPTIONS", '{"AWS_SECRET_ACCESS_KEY": "s3cret"}')
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", "built")
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_REQUEST_TIMEOUT", "7.5")
    monkeypatch.setenv("CTXDB_EMBEDDING_BATCH_SIZE", "16")
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path / "loaded"))
    built = build_resources(get_settings())
    pinned = built["settings"]
    assert isinstance(pinned, SettingsResource)
    assert pinned.changes["home"] == str(tmp_path / "loaded")
    assert pinned.changes["elasticsearch"]["index_prefix"] == "built"
    assert pinned.changes["elasticsearch"]["request_timeout"] == 7.5
    assert pinned.changes["embedding"] == {"batch_size": 16}
    assert "api_key" not in pinned.changes["elasticsearch"]
    assert "object_store_options" not in pinned.changes and "s3cret" not in repr(pinned)
    assert all(built[key].settings is pinned for key in ("delta", "es", "embedder"))

    seen: dict[str, object] = {}

    @asset
    def connection(settings: SettingsResource, delta: DeltaResource, es: ElasticsearchResource):
        seen["settings"] = settings.get()
        seen["delta_root"] = delta.store().root
        seen["authorization"] = es.client()._headers["authorization"]

    monkeypatch.setenv("ELASTICSEARCH_API_KEY", "bGF0ZXI6a2V5")  # changed after loading
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path / "elsewhere"))  # the run's cwd or env moved
    assert materialize([connection], resources=built).success
    run_settings = seen["settings"]
    assert isinstance(run_settings, Settings)
    assert seen["authorization"] == "ApiKey bGF0ZXI6a2V5"
    assert isinstance(run_settings.elasticsearch.api_key, SecretStr)
    assert run_settings.object_store_options["AWS_SECRET_ACCESS_KEY"] == "s3cret"
    assert seen["delta_root"] == run_settings.delta_uri == str(tmp_path / "loaded" / "delta")
    assert run_settings.landing_uri == str(tmp_path / "loaded" / "landing")
    assert (run_settings.elasticsearch.index_prefix, run_settings.embedding.batch_size) == (
        "built",
        16,
    )


def test_relative_paths_are_pinned_absolute_and_uris_as_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A relative CTXDB_HOME and CTXDB_STORAGE_ROOT are pinned as the folders the code location
    meant, so a run in another folder writes there; an object-store URI is pinned as given."""
    (tmp_path / "loaded").mkdir()
    (tmp_path / "worker").mkdir()
    monkeypatch.chdir(tmp_path / "loaded")
    monkeypatch.setenv("CTXDB_HOME", "rel")
    monkeypatch.setenv("CTXDB_STORAGE_ROOT", "data")
    built = build_resources(get_settings())
    seen: dict[str, Settings] = {}

    @asset
    def paths(settings: SettingsResource) -> None:
        seen["settings"] = settings.get()

    monkeypatch.chdir(tmp_path / "worker")
    assert materialize([paths], resources=built).success
    run_settings = seen["settings"]
    assert run_settings.home == tmp_path / "loaded" / "rel"
    assert run_settings.delta_uri == str(tmp_path / "loaded" / "data" / "delta")
    remote = SettingsResource.from_settings(Settings(home="rel", storage_root="s3://bucket/x"))
    assert remote.changes["storage_root"] == "s3://bucket/x"


def test_memory_job_runs_over_every_shard_and_refuses_a_run_of_one(tmp_path: Path) -> None:
    """The Dagster UI path (issue 40): memory_job's partitions are the CTXDB_SHARDS shards (the
    UI's "Materialize all..." lists them all), and a run of it over one shard, which the UI's
    default "Multiple runs (One per selected partition)" launches for each partition, stops at its
    first step with the documented ways in its error, before landing anything."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env |= {"CTXDB_HOME": str(tmp_path / "home"), "CTXDB_SHARDS": "2"}
    env |= {"CTXDB_ELASTICSEARCH_INDEX_PREFIX": f"t{tmp_path.name[-12:].lower()}"}
    keys = _run(
        [
            sys.executable,
            "-c",
            "from pipelines.definitions import defs; "
            "print(defs.resolve_job_def('memory_job').partitions_def.get_partition_keys())",
        ],
        env,
    )
    assert keys.stdout.strip() == "['0', '1']", keys.stderr[-2000:]
    ctxdb = Path(sys.executable).with_name("ctxdb")
    done = _run([str(ctxdb), "jobs", "run", "memory_job", "--partition", "1"], env)
    output = done.stdout + done.stderr
    assert done.returncode == 1
    assert "STEP_FAILURE" in output and 'Execution of step "raw_turn_events" failed' in output
    assert "this run covers shard partition 1 only: run `ctxdb jobs run memory_job`" in output
    assert '"Launch as... Single run"' in output
    assert not (tmp_path / "home" / "delta" / "raw_turn_events").exists()
