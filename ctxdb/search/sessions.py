"""Session lift of the kNN arm: a question can reach a conversation before it reaches its turns.

Each conversation has a `session` role row (`ctxdb.record.session_rows`: its title and user
messages). With a session weight w > 0 the kNN arm runs beside a kNN over the principal's session
rows (same _msearch), then one more kNN over the rows of the `expand` best-matching sessions
(the expansion: turns no kNN row of the first search reached), and orders the union by

    cos(query, row) + w * cos(query, the row's session row)

(a conversation whose session row was not among the `SESSIONS_FETCHED` best counts the lowest
session cosine fetched). Session rows only steer that order: they are never hits themselves,
every row keeps its own `_score` (the relevance floor and explain read it), and every search runs
under the principal's row filter, so expansion never crosses the identity boundary. Fusion then
sees the re-ordered arm as it sees any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ctxdb.contract.identity import Principal
from ctxdb.search.arms import KEY_FIELDS, RowHit, semantic_body
from ctxdb.search.filters import identity_filter, live_filter, scope_filter
from ctxdb.search.models import SearchRequest
from ctxdb.search.relevance import cosine_of

SESSION = "session"
SESSIONS_FETCHED = 50
"""Session rows read per search: the best of them lift their conversations' rows."""
Run = Callable[[dict[str, dict[str, Any]]], Mapping[str, list[RowHit]]]
"""Runs named search bodies in one _msearch and returns each one's rows (`run_arms`)."""


def session_filter(principal: Principal, request: SearchRequest, now: datetime) -> dict[str, Any]:
    """The principal's live session rows (in the request's scope). No time window: a session
    row carries its last turn's time, and the expanded rows are windowed themselves."""
    return {
        "bool": {
            "filter": [
                *identity_filter(principal),
                live_filter(now),
                *scope_filter(request),
                {"term": {"target": SESSION}},
            ]
        }
    }


def session_scores(hits: Sequence[RowHit]) -> dict[str, float]:
    """Cosine of each conversation's best session row."""
    scores: dict[str, float] = {}
    for hit in hits:
        scores.setdefault(hit.conversation_id, cosine_of(hit.score))
    return scores


def lift(
    rows: Sequence[RowHit], extra: Sequence[RowHit], sessions: Mapping[str, float], weight: float
) -> list[RowHit]:
    """`rows` and `extra` (each row once) ordered by own cosine + `weight` x session cosine,
    each carrying its session cosine and that sum (what explain reports)."""
    floor = min(sessions.values(), default=0.0)
    merged = {r.identity: r for r in [*extra, *rows]}
    lifted = []
    for row in merged.values():
        session = sessions.get(row.conversation_id, floor)
        lifted.append(replace(row, session=session, lifted=cosine_of(row.score) + weight * session))
    return sorted(lifted, key=lambda r: -(r.lifted or 0.0))


def lifted_semantic(
    run: Run,
    knn: dict[str, Any],
    principal: Principal,
    request: SearchRequest,
    now: datetime,
    *,
    weight: float,
    expand: int,
    model: str | None = None,
) -> list[RowHit]:
    """The kNN arm's rows (`knn`: its body) re-ordered by the session lift, with the rows of the
    `expand` best sessions added (module docstring); session rows, like the arm's, only of the
    query vector's `model`."""
    spec = knn["knn"]
    sessions = semantic_body(
        spec["query_vector"],
        session_filter(principal, request, now),
        k=SESSIONS_FETCHED,
        num_candidates=max(spec["num_candidates"], SESSIONS_FETCHED),
        model=model,
    ) | {"_source": KEY_FIELDS}  # a session row's text is never read: it only steers the order
    found = run({"semantic": knn, SESSION: sessions})
    scores = session_scores(found[SESSION])
    best = sorted(scores, key=lambda conv: -scores[conv])[:expand]
    extra: list[RowHit] = []
    if best:
        within = {"bool": {"filter": [spec["filter"], {"terms": {"conversation_id": best}}]}}
        body = semantic_body(
            spec["query_vector"],
            within,
            k=spec["k"],
            num_candidates=spec["num_candidates"],
            oversample=spec.get("rescore_vector", {}).get("oversample", 0.0),
        )
        extra = run({"semantic": body})["semantic"]
    return lift(found["semantic"], extra, scores, weight)
