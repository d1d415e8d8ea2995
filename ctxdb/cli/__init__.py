"""The `ctxdb` command line: every module in this package registers its commands on `app`.
In: arguments and the environment; out: the same operations as the Dagster jobs, plus admin tools.

Importing this package loads nothing else: `main` goes straight to the Claude Code hook for
`ctxdb capture claude-code hook` (a process per Claude Code event, which must start fast) and
registers every command module otherwise.
"""

from __future__ import annotations

import sys

HOOK_ARGS = ["capture", "claude-code", "hook"]


def _register_all() -> None:
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name != "app":
            importlib.import_module(f"{__name__}.{module.name}")


def main() -> None:
    if sys.argv[1:4] == HOOK_ARGS and "--help" not in sys.argv:
        from ctxdb.capture.claude_code.hook import run

        raise SystemExit(run(sys.argv[4:]))
    import typer

    from ctxdb.cli.app import app
    from ctxdb.index.lease import LeaseHeld, LeaseLost

    _register_all()
    try:
        app()
    except (LeaseHeld, LeaseLost) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
