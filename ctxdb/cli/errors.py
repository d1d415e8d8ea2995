"""Every CLI failure as one line on stderr (`ctxdb.errors.describe`) and a non-zero exit status,
never a traceback."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LEASE_EXIT = 2
"""Exit status when another writer holds the lease (try again later)."""
CLIENT_LOGGERS = ("elastic_transport", "elasticsearch")
"""The Elasticsearch client's loggers: each retry and dead-node mark is a warning with a
traceback; the error they end in reaches the `error:` line, so the CLI shows only their errors."""


def exit_status(exc: BaseException) -> int:
    """1, or `LEASE_EXIT` for a lease held or lost (imported here: the lease loads the client)."""
    from ctxdb.coordination.lease import LeaseHeld, LeaseLost

    return LEASE_EXIT if isinstance(exc, LeaseHeld | LeaseLost) else 1


class OneLine(logging.Formatter):
    """A log record as one line: its message, then `: <cause>` for an exception, no traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = " ".join(record.getMessage().split("\n"))
        if record.exc_info and record.exc_info[1] is not None:
            from ctxdb.errors import describe

            text = f"{text}: {describe(record.exc_info[1])}"
        return text


class StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes (as logging's last resort does)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        """`StreamHandler.setStream` has nothing to replace: the stream is `sys.stderr`."""


def configure_logging(level: int = logging.WARNING) -> None:
    """CLI logging: records at `level` and above on stderr, each one line (`OneLine`), the
    Elasticsearch client's only at ERROR. Idempotent: every command group may call it."""
    root = logging.getLogger()
    if not any(isinstance(handler, StderrHandler) for handler in root.handlers):
        handler = StderrHandler()
        handler.setFormatter(OneLine())
        root.addHandler(handler)
    root.setLevel(level)
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
