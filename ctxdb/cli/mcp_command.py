"""`ctxdb mcp`: the MCP server on stdio, for a local agent (Claude Code, Codex, Cursor...).

It runs as the principal of one bearer token: `--token`, else CTXDB_TOKEN, else the token file
(`--token-file` or CTXDB_MCP_TOKEN_FILE). A missing or refused token ends the command before it
serves anything. Project folders given as `project_or_agent` map to agent ids the way Claude Code
capture records them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ctxdb.auth.authenticate import Authenticator
from ctxdb.auth.credentials import AuthError
from ctxdb.capture.claude_code.turns import agent_for_project
from ctxdb.cli.app import app
from ctxdb.cli.search import TokenOpt
from ctxdb.index.client import make_client
from ctxdb.search.service import SearchService, WarmEmbedder, default_embedder
from ctxdb.serve.resolve import Resolver
from ctxdb.settings import Settings, get_settings


def read_token(settings: Settings, token: str | None, token_file: Path | None) -> str | None:
    """The token to run as: the option, CTXDB_TOKEN, then the token file's first line."""
    if token:
        return token
    if settings.token:
        return settings.token.get_secret_value()
    path = token_file or settings.mcp.token_file
    if path is None:
        return None
    try:
        return path.expanduser().read_text().strip() or None
    except OSError as exc:
        typer.echo(f"error: cannot read the token file {path}: {exc.strerror}", err=True)
        raise typer.Exit(1) from None


@app.command("mcp")
def mcp_command(
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file", help="File holding the token (default: CTXDB_MCP_TOKEN_FILE)."
        ),
    ] = None,
    no_semantic: Annotated[
        bool, typer.Option("--no-semantic", help="Skip the embedding model (text arms only).")
    ] = False,
    token: TokenOpt = None,
) -> None:
    """Serve the memory tools over MCP on stdin/stdout, as the token's user."""
    from ctxdb.serve.mcp_server import serve_stdio

    settings = get_settings()
    secret = read_token(settings, token, token_file)
    try:
        principal = Authenticator(settings, make_client).authenticate(secret)
    except AuthError as exc:
        typer.echo(
            f"error: {exc} (set CTXDB_TOKEN, or pass --token-file; `ctxdb tokens issue` makes one)",
            err=True,
        )
        raise typer.Exit(1) from None
    assert secret is not None
    client = make_client(settings)
    embedder = None if no_semantic else WarmEmbedder(default_embedder(settings, client))
    service = SearchService(settings, client, embedder)
    typer.echo(f"ctxdb mcp: serving as user {principal.user_id!r} on stdio", err=True)
    serve_stdio(settings, service, Resolver(settings, client), secret, agent_for_project)
