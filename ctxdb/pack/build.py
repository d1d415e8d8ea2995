"""`build_pack`: the one function behind every face of the context pack (see the package doc).

Deterministic: the same memory, request and `now` give byte-identical packs (every ordering has
an explicit key; ages count from `now`). No model writes anything: the digest is the memory's
own titles, prompts, answers, steps and statuses, cut to fit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ctxdb.contract.identity import Principal
from ctxdb.contract.projects import looks_like_folder
from ctxdb.errors import SearchUnavailable
from ctxdb.pack.fit import Candidate, candidate, fit, render
from ctxdb.pack.items import STEPS_TURNS, related, sessions, timeline, unfinished, work
from ctxdb.pack.memory import read_steps, read_turns
from ctxdb.pack.models import ContextPack, ContextRequest
from ctxdb.pack.tokens import count_tokens, cut_to_tokens
from ctxdb.search.models import NotFound, SearchRequest, SearchResponse
from ctxdb.storage.delta import DeltaStore

Search = Callable[[Principal, SearchRequest, datetime], SearchResponse]
"""The search a pack asks for earlier turns related to its query (`SearchService.search`)."""
RELATED = 5


def _header(request: ContextRequest, now: datetime) -> Candidate:
    where = {
        "conversation": f"conversation {request.conversation_id}",
        "project": f"project {request.project}",
        "user": "all your projects",
    }[request.scope]
    text = f"# Memory from ctxdb: {where}, as of {now:%Y-%m-%d %H:%M} UTC"
    text = cut_to_tokens(text, request.budget - 1)
    return candidate("header", (-1,), (0,), text)


def _search_request(request: ContextRequest) -> SearchRequest:
    if request.conversation_id is not None:
        return SearchRequest(
            query=request.query,
            scope="conversation",
            conversation_id=request.conversation_id,
            top_k=RELATED,
        )
    if request.project is not None and looks_like_folder(request.project):
        return SearchRequest(query=request.query, project=request.project, top_k=RELATED)
    if request.project is not None:
        return SearchRequest(
            query=request.query, scope="agent", agent=request.project, top_k=RELATED
        )
    return SearchRequest(query=request.query, top_k=RELATED)


def _related(
    principal: Principal,
    request: ContextRequest,
    now: datetime,
    search: Search | None,
    warnings: list[str],
) -> list[Candidate]:
    if not request.query.strip():
        return []
    if search is None:
        warnings.append("search_unavailable: no search service; related turns left out")
        return []
    try:
        response = search(principal, _search_request(request), now)
    except SearchUnavailable as exc:
        warnings.append(f"search_unavailable: {exc}; related turns left out")
        return []
    return related([h for h in response.hits if not h.weak or h.relevance is None], now)


def build_pack(
    principal: Principal,
    request: ContextRequest,
    now: datetime,
    store: DeltaStore,
    search: Search | None = None,
) -> ContextPack:
    """The context pack of `request` for `principal` at `now` (see the module doc); NotFound
    for a conversation the principal has no live turn in."""
    turns = read_turns(store, principal, request, now)
    if request.conversation_id is not None and turns.is_empty():
        raise NotFound(f"conversation {request.conversation_id!r} not found")
    warnings: list[str] = []
    candidates = [_header(request, now)]
    if request.conversation_id is not None:
        candidates += timeline(turns, request.budget, now)
    elif turns.is_empty():
        candidates.append(candidate("sessions", (0, 0), (0,), "- (no earlier turns in this scope)"))
    else:
        recent = turns.tail(STEPS_TURNS)
        steps = read_steps(store, principal, request, now, recent["turn_id"].to_list())
        candidates += sessions(turns, now) + unfinished(turns, now) + work(turns, steps, now)
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
