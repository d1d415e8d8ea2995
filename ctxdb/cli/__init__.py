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


def main(argv: list[str] | None = None) -> None:
    """Run the CLI on `argv` (default: the process's arguments); an uncaught error becomes one
    line on stderr (`error: ...`) and exit status 1 (2 when another writer holds the lease)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:3] == HOOK_ARGS and "--help" not in args:
        from ctxdb.capture.claude_code.hook import run

        raise SystemExit(run(args[3:]))
    import logging

    import typer

    from ctxdb.cli.app import app
    from ctxdb.cli.errors import configure_logging, exit_status
    from ctxdb.errors import describe

    configure_logging()
    _register_all()
    try:
        app(args=args, prog_name="ctxdb")
    except Exception as exc:
        logging.getLogger("ctxdb.cli").debug("ctxdb %s failed", args, exc_info=True)
        typer.echo(f"error: {describe(exc)}", err=True)
        raise SystemExit(exit_status(exc)) from None
