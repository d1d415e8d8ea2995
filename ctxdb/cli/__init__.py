"""The `ctxdb` command line: every module in this package registers its commands on `app`.
In: arguments and the environment; out: the same operations as the Dagster jobs, plus admin tools.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer

from ctxdb.cli.app import app
from ctxdb.index.lease import LeaseHeld, LeaseLost


def _register_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "app":
            importlib.import_module(f"{__name__}.{module.name}")


def main() -> None:
    _register_all()
    try:
        app()
    except (LeaseHeld, LeaseLost) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
