"""The filters every arm, catalog path and resolution share: identity, expiry, scope, window."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from ctxdb.contract.identity import Principal
from ctxdb.search.models import DAYS_MAX, SearchRequest

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
    """Conversation id for scope=conversation, agent for scope=agent (or when given)."""
    clauses: list[dict[str, Any]] = []
    if request.scope == "conversation" or (request.conversation_id and request.ordinal):
        clauses.append({"term": {"conversation_id": request.conversation_id}})
    if request.agent:
        clauses.append({"term": {"agent": request.agent}})
    return clauses


def reaching(request: SearchRequest, start: datetime, now: datetime) -> SearchRequest:
    """`request` with `days` reaching back to `start` (where a span the query names begins) when
    the request left `days` unset and its default stops short of it; else `request` itself."""
    needed = math.ceil((now - start).total_seconds() / 86400)
    if "days" in request.model_fields_set or needed <= request.days:
        return request
    return request.model_copy(update={"days": min(needed, DAYS_MAX)})


def window_filter(
    request: SearchRequest, now: datetime, field: str = "ts", *, use_days: bool = True
) -> list[dict[str, Any]]:
    """`since`/`until` on `field`, and `field >= now - days` (to the minute) when `use_days`."""
    bounds: dict[str, str] = {}
    if request.since:
        bounds["gte"] = _iso(request.since)
    if request.until:
        bounds["lte"] = _iso(request.until)
    clauses = [{"range": {field: bounds}}] if bounds else []
    if use_days:
        oldest = minute_floor(now - timedelta(days=request.days))
        clauses.append({"range": {field: {"gte": _iso(oldest)}}})
    return clauses


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
