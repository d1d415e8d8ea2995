"""A failure as one line an operator reads first: the CLI's `error:` line and a failed Dagster
step's log line say the same thing (the full error with its stack stays where each keeps it)."""

from __future__ import annotations

from pydantic import ValidationError

MAX_CHARS = 500


class SearchUnavailable(RuntimeError):
    """Elasticsearch (the search indices or the shared token store) is unreachable or failed:
    HTTP 503, CLI exit 3. Here, below every stage, so auth need not import search to raise it."""


class ElasticsearchSetupError(Exception):
    """Base of every error `ctxdb es` reports as one line and a non-zero exit: the embedded
    node's (`ctxdb.node.errors`) and the configured cluster's (`ctxdb.index.errors`)."""


def validation_line(exc: ValidationError) -> str:
    """Each field and reason of a pydantic error, without the input it echoes."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def describe(exc: BaseException) -> str:
    """One line saying what failed: the error's own message, with its type when that is all a
    generic error has to say."""
    if isinstance(exc, ValidationError):
        text = validation_line(exc)
    else:
        lines = str(exc).strip().splitlines()
        text = lines[0] if lines else ""
        if type(exc).__module__.split(".")[0] != "ctxdb":
            text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
