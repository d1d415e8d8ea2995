"""The MCP server: agents search their own memory with tools over SearchService, the catalog and
the resolver (official `mcp` SDK, `MCPServer`).

Two transports, one identity rule: the caller is the principal of a bearer token, never a tool
argument.

* stdio (`ctxdb mcp`): the token comes from CTXDB_TOKEN or a token file; it is checked before the
  server starts and again on every call, so a revoked or expired token stops at once.
* streamable HTTP at `/mcp` in `ctxdb serve`: the SDK's bearer middleware checks every request with
  ctxdb's `Authenticator` (local tokens and JWTs, as the HTTP API) before any MCP message is read;
  a session answers only the principal that opened it.

Another user's conversation, turn or ref answers exactly like a missing one ("not found"). Tool
errors are one line for the model (`is_error`), never a stack trace; Elasticsearch detail goes to
the server log only.
"""

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from importlib import metadata
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, FastAPI
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ResourceNotFoundError,
    ToolError,
    UnexpectedToolError,
)
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    CallToolResult,
    InputRequiredResult,
    ResourceLink,
    TextContent,
    ToolAnnotations,
)
from pydantic import AnyHttpUrl, Field, ValidationError
from starlette.routing import Route

from ctxdb.contract.events import REF_MAX_CHARS, RefId
from ctxdb.contract.identity import Principal
from ctxdb.contract.refs import RefError
from ctxdb.search import catalog
from ctxdb.search.materialize import turn_view
from ctxdb.search.models import (
    MissingQuery,
    NotFound,
    Scope,
    SearchHit,
    SearchRequest,
    SearchUnavailable,
    Target,
    TurnView,
)
from ctxdb.search.service import SearchService, elasticsearch_errors
from ctxdb.serve.auth import Authenticator, AuthError
from ctxdb.serve.mcp_output import (
    ConversationOut,
    ConversationsOut,
    FileOut,
    FileReadOut,
    HitOut,
    MessageOut,
    SearchOut,
    TurnOut,
    WindowOut,
    WindowTurn,
    cut,
    render_conversations,
    render_search,
    render_turn,
    render_window,
    turn_ref,
)
from ctxdb.serve.resolve import PulledFile, Resolver
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

Identify = Callable[[], Principal]
ProjectAgent = Callable[[str], str]

INSTRUCTIONS = (
    "Search and read your own past conversations (turns of coding and chat agents recorded by "
    "ctxdb). search_conversations finds turns by meaning, words or misspellings; get_turn reads "
    "one turn whole; turns_around shows its neighbours; list_conversations lists conversations "
    "by recent activity; read_file returns a conv:fi: file. Long text is cut and marked "
    "'…[truncated]' with the call that reads on."
)
MAX_CITATIONS = 20
MAX_WINDOW = 10
CONVERSATION_WINDOW = catalog.MAX_CONVERSATIONS
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


def _version() -> str:
    try:
        return metadata.version("ctxdb")
    except metadata.PackageNotFoundError:
        return ""


def _problems(exc: ValidationError) -> str:
    """One line naming each bad argument and why (never echoing the value)."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


@contextmanager
def tool_errors() -> Iterator[None]:
    """Domain failures as one-line tool errors the model can act on."""
    try:
        yield
    except (NotFound, MissingQuery, AuthError) as exc:
        raise ToolError(str(exc)) from None
    except RefError as exc:
        raise ToolError(f"invalid ref: {exc}") from None
    except ValidationError as exc:
        raise ToolError(f"invalid arguments: {_problems(exc)}") from None
    except SearchUnavailable as exc:
        log.warning("search unavailable: %s", exc)
        raise ToolError("search is unavailable right now; the server log has the cause") from None


def result(out: Any, text: str, *extra: Any) -> CallToolResult:
    """A tool result: the text for the model, then any extra blocks; `out` as structured content."""
    return CallToolResult(
        content=[TextContent(type="text", text=text), *extra],
        structured_content=out.model_dump(mode="json"),
    )


def inline_text(pulled: PulledFile, limit: int) -> tuple[str | None, str | None]:
    """(text, None) when the file is UTF-8 text of at most `limit` bytes, else (None, reason)."""
    if pulled.size > limit:
        return None, f"{pulled.size} bytes is over the {limit}-byte inline limit"
    try:
        text = pulled.data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    if "\x00" in text:
        return None, "binary content"
    return text, None


class MemoryTools:
    """The tools, each a thin call into the search service, the catalog or the resolver as the
    principal `identify` returns for the current call."""

    def __init__(
        self,
        settings: Settings,
        service: SearchService,
        resolver: Resolver,
        identify: Identify,
        project_agent: ProjectAgent | None = None,
    ) -> None:
        self.settings = settings
        self.service = service
        self.resolver = resolver
        self.identify = identify
        self.project_agent = project_agent
        self.budget = settings.mcp.result_chars

    def _agent(self, project_or_agent: str | None) -> str | None:
        """The agent id of a project folder (absolute path) or an agent id as given."""
        if not project_or_agent:
            return None
        if "/" in project_or_agent:
            if self.project_agent is None:
                raise ToolError(
                    "project_or_agent: this server does not map project paths; pass the agent id "
                    "(`ctxdb capture claude-code project` prints a project's)"
                )
            return self.project_agent(project_or_agent)
        return project_or_agent

    def _hit(self, hit: SearchHit) -> HitOut:
        best = next((s for s in hit.snippets if s.target == hit.target), None)
        snippet = best or (hit.snippets[0] if hit.snippets else None)
        piece = None
        if snippet is not None:
            piece = cut(snippet.text, self.budget)
            if snippet.text.endswith("…") or snippet.text.startswith("…"):
                piece.truncated = True
        return HitOut(
            conversation_id=hit.conversation_id,
            turn_id=hit.turn_id,
            ref=turn_ref(hit.conversation_id, hit.turn_id),
            ordinal=hit.ordinal,
            ts=hit.ts,
            title=hit.title,
            agent=hit.agent,
            score=hit.score,
            matched_targets=list(hit.matched_targets),
            snippet_target=snippet.target if snippet else None,
            snippet=piece,
        )

    def search_conversations(
        self,
        query: Annotated[
            str,
            Field(
                description="What to look for: words, an error message, a paraphrase; misspellings "
                "are fine. Blank with since/until lists the turns of that window."
            ),
        ] = "",
        scope: Annotated[
            Scope | None,
            Field(
                description="conversation (needs conversation_id), user (all your "
                "conversations) or agent (needs project_or_agent); default: conversation when "
                "conversation_id is given, else user."
            ),
        ] = None,
        conversation_id: Annotated[
            RefId | None, Field(description="Search inside this conversation.")
        ] = None,
        project_or_agent: Annotated[
            str | None,
            Field(description="Only this agent's turns (an agent id, or a project folder path)."),
        ] = None,
        targets: Annotated[
            list[Target] | None,
            Field(
                description="Which parts may match: user, assistant, summary, attachment, notes "
                "(default: all but notes)."
            ),
        ] = None,
        since: Annotated[
            datetime | None, Field(description="Only turns at or after (ISO time).")
        ] = None,
        until: Annotated[
            datetime | None, Field(description="Only turns at or before (ISO time).")
        ] = None,
        top_k: Annotated[int, Field(ge=1, le=50, description="Hits to return.")] = 5,
    ) -> Annotated[CallToolResult, SearchOut]:
        """Search your past conversations (hybrid: meaning, words, misspellings; recent first on
        ties). Each hit names its conversation and turn, time, title, the parts that matched and
        a short snippet; get_turn reads the whole turn."""
        if scope == "agent" and not project_or_agent:
            raise ToolError("scope=agent needs project_or_agent")
        with tool_errors():
            principal = self.identify()
            request = SearchRequest(
                query=query,
                scope=scope or ("conversation" if conversation_id else "user"),
                conversation_id=conversation_id,
                agent=self._agent(project_or_agent),
                targets=targets or SearchRequest().targets,
                since=since,
                until=until,
                top_k=top_k,
            )
            response = self.service.search(principal, request)
        out = SearchOut(
            mode=response.mode,
            query=response.query,
            hits=[self._hit(h) for h in response.hits],
            warnings=response.warnings,
        )
        return result(out, render_search(out))

    def list_conversations(
        self,
        limit: Annotated[int, Field(ge=1, le=50, description="Conversations per page.")] = 20,
        cursor: Annotated[
            str | None, Field(description="next_cursor of the previous page.", max_length=16)
        ] = None,
        project_or_agent: Annotated[
            str | None,
            Field(description="Only this agent's conversations (agent id or project folder)."),
        ] = None,
    ) -> Annotated[CallToolResult, ConversationsOut]:
        """Your conversations, most recent activity first, with title, agent and turn count
        (pages through the 200 most recently active)."""
        if cursor is not None and not cursor.isdigit():
            raise ToolError("cursor: pass the next_cursor of the previous page")
        offset = int(cursor or 0)
        with tool_errors():
            principal = self.identify()
            agent = self._agent(project_or_agent)
            wanted = min(offset + limit + 1, CONVERSATION_WINDOW)
            listing = (
                self.service.conversations(principal, limit=wanted, agent=agent).conversations
                if offset < CONVERSATION_WINDOW
                else []
            )
        page = listing[offset : offset + limit]
        more = len(listing) > offset + limit
        out = ConversationsOut(
            conversations=[ConversationOut.model_validate(c.model_dump()) for c in page],
            next_cursor=str(offset + limit) if more else None,
        )
        return result(out, render_conversations(out))

    def _turn_id(self, principal: Principal, conversation_id: str, ordinal: int) -> str:
        request = SearchRequest(conversation_id=conversation_id, ordinal=ordinal)
        hits = self.service.search(principal, request).hits
        if not hits:
            raise NotFound(f"conversation {conversation_id!r} has no turn at ordinal {ordinal}")
        return hits[0].turn_id

    def _turn_out(self, view: TurnView, message: int | None, offset: int) -> TurnOut:
        texts: list[tuple[str, Any]] = [(m.role, m) for m in view.messages]
        if view.summary:
            texts.append(("summary", None))
        if message is not None and message >= len(texts):
            raise ToolError(f"message: the turn has {len(texts)} messages (0..{len(texts) - 1})")
        messages = []
        for index, (role, m) in enumerate(texts):
            if message is not None and index != message:
                continue
            text = m.text if m is not None else view.summary or ""
            piece = cut(text, self.budget, offset if index == message else 0)
            messages.append(
                MessageOut(
                    **piece.model_dump(),
                    index=index,
                    role=role,
                    event_type=m.event_type if m is not None else None,
                    ts=m.ts if m is not None else None,
                )
            )

        def card(c: Any) -> FileOut:
            text = cut(c.text, self.budget) if c.text and message is None else None
            return FileOut(ref=c.ref, filename=c.filename, mime=c.mime, size=c.size, text=text)

        whole = message is None
        return TurnOut(
            conversation_id=view.conversation_id,
            turn_id=view.turn_id,
            ref=turn_ref(view.conversation_id, view.turn_id),
            ordinal=view.ordinal,
            title=view.title,
            started_at=view.started_at,
            ended_at=view.ended_at,
            error=view.error,
            messages=messages,
            attachments=[card(a) for a in view.attachments] if whole else [],
            files=[card(f) for f in view.files] if whole else [],
            citations=view.citations[:MAX_CITATIONS] if whole else [],
        )

    def get_turn(
        self,
        conversation_id: Annotated[RefId, Field(description="The turn's conversation.")],
        turn_id: Annotated[RefId | None, Field(description="The turn, by id.")] = None,
        ordinal: Annotated[
            int | None, Field(description="The turn by position: 1 = first, -1 = last, n, -n.")
        ] = None,
        first: Annotated[bool, Field(description="The conversation's first turn.")] = False,
        last: Annotated[bool, Field(description="The conversation's last turn.")] = False,
        message: Annotated[
            int | None, Field(ge=0, description="Only this message (its index), to read on.")
        ] = None,
        offset: Annotated[
            int, Field(ge=0, description="With message: where to continue reading.")
        ] = 0,
    ) -> Annotated[CallToolResult, TurnOut]:
        """One turn reconstructed from its TurnLog: user and assistant messages, the working
        summary, attachments, hosted files (read_file their refs) and citations. Give exactly one
        of turn_id, ordinal, first, last."""
        chosen = [turn_id is not None, ordinal is not None, first, last]
        if sum(chosen) != 1:
            raise ToolError("give exactly one of turn_id, ordinal, first, last")
        if ordinal == 0:
            raise ToolError("ordinal: 1 is the first turn, -1 the last; 0 is not a turn")
        with tool_errors():
            principal = self.identify()
            if turn_id is None:
                position = 1 if first else -1 if last else ordinal
                assert position is not None
                turn_id = self._turn_id(principal, conversation_id, position)
            view = self.service.turn(principal, conversation_id, turn_id)
        out = self._turn_out(view, message, offset)
        return result(out, render_turn(out))

    def turns_around(
        self,
        conversation_id: Annotated[RefId, Field(description="The conversation.")],
        turn_id: Annotated[RefId, Field(description="The turn to centre on (e.g. a hit).")],
        before: Annotated[int, Field(ge=0, le=MAX_WINDOW, description="Turns before.")] = 2,
        after: Annotated[int, Field(ge=0, le=MAX_WINDOW, description="Turns after.")] = 2,
    ) -> Annotated[CallToolResult, WindowOut]:
        """A timeline window around one turn of a conversation: the turns before and after it,
        oldest first, each with its user message and the assistant's answer (shortened)."""
        with tool_errors():
            principal = self.identify()
            with elasticsearch_errors(self.settings.elasticsearch.url):
                position, total, docs = catalog.turns_around(
                    self.service.client,
                    self.service.turns_alias,
                    principal,
                    conversation_id,
                    turn_id,
                    datetime.now(UTC),
                    before=before,
                    after=after,
                )
        first = position - next(i for i, d in enumerate(docs) if d["turn_id"] == turn_id)
        turns = [
            self._window_turn(doc, first + i, doc["turn_id"] == turn_id)
            for i, doc in enumerate(docs)
        ]
        out = WindowOut(
            conversation_id=conversation_id, turn_id=turn_id, total_turns=total, turns=turns
        )
        return result(out, render_window(out))

    def _window_turn(self, doc: dict[str, Any], position: int, anchor: bool) -> WindowTurn:
        view = turn_view(doc)
        user = next((m.text for m in view.messages if m.role == "user"), None)
        answer = next((m.text for m in reversed(view.messages) if m.role == "assistant"), None)
        half = self.budget // 2
        return WindowTurn(
            turn_id=view.turn_id,
            ref=turn_ref(view.conversation_id, view.turn_id),
            position=position,
            anchor=anchor,
            started_at=view.started_at,
            title=view.title,
            user=cut(user, half) if user else None,
            assistant=cut(answer, half) if answer else None,
        )

    def read_file(
        self,
        ref: Annotated[
            str,
            Field(
                max_length=REF_MAX_CHARS,
                description="A conv:fi: ref (from get_turn's attachments or files).",
            ),
        ],
        conversation_id: Annotated[
            RefId | None, Field(description="Owner of a short ref (conv:fi:turn_<id>.<path>).")
        ] = None,
    ) -> Annotated[CallToolResult, FileReadOut]:
        """The file behind a conv:fi: ref: UTF-8 text inline up to the size limit, otherwise a
        resource link (read it with resources/read)."""
        with tool_errors():
            pulled = self.resolver.pull(self.identify(), ref, conversation_id)
        limit = self.settings.mcp.inline_file_bytes
        text, reason = inline_text(pulled, limit)
        out = FileReadOut(
            ref=pulled.ref,
            filename=pulled.filename,
            mime=pulled.mime,
            size=pulled.size,
            inline=text is not None,
            text=text,
            reason=reason,
        )
        head = f"{pulled.filename} ({pulled.mime}, {pulled.size} bytes) {pulled.ref}"
        if text is not None:
            return result(out, f"{head}\n{text}")
        link = ResourceLink(
            type="resource_link",
            uri=pulled.ref,
            name=pulled.filename,
            mime_type=pulled.mime,
            size=pulled.size,
        )
        return result(out, f"{head}\nnot inlined ({reason}); read the linked resource", link)

    async def read_resource(self, rest: str) -> bytes:
        """resources/read of `conv:fi:<rest>`: the bytes, with the resolver's authorization."""
        try:
            principal = self.identify()
            pulled = await anyio.to_thread.run_sync(
                self.resolver.pull, principal, f"conv:fi:{rest}"
            )
        except (NotFound, AuthError) as exc:
            raise ResourceNotFoundError(str(exc)) from None
        except RefError as exc:
            raise ResourceError(f"invalid ref: {exc}") from None
        except SearchUnavailable as exc:
            log.warning("search unavailable: %s", exc)
            raise ResourceError("search is unavailable right now") from None
        return pulled.data

    def tools(self) -> list[Callable[..., CallToolResult]]:
        return [
            self.search_conversations,
            self.list_conversations,
            self.get_turn,
            self.turns_around,
            self.read_file,
        ]


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
    is pydantic's multi-line report with a link)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                message = f"Error executing tool {name}: invalid arguments: {_problems(cause)}"
                raise ToolError(message) from cause
            raise


def build_server(tools: MemoryTools, verifier: BearerVerifier | None = None) -> MCPServer:
    """The MCP server with the memory tools and the `conv:fi:` resource template; with a
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
    router.routes.append(Route("/mcp", endpoint=endpoint, include_in_schema=False))
    return router


def serve_stdio(
    settings: Settings,
    service: SearchService,
    resolver: Resolver,
    token: str,
    project_agent: ProjectAgent | None = None,
) -> None:
    """Serve MCP on stdin/stdout as the principal of `token` (until stdin closes)."""
    identify = token_principal(Authenticator(settings), token)
    tools = MemoryTools(settings, service, resolver, identify, project_agent)
    build_server(tools).run("stdio")
