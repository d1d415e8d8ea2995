"""The `ctxdb` command line: every module in this package registers its commands on `app`.
In: arguments and the environment; out: the same operations as the Dagster jobs, plus admin tools.

Importing this package loads nothing else, and `main` loads only what the command needs: a hook
command (`ctxdb.cli.hooks.HOOKS`, a process per agent event) runs without Typer, and any other
command imports just the module that defines it (`ctxdb.cli.registry`; `ctxdb --help` none).
"""

from __future__ import annotations

import sys


def _register_all() -> None:
    """Import every command module (tests and tools that need the whole `app` registered)."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name != "app":
            importlib.import_module(f"{__name__}.{module.name}")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI on `argv` (default: the process's arguments); an uncaught error becomes one
    line on stderr (`error: ...`) and exit status 1 (2 when another writer holds the lease)."""
    args = sys.argv[1:] if argv is None else argv
    from ctxdb.cli.hooks import HOOKS

    hook = HOOKS.get(tuple(args[:3])) if "--help" not in args else None
    try:
        if hook is not None:
            raise SystemExit(hook(args[3:]))
        from ctxdb.cli.app import app
        from ctxdb.cli.errors import configure_logging

        configure_logging()
        app(args=args, prog_name="ctxdb")
    except Exception as exc:
        import logging

        from ctxdb.cli.errors import exit_status
        from ctxdb.errors import describe

        logging.getLogger("ctxdb.cli").debug("ctxdb %s failed", args, exc_info=True)
        sys.stderr.write(f"error: {describe(exc)}\n")
        raise SystemExit(exit_status(exc)) from None
