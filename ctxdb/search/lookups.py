"""Catalog lookups over the turns index: n-th turn, turns in a time window, conversation list.

These answer "what did I ask first" or "what happened between Monday and Wednesday" by explicit
ordering, never by similarity. Turn order is `started_at` ascending (then turn id), the order the
TurnLogs were recorded in. Every query carries the identity and expiry filter.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from elasticsearch import Elasticsearch

from ctxdb.contract.identity import Principal
from ctxdb.errors import SearchUnavailable
from ctxdb.search.filters import scope_filter, turn_filter, window_filter
from ctxdb.search.models import (
    ConversationList,
    ConversationSummary,
    NotFound,
    SearchRequest,
)

TURN_ORDER_ASC = [{"started_at": "asc"}, {"turn_id": "asc"}]
TURN_ORDER_DESC = [{"started_at": "desc"}, {"turn_id": "desc"}]
MAX_CONVERSATIONS = 200
"""The most conversations one page of a listing holds."""
MAX_LISTED = 10_000
"""How far back a listing pages: the most recently active conversations it reaches."""


def count_turns(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    conversation_id: str,
    now: datetime,
    *,
    routing: str | None = None,
) -> int:
    """Live turns of one of the principal's conversations (0 when it is not theirs).

    `routing` (here and below): the principal's routing key when the index is routed by user
    (`ctxdb.index.routing`), so only the user's shard is searched."""
    query = {"bool": {"filter": turn_filter(principal, now, conversation_id)}}
    return int(client.count(index=alias, query=query, routing=routing)["count"])


def require_conversation(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    conversation_id: str,
    now: datetime,
    *,
    routing: str | None = None,
) -> int:
    """The live turn count of a conversation of the principal; NotFound if it has none."""
    total = count_turns(client, alias, principal, conversation_id, now, routing=routing)
    if total == 0:
        raise NotFound(f"conversation {conversation_id!r} not found")
    return total


def nth_turn(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    conversation_id: str,
    ordinal: int,
    now: datetime,
    *,
    routing: str | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """[(position, turn doc)] of the `ordinal`-th turn (1 = first, -1 = last); [] past the end."""
    total = require_conversation(client, alias, principal, conversation_id, now, routing=routing)
    position = ordinal if ordinal > 0 else total + ordinal + 1
    if not 1 <= position <= total:
        return []
    response = client.search(
        index=alias,
        query={"bool": {"filter": turn_filter(principal, now, conversation_id)}},
        sort=TURN_ORDER_ASC if ordinal > 0 else TURN_ORDER_DESC,
        from_=(ordinal - 1) if ordinal > 0 else (-ordinal - 1),
        size=1,
        routing=routing,
    )
    return [(position, h["_source"]) for h in response["hits"]["hits"]]


def window_turns(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    request: SearchRequest,
    now: datetime,
    *,
    routing: str | None = None,
) -> list[dict[str, Any]]:
    """Turns started inside [since, until] within the request's scope, oldest first."""
    if request.scope == "conversation":
        require_conversation(
            client, alias, principal, request.conversation_id or "", now, routing=routing
        )
    filters = [
        *turn_filter(principal, now),
        *scope_filter(request),
        *window_filter(request, now, field="started_at", use_days=False),
    ]
    response = client.search(
        index=alias,
        query={"bool": {"filter": filters}},
        sort=TURN_ORDER_ASC,
        size=request.top_k,
        routing=routing,
    )
    return [h["_source"] for h in response["hits"]["hits"]]


TIMELINE_FIELDS = [
    "conversation_id",
    "turn_id",
    "started_at",
    "title",
    "agent",
    "status",
    "error_type",
    "first_user_text",
    "last_assistant_text",
]
MAX_RESULT_WINDOW = 10_000
"""Elasticsearch's default `index.max_result_window`: `offset + limit` of a page stays within."""


def conversation_turns(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    conversation_id: str,
    now: datetime,
    *,
    offset: int,
    limit: int,
    routing: str | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """(live turn count, [turn docs, timeline fields only]) of one of the principal's
    conversations, oldest first, `offset` turns skipped; NotFound if it has none."""
    if offset < 0 or limit < 1 or offset + limit > MAX_RESULT_WINDOW:
        raise ValueError(f"offset + limit must stay within {MAX_RESULT_WINDOW}")
    total = require_conversation(client, alias, principal, conversation_id, now, routing=routing)
    response = client.search(
        index=alias,
        query={"bool": {"filter": turn_filter(principal, now, conversation_id)}},
        sort=TURN_ORDER_ASC,
        from_=offset,
        size=limit,
        source_includes=TIMELINE_FIELDS,
        routing=routing,
    )
    return total, [h["_source"] for h in response["hits"]["hits"]]


def list_conversations(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    now: datetime,
    *,
    limit: int = 50,
    offset: int = 0,
    agent: str | None = None,
    routing: str | None = None,
) -> ConversationList:
    """A page of the principal's conversations, most recent activity first, with titles and
    turn counts: `limit` of them after the first `offset` (of the MAX_LISTED most recent)."""
    if not 1 <= limit <= MAX_CONVERSATIONS:
        raise ValueError(f"limit must be between 1 and {MAX_CONVERSATIONS}")
    if not 0 <= offset < MAX_LISTED:
        raise ValueError(f"offset must be between 0 and {MAX_LISTED - 1}")
    filters = turn_filter(principal, now)
    if agent:
        filters.append({"term": {"agent": agent}})
    aggs = _conversation_aggs(min(offset + limit + 1, MAX_LISTED))
    response = client.search(
        index=alias, query={"bool": {"filter": filters}}, aggs=aggs, size=0, routing=routing
    )
    # the page and one more, to tell whether another follows (sliced here: bucket_sort is in a
    # module the embedded node lacks)
    buckets = response["aggregations"]["conversations"]["buckets"][offset : offset + limit + 1]
    more = len(buckets) > limit and offset + limit < MAX_LISTED
    return ConversationList(
        conversations=[_summary(bucket) for bucket in buckets[:limit]],
        next_offset=offset + limit if more else None,
    )


def _conversation_aggs(reach: int) -> dict[str, Any]:
    """The `reach` most recently active conversations, each with its span and newest titles."""
    newest = {
        "top_hits": {
            "size": 1,
            "sort": [{"last_activity_at": "desc"}],
            "_source": ["title", "agent"],
        }
    }
    return {
        "conversations": {
            "terms": {"field": "conversation_id", "size": reach, "order": {"last": "desc"}},
            "aggs": {
                "last": {"max": {"field": "last_activity_at"}},
                "first": {"min": {"field": "started_at"}},
                "newest": newest,
                "titled": {"filter": {"exists": {"field": "title"}}, "aggs": {"newest": newest}},
            },
        }
    }


def _summary(bucket: dict[str, Any]) -> ConversationSummary:
    """One conversation of `_conversation_aggs`: the newest turn's title, else the newest
    non-empty one."""
    doc = bucket["newest"]["hits"]["hits"][0]["_source"]
    titled = bucket["titled"]["newest"]["hits"]["hits"]
    return ConversationSummary(
        conversation_id=bucket["key"],
        title=doc.get("title") or (titled[0]["_source"].get("title") if titled else None),
        agent=doc.get("agent"),
        turns=bucket["doc_count"],
        started_at=bucket["first"].get("value_as_string"),
        last_activity_at=bucket["last"].get("value_as_string"),
    )


def _before(sort_key: list[Any]) -> dict[str, Any]:
    """Turns ordered before the turn with `sort_key` ([started_at millis, turn id])."""
    started, turn_id = sort_key
    return {
        "bool": {
            "should": [
                {"range": {"started_at": {"lt": started, "format": "epoch_millis"}}},
                {
                    "bool": {
                        "filter": [
                            {
                                "range": {
                                    "started_at": {
                                        "gte": started,
                                        "lte": started,
                                        "format": "epoch_millis",
                                    }
                                }
                            },
                            {"range": {"turn_id": {"lt": turn_id}}},
                        ]
                    }
                },
            ],
            "minimum_should_match": 1,
        }
    }


def turns_around(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    conversation_id: str,
    turn_id: str,
    now: datetime,
    *,
    before: int = 2,
    after: int = 2,
    routing: str | None = None,
) -> tuple[int, int, list[dict[str, Any]]]:
    """(position of the turn, live turns in the conversation, [turn docs]) for the window of
    `before` turns before and `after` turns after one of the principal's turns, oldest first.
    NotFound when the turn is not a live turn of the principal."""
    filters = turn_filter(principal, now, conversation_id)
    found = client.search(
        index=alias,
        query={"bool": {"filter": [*filters, {"term": {"turn_id": turn_id}}]}},
        sort=TURN_ORDER_ASC,
        size=1,
        routing=routing,
    )["hits"]["hits"]
    if not found:
        raise NotFound(f"turn {conversation_id}/{turn_id} not found")
    key = found[0]["sort"]
    header = {"index": alias} if routing is None else {"index": alias, "routing": routing}
    searches: list[dict[str, Any]] = []
    for order, size in ((TURN_ORDER_DESC, before), (TURN_ORDER_ASC, after)):
        searches += [
            header,
            {
                "query": {"bool": {"filter": filters}},
                "sort": order,
                "search_after": key,
                "size": size,
            },
        ]
    searches += [
        header,
        {
            "query": {"bool": {"filter": [*filters, _before(key)]}},
            "size": 0,
            "track_total_hits": True,
        },
        header,
        {"query": {"bool": {"filter": filters}}, "size": 0, "track_total_hits": True},
    ]
    earlier, later, preceding, total = client.msearch(searches=searches)["responses"]
    for response in (earlier, later, preceding, total):
        if "error" in response:
            reason = response["error"].get("reason", response["error"])
            raise SearchUnavailable(f"turn window failed: {reason}")
    docs = [h["_source"] for h in reversed(earlier["hits"]["hits"])]
    docs += [found[0]["_source"]] + [h["_source"] for h in later["hits"]["hits"]]
    position = preceding["hits"]["total"]["value"] + 1
    return position, total["hits"]["total"]["value"], docs
