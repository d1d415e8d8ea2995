"""The root Typer application every command module registers on, as a lazy group: a top-level
command's module is imported when that command runs (`ctxdb.cli.registry` names it), and
`ctxdb --help` lists every command from the registry without importing any of them."""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main
from typer import _click
from typer.core import TyperCommand, TyperGroup

from ctxdb.cli.registry import COMMANDS


class Listed(TyperCommand):
    """A registry command not imported yet: enough for help (name, one line) and suggestions."""


class LazyGroup(TyperGroup):
    """A group that holds every registry command from the start, each a `Listed` stand-in
    until it is resolved to run, which imports its module (click's "lazily loading
    subcommands"). Help and "did you mean" read the stand-ins; nothing else is imported."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, entry in COMMANDS.items():
            self.commands.setdefault(name, Listed(name, help=entry.help))

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(dict.fromkeys([*COMMANDS, *self.commands]))

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        if args and isinstance(self.commands.get(args[0]), Listed):
            self._load(args[0])
        return super().resolve_command(ctx, args)

    def _load(self, name: str) -> None:
        """Import the module of `name` and take the commands it registered on `app`."""
        importlib.import_module(f"ctxdb.cli.{COMMANDS[name].module}")
        loaded = typer.main.get_group(app).commands
        self.commands.update((n, c) for n, c in loaded.items() if not isinstance(c, Listed))
        if isinstance(self.commands[name], Listed):
            del self.commands[name]


app = typer.Typer(
    name="ctxdb",
    help="ctxdb: the context database that builds itself.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)


@app.callback()
def root() -> None:
    """A callback keeps `app` a group while no command module is imported, or only one."""
