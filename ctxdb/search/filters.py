"""The filters every arm, catalog path and resolution share: identity, expiry, scope, window."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ctxdb.contract.identity import Principal
from ctxdb.search.models import SearchRequest
from ctxdb.search.temporal import split_time_hint

EXCLUDED_TAGS = ("kind:react.recovery.session",)


def _iso(value: datetime) -> str:
    return value.isoformat()


def minute_floor(value: datetime) -> datetime:
    return value.replace(second=0, microsecond=0)


def minute_ceil(value: datetime) -> datetime:
    floor = minute_floor(value)
    return floor if floor == value else floor + timedelta(minutes=1)


def identity_filter(principal: Principal) -> list[dict[str, Any]]:
    """The identity boundary: the principal's user (and tenant when it has one)."""
    clauses: list[dict[str, Any]] = [{"term": {"user_id": principal.user_id}}]
    if principal.tenant:
        clauses.append({"term": {"tenant": principal.tenant}})
    return clauses


def live_filter(now: datetime) -> dict[str, Any]:
    """Not expired: `expires_at > now` (rows and turns alike), `now` rounded up to the minute
    so the filter is the same for a minute and Elasticsearch can cache it (a row in its last
    minute is hidden early, never shown late)."""
    return {"range": {"expires_at": {"gt": _iso(minute_ceil(now))}}}


def scope_filter(request: SearchRequest) -> list[dict[str, Any]]:
    """Conversation id for scope=conversation, agent for scope=agent (or when given), and the
    project when given."""
    clauses: list[dict[str, Any]] = []
    if request.scope == "conversation" or (request.conversation_id and request.ordinal):
        clauses.append({"term": {"conversation_id": request.conversation_id}})
    if request.agent:
        clauses.append({"term": {"agent": request.agent}})
    if request.project:
        clauses.append({"term": {"project": request.project}})
    return clauses


def window_filter(
    request: SearchRequest, now: datetime, field: str = "ts", *, use_days: bool = True
) -> list[dict[str, Any]]:
    """`since`/`until` on `field`; with `use_days` and no `since`, `field >= now - days` (to the
    minute) unless `days` is 0 (all time). A `since` is the window's start even before `now -
    days` (it widens the window: `SearchRequest.oldest`)."""
    bounds: dict[str, str] = {}
    if request.since:
        bounds["gte"] = _iso(request.since)
    elif use_days and (oldest := request.oldest(now)) is not None:
        bounds["gte"] = _iso(minute_floor(oldest))
    if request.until:
        bounds["lte"] = _iso(request.until)
    return [{"range": {field: bounds}}] if bounds else []


def window_warnings(request: SearchRequest, query: str, now: datetime) -> list[str]:
    """Why the searched window differs from what the request's parts say alone: a `since` before
    the `days` window widens it (`days_widened`); a span the query names that begins before the
    `days` window is searched only inside it (`days_excludes`)."""
    if request.widened_by_since(now):
        return [
            f"days_widened: since {_iso(request.since or now)} lies before the last"
            f" {request.days} days; rows from since on are searched"
        ]
    oldest = request.oldest(now)
    _, named = split_time_hint(query)
    if named is None or request.since is not None or oldest is None:
        return []
    if named.window(now)[0] >= oldest:
        return []
    return [
        f"days_excludes: {named.phrase!r} begins before the last {request.days} days; only"
        " those are searched (days=0 searches all time)"
    ]


def row_filter(principal: Principal, request: SearchRequest, now: datetime) -> dict[str, Any]:
    """The bool filter for role-row arms: identity, live, scope, targets, window, notes opt-in."""
    must_not: list[dict[str, Any]] = [{"terms": {"tags": list(EXCLUDED_TAGS)}}]
    if "notes" not in request.targets:
        must_not.append({"term": {"visibility": "internal"}})
    return {
        "bool": {
            "filter": [
                *identity_filter(principal),
                live_filter(now),
                *scope_filter(request),
                {"terms": {"target": list(request.targets)}},
                *window_filter(request, now),
            ],
            "must_not": must_not,
        }
    }


def turn_filter(
    principal: Principal, now: datetime, conversation_id: str | None = None
) -> list[dict[str, Any]]:
    """Filter clauses for the turns index: identity, live, optionally one conversation."""
    clauses = [*identity_filter(principal), live_filter(now)]
    if conversation_id is not None:
        clauses.append({"term": {"conversation_id": conversation_id}})
    return clauses
