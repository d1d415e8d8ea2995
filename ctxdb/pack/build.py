"""`build_pack`: the one function behind every face of the context pack (see the package doc).

Deterministic: the same memory, request and `now` give byte-identical packs (every ordering has
an explicit key; ages count from `now`). No model writes anything: the digest is the memory's
own titles, prompts, answers, steps and statuses, cut to fit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from ctxdb.contract.identity import Principal
from ctxdb.contract.projects import agent_for_project, looks_like_folder
from ctxdb.errors import SearchUnavailable
from ctxdb.pack.fit import Candidate, candidate, fit, header, render
from ctxdb.pack.items import STEPS_TURNS, related, sessions, timeline, unfinished, work
from ctxdb.pack.memory import read_steps, read_turns
from ctxdb.pack.models import ContextPack, ContextRequest
from ctxdb.pack.tokens import count_tokens
from ctxdb.storage.delta import DeltaStore

if TYPE_CHECKING:  # the search models load only when a pack searches (the hooks start fast)
    from ctxdb.search.models import SearchRequest, SearchResponse

Search = Callable[[Principal, "SearchRequest", datetime], "SearchResponse"]
"""The search a pack asks for earlier turns related to its query (`SearchService.search`)."""
RELATED = 5


def where(request: ContextRequest) -> str:
    """What a pack covers, as its header says it."""
    return {
        "conversation": f"conversation {request.conversation_id}",
        "project": f"project {request.project}",
        "user": "all your projects",
    }[request.scope]


def _search_requests(request: ContextRequest) -> list[SearchRequest]:
    """The searches for related turns, in order, the next asked only when the one before finds
    no strong hit: a folder's turns recorded with it as their project, then those recorded
    without one under its agent id (captured before projects), as the pack's Delta side counts
    them (`memory.project_filter`)."""
    from ctxdb.search.models import SearchRequest

    query, project = request.query, request.project
    if request.conversation_id is not None:
        return [
            SearchRequest(
                query=query,
                scope="conversation",
                conversation_id=request.conversation_id,
                top_k=RELATED,
            )
        ]
    if project is None:
        return [SearchRequest(query=query, top_k=RELATED)]
    agent = project
    found: list[SearchRequest] = []
    if looks_like_folder(project):
        found.append(SearchRequest(query=query, project=project, top_k=RELATED))
        agent = agent_for_project(project)
    return [*found, SearchRequest(query=query, scope="agent", agent=agent, top_k=RELATED)]


def _related(
    principal: Principal,
    request: ContextRequest,
    now: datetime,
    search: Search | None,
    warnings: list[str],
) -> list[Candidate]:
    """The strong hits (above the relevance floor) of the first search that has any."""
    if not request.query.strip():
        return []
    if search is None:
        warnings.append("search_unavailable: no search service; related turns left out")
        return []
    for search_request in _search_requests(request):
        try:
            response = search(principal, search_request, now)
        except SearchUnavailable as exc:
            warnings.append(f"search_unavailable: {exc}; related turns left out")
            return []
        strong = [h for h in response.hits if not h.weak or h.relevance is None]
        if strong:
            return related(strong, now)
    return []


class Memory(NamedTuple):
    """The sections a pack reads from Delta, and the earliest expiry among the rows they were
    made from (None: no row), after which they may tell what the memory no longer holds."""

    candidates: list[Candidate]
    expires: datetime | None


def read_memory(
    principal: Principal, request: ContextRequest, now: datetime, store: DeltaStore
) -> Memory:
    """The sections read from Delta (all but `related`); none when only `related` is asked
    for, outside a conversation (whose turns are read to know it exists)."""
    wanted = set(request.sections) if request.sections is not None else None
    if wanted == {"related"} and request.conversation_id is None:
        return Memory([], None)
    turns = read_turns(store, principal, request, now)
    if request.conversation_id is not None and turns.is_empty():
        from ctxdb.search.models import NotFound

        raise NotFound(f"conversation {request.conversation_id!r} not found")
    expiries: list[datetime | None] = []
    if not turns.is_empty():
        expiries.append(turns["expires_at"].min())  # type: ignore[arg-type]
    if request.conversation_id is not None:
        found = timeline(turns, request.budget, now)
    elif turns.is_empty():
        found = [candidate("sessions", (0, 0), (0,), "- (no earlier turns in this scope)")]
    else:
        recent = turns.tail(STEPS_TURNS)
        keys = list(zip(recent["conversation_id"], recent["turn_id"], strict=True))
        steps, steps_expire = read_steps(store, principal, request, now, keys)
        expiries.append(steps_expire)
        found = sessions(turns, now) + unfinished(turns, now) + work(turns, steps, now)
    kept = [c for c in found if wanted is None or c.section in wanted]
    return Memory(kept, min((e for e in expiries if e is not None), default=None))


def build_pack(
    principal: Principal,
    request: ContextRequest,
    now: datetime,
    store: DeltaStore,
    search: Search | None = None,
) -> ContextPack:
    """The context pack of `request` for `principal` at `now` (see the module doc); NotFound
    for a conversation the principal has no live turn in."""
    warnings: list[str] = []
    candidates = [header(where(request), request.budget, now)]
    candidates += read_memory(principal, request, now, store).candidates
    if request.sections is None or "related" in request.sections:
        candidates += _related(principal, request, now, search, warnings)
    kept = fit(candidates, request.budget, request.max_chars)
    text = render(kept)
    return ContextPack(
        scope=request.scope,
        conversation_id=request.conversation_id,
        project=request.project,
        budget=request.budget,
        tokens=count_tokens(text),
        generated_at=now,
        text=text,
        items=[c.item() for c in kept if c.section != "header"],
        dropped=len(candidates) - len(kept),
        warnings=warnings,
    )
