"""`ctxdb es start|stop|status|logs`: manage the embedded node (or check an external cluster)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from ctxdb.cli.app import app
from ctxdb.cli.errors import configure_logging
from ctxdb.errors import ElasticsearchSetupError
from ctxdb.index.health import check_cluster, cluster_status
from ctxdb.node import embedded
from ctxdb.settings import get_settings

es_app = typer.Typer(help="Manage the embedded Elasticsearch node.", no_args_is_help=True)
app.add_typer(es_app, name="es")

T = TypeVar("T")


@es_app.callback()
def _logging() -> None:
    configure_logging(logging.INFO)


def _or_exit(action: Callable[[], T]) -> T:
    """Run `action`; a set-up error becomes one message on stderr and exit status 1."""
    try:
        return action()
    except ElasticsearchSetupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@es_app.command()
def start() -> None:
    """Start the embedded node (download and install on first use); idempotent."""
    settings = get_settings()
    if not settings.embedded:
        version = _or_exit(lambda: check_cluster(settings))
        typer.echo(f"using Elasticsearch {version} at {settings.elasticsearch.url} (external)")
        return
    result = _or_exit(lambda: embedded.start(settings))
    state = "already running" if result.already_running else "started"
    typer.echo(f"Elasticsearch {settings.node.version} {state} at {result.url} (pid {result.pid})")


@es_app.command()
def stop() -> None:
    """Stop the embedded node cleanly."""
    settings = get_settings()
    if not settings.embedded:
        typer.echo(f"{settings.elasticsearch.url} is an external cluster; nothing to stop")
        return
    stopped = _or_exit(lambda: embedded.stop(settings))
    node = embedded.EmbeddedNode.from_settings(settings)
    typer.echo(f"stopped the node at {node.url}" if stopped else f"no node running at {node.url}")


@es_app.command()
def status() -> None:
    """Version, health, heap and document count; exit 1 when the node is not running."""
    settings = get_settings()
    if settings.embedded:
        node = embedded.EmbeddedNode.from_settings(settings)
        pid = embedded.running_pid(node)
        if pid is None:
            typer.echo(f"the embedded node at {node.url} is not running", err=True)
            raise typer.Exit(1)
        typer.echo(f"embedded: pid {pid}, files under {node.instance}")
    report = _or_exit(lambda: cluster_status(settings))
    typer.echo("\n".join(report.lines()))


@es_app.command()
def logs(
    lines: Annotated[int, typer.Option("--lines", "-n", min=1, help="How many lines.")] = 50,
) -> None:
    """Print the last lines of the embedded node's log."""
    node = embedded.EmbeddedNode.from_settings(get_settings())
    found = embedded.node_logs(node, lines)
    if not found:
        typer.echo(f"no log yet under {node.logs_dir}", err=True)
        raise typer.Exit(1)
    typer.echo("\n".join(found))
