"""The root Typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="ctxdb",
    help="ctxdb: the context database that builds itself.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
