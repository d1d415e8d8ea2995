"""`ctxdb context`: the context pack of the token's user (ctxdb/pack), as markdown or JSON.

Runs as the principal of a bearer token (`--token` or CTXDB_TOKEN), never as a user named on the
command line. `--project` takes a project folder (its agent id is derived as capture derives it)
or an agent id; `--conversation` a `conv:conversation:<id>` ref, any ref of that conversation or
a bare id.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer
from pydantic import ValidationError

from ctxdb.cli.app import app
from ctxdb.cli.search import JsonOpt, TokenOpt, _principal, _run, _service
from ctxdb.contract.projects import resolve_project
from ctxdb.contract.refs import RefError, parse_ref
from ctxdb.errors import validation_line
from ctxdb.pack.models import DEFAULT_BUDGET, ContextRequest
from ctxdb.settings import get_settings


def conversation_id(value: str) -> str:
    """The conversation id of a ref of it, or `value` itself."""
    if not value.startswith("conv:"):
        return value
    ref = parse_ref(value)
    if ref.conversation_id is None:
        raise RefError(f"ref {value!r} names no conversation")
    return ref.conversation_id


@app.command("context")
def context_command(
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", help="Reload a conversation (conv:conversation:ID or ID)."),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option("--project", help="A project folder (its git root counts) or an agent id."),
    ] = None,
    budget: Annotated[int, typer.Option(help="Most tokens the pack holds.")] = DEFAULT_BUDGET,
    query: Annotated[
        str, typer.Option("--query", help="Add the earlier turns most relevant to it.")
    ] = "",
    token: TokenOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """A compact digest of your memory for an agent: recent sessions, unfinished turns, recent
    work and related turns, each with its age and ref (--conversation reloads one)."""
    from ctxdb.pack.build import build_pack
    from ctxdb.storage.delta import DeltaStore

    settings = get_settings()
    principal = _principal(settings, token)
    try:
        request = ContextRequest(
            conversation_id=_run(lambda: conversation_id(conversation)) if conversation else None,
            project=resolve_project(project) if project else None,
            budget=budget,
            query=query,
        )
    except ValidationError as exc:
        typer.echo(f"error: {validation_line(exc)}", err=True)
        raise typer.Exit(2) from None
    search = _service(settings).search if query.strip() else None
    store = DeltaStore.from_settings(settings)
    pack = _run(lambda: build_pack(principal, request, datetime.now(UTC), store, search))
    for warning in pack.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if json_out:
        typer.echo(pack.model_dump_json(indent=2))
    else:
        typer.echo(pack.text, nl=False)
