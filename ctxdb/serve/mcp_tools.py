"""The MCP tools over the memory: each a thin call into SearchService, the catalog, TurnLog
materialization or the resolver, as the principal `identify` returns for the current call.

Failures become one-line tool errors (`ToolError`: `isError` for the model, no stack trace);
Elasticsearch detail goes to the server log only. Text is bounded per result (`mcp_output`).
"""

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, ResourceLink, TextContent
from pydantic import Field, ValidationError

from ctxdb.auth.credentials import AuthError
from ctxdb.contract.events import REF_MAX_CHARS, RefId
from ctxdb.contract.identity import Principal
from ctxdb.contract.projects import PROJECT_MAX_CHARS, resolve_project
from ctxdb.contract.refs import RefError
from ctxdb.errors import SearchUnavailable, validation_line
from ctxdb.pack.build import build_pack
from ctxdb.pack.models import DEFAULT_BUDGET, MAX_BUDGET, MIN_BUDGET, ContextPack, ContextRequest
from ctxdb.search import lookups
from ctxdb.search.materialize import turn_view
from ctxdb.search.models import (
    ALL_TIME,
    DAYS_MAX,
    MissingQuery,
    NotFound,
    Scope,
    SearchHit,
    SearchRequest,
    Target,
    TurnHit,
    TurnView,
)
from ctxdb.search.service import SearchService, elasticsearch_errors
from ctxdb.serve.mcp_output import (
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
from ctxdb.settings.search import KnobOverrides
from ctxdb.storage.delta import DeltaStore

log = logging.getLogger(__name__)

Identify = Callable[[], Principal]
ProjectAgent = Callable[[str], str]

MAX_CITATIONS = 20
MAX_WINDOW = 10


# search_conversations' arguments that take a paragraph to describe to the model.
QueryArg = Annotated[
    str,
    Field(
        description="What to look for: words, an error message, a paraphrase; misspellings "
        "are fine. Blank with since/until lists the turns of that window."
    ),
]
ScopeArg = Annotated[
    Scope | None,
    Field(
        description="conversation (needs conversation_id), user (all your "
        "conversations) or agent (needs project_or_agent); default: conversation when "
        "conversation_id is given, else user."
    ),
]
TargetsArg = Annotated[
    list[Target] | None,
    Field(
        description="Which parts may match: user, assistant, summary, attachment, "
        "steps (tool calls run), notes (default: all but notes)."
    ),
]
DaysArg = Annotated[
    int,
    Field(
        ge=0,
        le=DAYS_MAX,
        description="Only turns of the last N days; 0 (default): all time. A `since` before "
        "that window widens it.",
    ),
]
KnobsArg = Annotated[
    KnobOverrides | None,
    Field(
        description='Ranking knobs to change, by name, e.g. {"min_score": 0} to keep hits'
        " that match the query weakly (the relevance floor, default 0.15); unset: the defaults.",
    ),
]


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
        raise ToolError(f"invalid arguments: {validation_line(exc)}") from None
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
            **hit.model_dump(include=set(TurnHit.model_fields)),
            ref=turn_ref(hit.conversation_id, hit.turn_id),
            snippet_target=snippet.target if snippet else None,
            snippet=piece,
        )

    def search_conversations(
        self,
        query: QueryArg = "",
        scope: ScopeArg = None,
        conversation_id: Annotated[
            RefId | None, Field(description="Search inside this conversation.")
        ] = None,
        project_or_agent: Annotated[
            str | None,
            Field(description="Only this agent's turns (an agent id, or a project folder path)."),
        ] = None,
        project: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=PROJECT_MAX_CHARS,
                description="Only this project's turns: its folder (the git root counts), as"
                " captured.",
            ),
        ] = None,
        targets: TargetsArg = None,
        since: Annotated[
            datetime | None, Field(description="Only turns at or after (ISO time).")
        ] = None,
        until: Annotated[
            datetime | None, Field(description="Only turns at or before (ISO time).")
        ] = None,
        top_k: Annotated[int, Field(ge=1, le=50, description="Hits to return.")] = 5,
        knobs: KnobsArg = None,
        days: DaysArg = ALL_TIME,
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
                project=resolve_project(project) if project else None,
                targets=targets or SearchRequest().targets,
                since=since,
                until=until,
                top_k=top_k,
                knobs=knobs or KnobOverrides(),
                days=days,
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
        (pages through the 10,000 most recently active)."""
        if cursor is not None and not (cursor.isdigit() and int(cursor) < lookups.MAX_LISTED):
            raise ToolError("cursor: pass the next_cursor of the previous page")
        offset = int(cursor or 0)
        with tool_errors():
            principal = self.identify()
            agent = self._agent(project_or_agent)
            page = self.service.conversations(principal, limit=limit, offset=offset, agent=agent)
        out = ConversationsOut(
            conversations=page.conversations,
            next_cursor=str(page.next_offset) if page.next_offset is not None else None,
        )
        return result(out, render_conversations(out))

    def _turn_id(self, principal: Principal, conversation_id: str, ordinal: int) -> str:
        request = SearchRequest(conversation_id=conversation_id, ordinal=ordinal)
        hits = self.service.search(principal, request).hits
        if not hits:
            raise NotFound(f"conversation {conversation_id!r} has no turn at ordinal {ordinal}")
        return hits[0].turn_id

    def _turn_out(self, view: TurnView, message: int | None, offset: int) -> TurnOut:
        texts: list[tuple[Literal["user", "assistant", "summary"], Any]] = [
            (m.role, m) for m in view.messages
        ]
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
            status=view.status,
            error_type=view.error_type,
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
                position, total, docs = lookups.turns_around(
                    self.service.client,
                    self.service.turns_alias,
                    principal,
                    conversation_id,
                    turn_id,
                    datetime.now(UTC),
                    before=before,
                    after=after,
                    routing=self.service.routing_for(principal, self.service.turns_alias),
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

    def get_context(
        self,
        conversation_id: Annotated[
            RefId | None,
            Field(description="Reload this conversation: newest turns whole, older as titles."),
        ] = None,
        project_or_agent: Annotated[
            str | None,
            Field(
                description="This project's memory: its folder (the git root counts) or an"
                " agent id."
            ),
        ] = None,
        budget: Annotated[
            int, Field(ge=MIN_BUDGET, le=MAX_BUDGET, description="Most tokens the pack holds.")
        ] = DEFAULT_BUDGET,
        query: Annotated[
            str, Field(max_length=2000, description="Add the earlier turns most relevant to it.")
        ] = "",
    ) -> Annotated[CallToolResult, ContextPack]:
        """A compact digest of your memory to start from: recent sessions with their outcomes,
        turns left cancelled or in error, files edited and commands run lately, and (with a
        query) the most relevant earlier turns, each with its age and ref (get_turn reads it).
        With conversation_id: that conversation to continue from."""
        with tool_errors():
            principal = self.identify()
            request = ContextRequest(
                conversation_id=conversation_id,
                project=resolve_project(project_or_agent) if project_or_agent else None,
                budget=budget,
                query=query,
            )
            pack = build_pack(
                principal,
                request,
                datetime.now(UTC),
                DeltaStore.from_settings(self.settings),
                self.service.search,
            )
        return result(pack, pack.text)

    async def read_context(self) -> str:
        """resources/read of `ctxdb://context`: the caller's pack over all their memory."""
        return await self._context_text(None)

    async def read_project_context(self, project: str) -> str:
        """resources/read of `ctxdb://context/<project>`: the caller's pack for one project (its
        folder, the git root counting, or an agent id)."""
        return await self._context_text(project)

    async def _context_text(self, project: str | None) -> str:
        """The markdown pack at the default budget, as `get_context` builds it."""
        try:
            principal = self.identify()
            request = ContextRequest(project=resolve_project(project) if project else None)
            pack = await anyio.to_thread.run_sync(
                lambda: build_pack(
                    principal,
                    request,
                    datetime.now(UTC),
                    DeltaStore.from_settings(self.settings),
                    self.service.search,
                )
            )
        except AuthError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        except ValueError as exc:  # a pydantic ValidationError among them
            raise ResourceError(f"invalid project: {exc}") from None
        return pack.text

    def tools(self) -> list[Callable[..., CallToolResult]]:
        return [
            self.search_conversations,
            self.list_conversations,
            self.get_turn,
            self.turns_around,
            self.read_file,
            self.get_context,
        ]
