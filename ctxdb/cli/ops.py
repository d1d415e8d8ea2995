"""`ctxdb erase`, `ctxdb retention run`, `ctxdb compact` and `ctxdb jobs run NAME`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from ctxdb.cli.app import app
from ctxdb.cli.dagster_env import job_environment, prefix_warning
from ctxdb.index.client import make_client
from ctxdb.lifecycle.compaction import compact_all, unbounded
from ctxdb.lifecycle.erase import AmbiguousScope, Scope, erase
from ctxdb.lifecycle.retention import sweep
from ctxdb.lifecycle.scope import ScopeColumn
from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import WHOLE_RANGE_JOBS

retention_app = typer.Typer(help="Retention sweeps.", no_args_is_help=True)
app.add_typer(retention_app, name="retention")
jobs_app = typer.Typer(help="Launch Dagster jobs of the ctxdb code location.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")


@app.command("erase")
def erase_command(
    user: Annotated[
        str | None, typer.Option("--user", help="Erase every trace of this user.")
    ] = None,
    conversation: Annotated[
        str | None, typer.Option("--conversation", help="Erase this conversation.")
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="The tenant (needed when the id exists in several)."),
    ] = None,
    app_name: Annotated[
        str | None, typer.Option("--app", help="Only this app of the tenant.")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would go, per store; change nothing.")
    ] = False,
) -> None:
    """Erase a user or a conversation of one tenant everywhere, then verify that nothing remains
    (older table versions included)."""
    if bool(user) == bool(conversation):
        typer.echo("error: give exactly one of --user or --conversation", err=True)
        raise typer.Exit(2)
    try:
        column: ScopeColumn = "user_id" if user else "conversation_id"
        scope = Scope(column, user or conversation or "", tenant, app_name)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    settings = get_settings()
    store, client = DeltaStore.from_settings(settings), make_client(settings)
    try:
        report = erase(store, client, settings, scope, dry_run=dry_run)
    except AmbiguousScope as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if report.found and not report.dry_run and not report.verified:
        typer.echo(f"error: {report.message}", err=True)
        raise typer.Exit(1)
    typer.echo(report.message)


@retention_app.command("run")
def retention_run(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report, change nothing.")] = False,
    vacuum_hours: Annotated[
        int | None, typer.Option("--vacuum-hours", min=0, help="VACUUM window (default 168).")
    ] = None,
) -> None:
    """Purge expired rows from Delta, Elasticsearch and file storage, VACUUM and report."""
    settings = get_settings()
    store, client = DeltaStore.from_settings(settings), make_client(settings)
    report = sweep(store, client, settings, dry_run=dry_run, vacuum_hours=vacuum_hours)
    typer.echo(json.dumps(report.as_metadata(), indent=2, default=str))
    if report.status == "es_pending":
        cause = f" ({report.error})" if report.error else ""
        typer.echo(
            f"warning: {report.es_pending} Elasticsearch deletes pending{cause}; the next run"
            " retries",
            err=True,
        )


@app.command("compact")
def compact_command() -> None:
    """OPTIMIZE every Delta table; exit 1 when small files stay above the bound."""
    settings = get_settings()
    results = compact_all(DeltaStore.from_settings(settings), make_client(settings), settings)
    for result in results:
        typer.echo(
            f"{result.table}: {result.files_before} -> {result.files_after} files "
            f"({result.small_after} small)"
        )
    if unbounded(results):
        typer.echo(f"error: small files above the bound in {unbounded(results)}", err=True)
        raise typer.Exit(1)


@jobs_app.command("run")
def jobs_run(
    name: Annotated[str, typer.Argument(help="Job name, e.g. retention_job or erase_job.")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", exists=True, help="Run config YAML file.")
    ] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", "-p", help="Shard partition (shards_job).")
    ] = None,
) -> None:
    """Execute a job through `dagster job execute` in a subprocess (its exit status is ours).
    `memory_job` runs over every shard partition at once; `shards_job` takes `--partition`.
    Without DAGSTER_HOME the job runs in the instance `<ctxdb home>/dagster`."""
    from ctxdb.node.distribution import cache_root

    settings = get_settings()
    warning = prefix_warning(settings, cache_root(settings) / "prefixes.json")
    if warning:
        typer.echo(warning, err=True)
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "job", "execute", "-m", "pipelines.definitions", "-j", name]
    if config is not None:
        command += ["-c", str(config)]
    tags = job_tags(name, partition, settings.shards)
    if tags:
        command += ["--tags", json.dumps(tags)]
    done = subprocess.run(command, check=False, env=job_environment(settings, os.environ))
    raise typer.Exit(done.returncode)


def job_tags(name: str, partition: str | None, shards: int) -> dict[str, str]:
    """Run tags selecting the partitions a job run covers: one shard, or the whole range."""
    if partition is not None:
        return {"dagster/partition": partition}
    if name in WHOLE_RANGE_JOBS:
        return {
            "dagster/asset_partition_range_start": "0",
            "dagster/asset_partition_range_end": str(shards - 1),
        }
    return {}
