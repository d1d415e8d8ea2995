"""`ctxdb index status|verify|reindex`: inspect the search indices, compare every document id with
Delta, and rebuild them without downtime."""

from __future__ import annotations

import json
import logging
from typing import Annotated

import typer
from elasticsearch import ConnectionError as ESConnectionError

from ctxdb.cli.app import app
from ctxdb.cli.errors import configure_logging
from ctxdb.embedding.backends import memory_embedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.checks import verify_ids
from ctxdb.index.client import make_client
from ctxdb.index.routing import layout_mismatches, settings_layout
from ctxdb.index.status import IndexStatus, all_status
from ctxdb.index.sync import sync_live
from ctxdb.lifecycle.reindex import ReindexFailed, drop_after_grace, reindex
from ctxdb.settings import get_settings
from ctxdb.storage.delta import DeltaStore

index_app = typer.Typer(help="Search indices: status, verify and reindex.", no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.callback()
def _logging() -> None:
    configure_logging(logging.INFO)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _replicas(row: IndexStatus) -> str:
    """`1` for a fixed count, `0 (0-1)` for the count an auto-expand range gives now."""
    if row.number_of_replicas is None:
        return "-"
    if row.auto_expand_replicas is None:
        return str(row.number_of_replicas)
    return f"{row.number_of_replicas} ({row.auto_expand_replicas})"


@index_app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per index.")] = False,
) -> None:
    """Per index: alias, concrete index and version, documents, vector coverage, size, replicas
    (the live count, and the auto-expand range when set), health, model."""
    settings = get_settings()
    try:
        rows = all_status(make_client(settings), settings.elasticsearch.index_prefix)
    except ESConnectionError as exc:
        typer.echo(f"error: Elasticsearch at {settings.elasticsearch.url} is unreachable", err=True)
        raise typer.Exit(1) from exc
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row.model_dump()))
        return
    typer.echo(
        f"{'alias':<24} {'index':<28} {'ver':>3} {'docs':>9} {'vectors':>18} {'size':>10} "
        f"{'replicas':>10} {'health':<6}  model"
    )
    for row in rows:
        coverage = (
            f"{row.with_vector}/{row.embeddable} {row.coverage_pct:.1f}%"
            if row.coverage_pct is not None
            else "-"
        )
        typer.echo(
            f"{row.alias:<24} {row.index or '(none)':<28} {row.version or '-':>3} {row.docs:>9} "
            f"{coverage:>18} {_size(row.size_bytes):>10} {_replicas(row):>10} "
            f"{row.health or '-':<6}  {row.model_id or '-'}"
        )
    wanted = settings_layout(settings)
    for row in rows:
        for line in layout_mismatches(row.layout or {}, wanted):
            typer.echo(f"{row.alias}: {line}; `ctxdb index reindex` applies the settings")


@index_app.command()
def verify(
    sample: Annotated[int, typer.Option(help="Differing ids shown per index.")] = 20,
) -> None:
    """Compare every document id of each live index with Delta (reads whole tables and scrolls
    every document); exits 1 when an id is missing or extra."""
    settings = get_settings()
    checks = verify_ids(
        DeltaStore.from_settings(settings),
        make_client(settings),
        settings.elasticsearch.index_prefix,
        sample=sample,
    )
    for check in checks:
        typer.echo(json.dumps({"kind": check.kind, "ok": check.ok, **check.as_metadata()}))
    if not all(check.ok for check in checks):
        raise typer.Exit(1)


@index_app.command("reindex")
def reindex_command(
    model: Annotated[
        str | None, typer.Option(help="Embedding model (default: configured).")
    ] = None,
    grace: Annotated[float | None, typer.Option(help="Seconds to keep the old indices.")] = None,
    min_coverage: Annotated[float, typer.Option(help="Minimum vector coverage %.")] = 0.0,
) -> None:
    """Build new index versions from Delta, verify, swap aliases atomically, drop the old ones."""
    settings = get_settings()
    store = DeltaStore.from_settings(settings)
    embedder = memory_embedder(settings.embedding, store, model_name=model)
    es = make_client(settings)
    try:
        report = reindex(store, es, settings, embedder, min_coverage_pct=min_coverage)
    except ReindexFailed as exc:
        typer.echo(f"error: {exc} (aliases unchanged)", err=True)
        raise typer.Exit(1) from exc
    for swap in report.swaps:
        typer.echo(f"{swap.alias}: {swap.old or '(none)'} -> {swap.new}")
    vectors = sum(build.vectors for build in report.builds.values())
    typer.echo(
        f"embedded {report.embed.embedded} texts, {vectors} vectors indexed, {report.seconds:.1f}s"
    )
    grace_s = settings.elasticsearch.reindex_grace_s if grace is None else grace
    dropped = drop_after_grace(es, settings, grace_s=grace_s)
    typer.echo(f"dropped {', '.join(dropped) or 'nothing'}")


@index_app.command("sync")
def sync_command(
    embed: Annotated[
        bool, typer.Option("--embed/--no-embed", help="Embed new or changed role rows first.")
    ] = True,
) -> None:
    """Embed new role rows, then sync the live indices with Delta (as memory_job's assets do)."""
    settings = get_settings()
    store = DeltaStore.from_settings(settings)
    embedder = memory_embedder(settings.embedding, store)
    if embed:
        report = embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
        typer.echo(json.dumps({"embedding": report.as_metadata()}, default=str))
    es = make_client(settings)
    for synced in sync_live(store, es, settings, model_id=embedder.model_id):
        typer.echo(json.dumps({"index": synced.as_metadata()}, default=str))
