"""The environment `ctxdb jobs run` gives `dagster job execute`, and the index prefix check.

Without `DAGSTER_HOME` a job runs in the default instance `<ctxdb home>/dagster` (created on first
use, with the project's `dagster.yaml` when the code location is a checkout, else a minimal one
with telemetry off), so the command works from any folder. Dagster's own notices a user cannot act
on (BetaWarning, PreviewWarning, SupersessionWarning of `dagster job execute`) are filtered out in
every process of the run, step workers included (`job_site/sitecustomize.py` on PYTHONPATH).

Two ctxdb homes writing one Elasticsearch node under one index prefix overwrite each other's
indices; `prefix_warning` tells when the prefix was last claimed on this machine by another home
(a claim file next to the embedded node's files).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path

from ctxdb.settings import Settings

JOB_SITE = Path(__file__).with_name("job_site")
"""Holds the `sitecustomize` that filters Dagster's notices in every process of a job run."""
MINIMAL_INSTANCE = (
    "telemetry:\n  enabled: false\n"
    "python_logs:\n  managed_python_loggers:\n    - ctxdb\n  python_log_level: INFO\n"
)


def project_instance_yaml() -> Path | None:
    """The checkout's `dagster.yaml` (next to the `pipelines` package), when there is one."""
    spec = importlib.util.find_spec("pipelines")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).resolve().parents[1] / "dagster.yaml"
    return path if path.is_file() else None


def default_instance(settings: Settings) -> Path:
    """`<home>/dagster`, created with a `dagster.yaml` (linked to the checkout's, else minimal)."""
    home = (settings.home / "dagster").absolute()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() and not config.is_symlink():
        source = project_instance_yaml()
        if source is not None:
            config.symlink_to(source)
        else:
            config.write_text(MINIMAL_INSTANCE)
    return home


def job_environment(settings: Settings, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with DAGSTER_HOME (kept when set, else the default instance) and the warning
    filters of a job run on PYTHONPATH."""
    env = dict(environ)
    if not env.get("DAGSTER_HOME"):
        env["DAGSTER_HOME"] = str(default_instance(settings))
    paths = [str(JOB_SITE), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def prefix_warning(settings: Settings, claims: Path) -> str | None:
    """Claim the index prefix on this Elasticsearch URL for this home in the `claims` file; a
    one-line warning when another ctxdb home (still present) claimed it before."""
    key = f"{settings.elasticsearch.url.rstrip('/')} {settings.elasticsearch.index_prefix}"
    home = str(settings.home.absolute())
    try:
        data = json.loads(claims.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    other = data.get(key)
    data[key] = home
    try:
        claims.parent.mkdir(parents=True, exist_ok=True)
        tmp = claims.with_name(f"{claims.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, claims)
    except OSError:
        pass
    if isinstance(other, str) and other != home and Path(other).exists():
        return (
            f"warning: index prefix '{settings.elasticsearch.index_prefix}' on "
            f"{settings.elasticsearch.url} is also used by the ctxdb home {other}; both write the "
            "same indices (set CTXDB_ELASTICSEARCH_INDEX_PREFIX to keep them apart)"
        )
    return None
