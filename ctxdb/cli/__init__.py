"""`ctxdb` command line: every module in this package registers its commands on `app`."""

from __future__ import annotations

import importlib
import pkgutil

from ctxdb.cli.app import app


def _register_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "app":
            importlib.import_module(f"{__name__}.{module.name}")


def main() -> None:
    _register_all()
    app()
