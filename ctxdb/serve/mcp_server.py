"""The MCP server: agents search their own memory with tools over SearchService, the catalog and
the resolver (official `mcp` SDK, `MCPServer`).

Two transports, one identity rule: the caller is the principal of a bearer token, never a tool
argument.

* stdio (`ctxdb mcp`): the token comes from CTXDB_TOKEN or a token file; it is checked before the
  server starts and again on every call, so a revoked or expired token stops at once.
* streamable HTTP at `/mcp` in `ctxdb serve`: the SDK's bearer middleware checks every request with
  ctxdb's `Authenticator` (local tokens and JWTs, as the HTTP API) before any MCP message is read;
  a session answers only the principal that opened it. A token store that cannot be read answers
  503, as in the HTTP API, not the SDK's 500.

Another user's conversation, turn or ref answers exactly like a missing one ("not found"). Tool
errors are one line for the model (`is_error`), never a stack trace; Elasticsearch detail goes to
the server log only.
"""

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import AnyHttpUrl, ValidationError
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxdb.auth.authenticate import Authenticator
from ctxdb.auth.credentials import AuthError, TokenStoreUnavailable
from ctxdb.contract.identity import Principal
from ctxdb.errors import validation_line
from ctxdb.index.client import make_client
from ctxdb.search.service import SearchService
from ctxdb.serve.mcp_tools import Identify, MemoryTools, ProjectAgent
from ctxdb.serve.resolve import Resolver
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Search and read your own past conversations (turns of coding and chat agents recorded by "
    "ctxdb). search_conversations finds turns by meaning, words or misspellings; get_turn reads "
    "one turn whole; turns_around shows its neighbours; list_conversations lists conversations "
    "by recent activity; read_file returns a conv:fi: file. Long text is cut and marked "
    "'…[truncated]' with the call that reads on."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


def _version() -> str:
    try:
        return metadata.version("ctxdb")
    except metadata.PackageNotFoundError:
        return ""


class BearerVerifier:
    """The SDK's `TokenVerifier` over ctxdb's Authenticator: the same tokens and JWTs as the HTTP
    API. The principal travels in the access token's claims; its (tenant, user) is the subject
    the SDK binds sessions to."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await anyio.to_thread.run_sync(self.authenticator.authenticate, token)
        except AuthError as exc:
            log.info("MCP request refused: %s", exc)
            return None
        return AccessToken(
            token=token,
            client_id="ctxdb",
            scopes=[],
            subject=json.dumps([principal.tenant, principal.user_id]),
            claims={"principal": principal.model_dump()},
        )


def request_principal() -> Principal:
    """The principal the bearer middleware verified for the current HTTP request."""
    access = get_access_token()
    claims = access.claims if access is not None else None
    if not claims or "principal" not in claims:
        raise AuthError("missing bearer token")
    return Principal.model_validate(claims["principal"])


def token_principal(authenticator: Authenticator, token: str) -> Identify:
    """The principal of one token, checked on every call (revocation and expiry apply at once)."""
    return lambda: authenticator.authenticate(token)


class MemoryServer(MCPServer):
    """MCPServer whose argument errors are one line naming each bad argument (the SDK's default
    is pydantic's multi-line report with a link), and which refuses an argument a tool does not
    declare (the SDK drops it silently, so a misspelt `days` would search another window):
    every tool's input schema says `additionalProperties: false`."""

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        return [
            tool.model_copy(
                update={"input_schema": {**tool.input_schema, "additionalProperties": False}}
            )
            for tool in tools
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult | InputRequiredResult:
        declared = {t.name: t.input_schema.get("properties", {}) for t in await self.list_tools()}
        unknown = sorted(set(arguments) - set(declared.get(name, arguments)))
        if unknown:
            raise ToolError(
                f"Error executing tool {name}: invalid arguments: unknown argument"
                f"{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}"
                f" (known: {', '.join(sorted(declared[name]))})"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                problems = validation_line(cause)
                message = f"Error executing tool {name}: invalid arguments: {problems}"
                raise ToolError(message) from cause
            raise


def build_server(tools: MemoryTools, verifier: BearerVerifier | None = None) -> MCPServer:
    """The MCP server with the memory tools, the `conv:fi:` resource template and the context
    pack resources (`ctxdb://context`, `ctxdb://context/{+project}`); with a
    verifier, HTTP requests need a bearer token it accepts."""
    auth = None
    if verifier is not None:
        # The SDK wants an issuer URL with a verifier; nothing advertises it while
        # resource_server_url is unset (no OAuth discovery: ctxdb or its JWT issuer makes tokens).
        issuer = tools.settings.auth.jwt_issuer or ""
        auth = AuthSettings(
            issuer_url=AnyHttpUrl(issuer if issuer.startswith("http") else "http://localhost"),
            resource_server_url=None,
        )
    server = MemoryServer(
        "ctxdb",
        title="ctxdb conversation memory",
        version=_version(),
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        auth=auth,
        log_level="WARNING",
    )
    for tool in tools.tools():
        server.add_tool(tool, annotations=READ_ONLY, structured_output=True)
    server.resource(
        "conv:fi:{+rest}",
        name="conversation-file",
        description="A file of one of your turns (attachment or hosted output), by conv:fi: ref.",
        mime_type="application/octet-stream",
    )(tools.read_resource)
    server.resource(
        "ctxdb://context",
        name="context-pack",
        description="Your memory's context pack: recent sessions, unfinished turns, recent work.",
        mime_type="text/markdown",
    )(tools.read_context)
    server.resource(
        "ctxdb://context/{+project}",
        name="project-context-pack",
        description="The context pack of one project (its folder, the git root counts, or an"
        " agent id): `ctxdb://context//home/ann/shop` for the folder /home/ann/shop.",
        mime_type="text/markdown",
        # A project is a folder name to match turns by, never a path read from: an absolute
        # folder is what a coding host records (the SDK's default policy refuses one).
        security=ResourceSecurity(reject_path_traversal=False, reject_absolute_paths=False),
    )(tools.read_project_context)
    return server


def mcp_router(app: FastAPI, settings: Settings) -> APIRouter:
    """`/mcp` (streamable HTTP) for the HTTP API app, over its service, resolver and
    authenticator; the router's lifespan runs the MCP session manager."""
    state = app.state
    tools = MemoryTools(settings, state.service, state.resolver, request_principal)
    server = build_server(tools, BearerVerifier(state.authenticator))
    # Tools answer once (no progress stream), so a POST answers with plain JSON, not an SSE
    # stream. Every request must carry a bearer token the verifier accepts, which a rebinding
    # page cannot send; the HTTP API has no Host allowlist either, so none is set here.
    endpoint = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    router = APIRouter(lifespan=lifespan)
    router.routes.append(
        Route("/mcp", endpoint=_StoreErrorsUnanswered(endpoint), include_in_schema=False)
    )
    return router


class _StoreErrorsUnanswered:
    """The SDK's app answers 500 to an error raised while it verifies a token; when that error
    is the token store being unavailable, its 500 is held back and the error re-raised, so the
    API's SearchUnavailable handler answers 503. (An ASGI app object: a plain function would be
    routed as a GET-only request handler.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: list[Message] = []

        async def hold(message: Message) -> None:
            if held or (message["type"] == "http.response.start" and message["status"] == 500):
                held.append(message)
            else:
                await send(message)

        try:
            await self.app(scope, receive, hold)
        except TokenStoreUnavailable:
            raise
        except BaseException:
            for message in held:
                await send(message)
            raise
        for message in held:
            await send(message)


def serve_stdio(
    settings: Settings,
    service: SearchService,
    resolver: Resolver,
    token: str,
    project_agent: ProjectAgent | None = None,
) -> None:
    """Serve MCP on stdin/stdout as the principal of `token` (until stdin closes)."""
    identify = token_principal(Authenticator(settings, make_client), token)
    tools = MemoryTools(settings, service, resolver, identify, project_agent)
    build_server(tools).run("stdio")
