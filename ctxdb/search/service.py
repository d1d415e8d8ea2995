"""SearchService: the one conversation-search entry point behind the Python API, CLI and HTTP API.

Routing: an ordinal -> catalog n-th turn; a blank query with a time window -> catalog window; a
blank query without one -> MissingQuery; otherwise hybrid search (the text arms in one _msearch
while the query embeds, then the kNN arm; fusion in Python, per-conversation cap, snippets from
TurnLogs).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from elasticsearch import ApiError, Elasticsearch, NotFoundError, TransportError

from ctxdb.contract.identity import Principal
from ctxdb.embedding.ids import parse_model_id
from ctxdb.embedding.model import Embedder, EmbedderUnavailable
from ctxdb.errors import SearchUnavailable
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.routing import RoutingLookup
from ctxdb.index.versions import alias_target, index_meta
from ctxdb.record.titles import typed_text
from ctxdb.search import lookups, names, sessions, subquestions
from ctxdb.search.arms import RowHit, lexical_body, parse_hits, semantic_body, trigram_body
from ctxdb.search.coverage import with_coverage
from ctxdb.search.filters import row_filter, window_warnings
from ctxdb.search.fusion import FusedTurn, cap_of, rank_turns
from ctxdb.search.materialize import (
    clip,
    fallback_snippet,
    fetch_turns,
    snippets_from_payload,
    turn_view,
)
from ctxdb.search.models import (
    Arm,
    ConversationList,
    ConversationTurns,
    MissingQuery,
    NotFound,
    SearchHit,
    SearchRequest,
    SearchResponse,
    TimelineTurn,
    TurnView,
)
from ctxdb.search.relevance import is_weak, relevance
from ctxdb.search.temporal import split_time_hint
from ctxdb.settings import Settings
from ctxdb.settings.search import SearchKnobs

if TYPE_CHECKING:
    from ctxdb.embedding.backends import MatchedEmbedder

log = logging.getLogger(__name__)

Name = TypeVar("Name", bound=str)
"""The names of the bodies `run_arms` runs: arms, or arms and the session search."""

_ARMS_POOL = ThreadPoolExecutor(16, thread_name_prefix="ctxdb-arms")
"""Runs the text arms of searches while their queries embed, and the parts of a compound
question while its whole kNN runs (one or two threads per search in flight)."""
KNN_CANDIDATES_PER_K = 1.5  # num_candidates >= 1.5 x k: the graph search explores past the k kept


class QueryVector(NamedTuple):
    """A query's vector and the name of the model that made it: the kNN arm searches only the
    rows that model embedded (`semantic_body`), so a query can never meet another model's rows."""

    model: str
    values: list[float]


class Embedding(NamedTuple):
    """A query's vector (None when it could not be made) and the warnings its making gave."""

    vector: QueryVector | None
    warnings: list[str]


class QueryEmbedder(Protocol):
    def embed(self, text: str) -> QueryVector | None: ...


class ModelQueryEmbedder:
    """Embeds queries with the pipeline's embedder (same model, same normalization), keeping
    the vectors of the last `cache_size` distinct queries (least recently used go first)."""

    def __init__(self, embedder: Embedder, cache_size: int = 1024) -> None:
        self.embedder = embedder
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def embed_query(self, text: str) -> list[float] | None:
        """The query's vector alone (benches and probes that build arm bodies themselves)."""
        embedded = self.embed(text)
        return None if embedded is None else embedded.values

    def embed(self, text: str) -> QueryVector | None:
        try:
            embedder = resolved(self.embedder)
        except EmbedderUnavailable as exc:
            log.warning("embedding model unavailable: %s", exc)
            return None
        key = (embedder.model_id, text)  # a model switch never serves the old model's vector
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return QueryVector(parse_model_id(key[0])[0], list(cached))
        instruction = getattr(embedder, "query_instruction", "")  # the model's, if any
        vector = tuple(float(x) for x in embedder.encode([instruction + text])[0])
        if self.cache_size > 0:
            with self._lock:
                self._cache[key] = vector
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return QueryVector(parse_model_id(key[0])[0], list(vector))


def resolved(embedder: Embedder) -> Embedder:
    """`embedder` loaded; for one that follows the live index's model, the model it chose now
    (one object for the query's model id, instruction and vector)."""
    from ctxdb.embedding.backends import MatchedEmbedder  # the model stack: semantic search only

    if isinstance(embedder, MatchedEmbedder):
        return embedder.resolved()
    embedder.load()
    return embedder


class WarmEmbedder:
    """Loads the model in the background from the start; a query waits for that load instead of
    starting another."""

    def __init__(self, embedder: QueryEmbedder) -> None:
        self.embedder = embedder
        self.loading = threading.Thread(target=embedder.embed, args=("warm up",), daemon=True)
        self.loading.start()

    def embed(self, text: str) -> QueryVector | None:
        self.loading.join()
        return self.embedder.embed(text)


def index_model_ids(client: Elasticsearch, settings: Settings) -> set[str]:
    """The model id most vectors of the live rows index carry (the documents' own `model_id`),
    else its `_meta.model_id`; none before the first build."""
    target = alias_target(client, alias_name(settings.elasticsearch.index_prefix, ROWS))
    if target is None:
        return set()
    response = client.search(
        index=target,
        size=0,
        query={"exists": {"field": "embedding"}},
        aggs={"ids": {"terms": {"field": "model_id", "size": 1}}},
    )
    buckets = response["aggregations"]["ids"]["buckets"]
    model_id = buckets[0]["key"] if buckets else index_meta(client, target).get("model_id")
    return {model_id} if model_id else set()


def index_matched_embedder(settings: Settings, client: Elasticsearch) -> MatchedEmbedder:
    """The model and backend the live index's vectors were made with (`MatchedEmbedder`);
    while the node cannot be reached the semantic arm is left out."""
    from ctxdb.embedding.backends import MatchedEmbedder  # the model stack: semantic search only

    def stored_ids() -> set[str]:
        try:
            return index_model_ids(client, settings)
        except (ApiError, TransportError) as exc:
            raise EmbedderUnavailable(f"cannot read the index's model id: {exc}") from exc

    return MatchedEmbedder(settings.embedding, stored_ids)


def default_embedder(settings: Settings, client: Elasticsearch | None = None) -> QueryEmbedder:
    """The model and backend that embedded the rows the live index holds (read through
    `client`), whatever the settings now name; the configured ones without a client or before
    the first build. Loaded on the first query."""
    from ctxdb.embedding.backends import make_embedder

    embedder: Embedder
    if client is not None:
        embedder = index_matched_embedder(settings, client)
    else:
        embedder = make_embedder(settings.embedding, batch_size=1)
    return ModelQueryEmbedder(embedder, cache_size=settings.search.query_cache_size)


@contextmanager
def elasticsearch_errors(url: str) -> Iterator[None]:
    """Turn transport failures and missing indices into SearchUnavailable with a clear message."""
    try:
        yield
    except NotFoundError as exc:
        if "index_not_found" in str(exc):
            raise SearchUnavailable(
                f"search index missing at {url} ({exc.message}); run the indexing pipeline first"
            ) from exc
        raise
    except TransportError as exc:
        raise SearchUnavailable(f"Elasticsearch unreachable at {url}: {exc}") from exc
    except ApiError as exc:
        raise SearchUnavailable(f"Elasticsearch error at {url}: {exc}") from exc


class SearchService:
    """Hybrid search, catalog and known-turn reads, always inside the principal's boundary."""

    def __init__(
        self, settings: Settings, client: Elasticsearch, embedder: QueryEmbedder | None = None
    ) -> None:
        self.settings = settings
        self.client = client
        self.embedder = embedder
        self.rows_alias = alias_name(settings.elasticsearch.index_prefix, ROWS)
        self.turns_alias = alias_name(settings.elasticsearch.index_prefix, TURNS)
        self.routing = RoutingLookup(client)

    def routing_for(self, principal: Principal, alias: str) -> str | None:
        """The principal's routing key when the index behind `alias` is routed by user (its
        reads then touch one shard); None otherwise. The identity filter applies either way."""
        return self.routing.key(alias, principal.user_id)

    def search(
        self, principal: Principal, request: SearchRequest, now: datetime | None = None
    ) -> SearchResponse:
        now = now or datetime.now(UTC)
        with elasticsearch_errors(self.settings.elasticsearch.url):
            if request.ordinal is not None:
                return self._nth(principal, request, now)
            if not request.query.strip():
                if request.has_window:
                    return self._window(principal, request, now)
                raise MissingQuery("missing_query: give a query, a time window or an ordinal")
            return self._hybrid(principal, request, now)

    def conversations(
        self, principal: Principal, *, limit: int = 50, offset: int = 0, agent: str | None = None
    ) -> ConversationList:
        """A page of the principal's conversations, most recent activity first."""
        now = datetime.now(UTC)
        with elasticsearch_errors(self.settings.elasticsearch.url):
            return lookups.list_conversations(
                self.client,
                self.turns_alias,
                principal,
                now,
                limit=limit,
                offset=offset,
                agent=agent,
                routing=self.routing_for(principal, self.turns_alias),
            )

    def conversation_turns(
        self, principal: Principal, conversation_id: str, *, offset: int = 0, limit: int = 100
    ) -> ConversationTurns:
        """A page of one of the principal's conversations, oldest turn first; NotFound unless
        it has live turns."""
        now = datetime.now(UTC)
        total, docs = self._turn_page(principal, conversation_id, now, offset, limit)
        chars = self.settings.search.snippet_chars
        turns = [
            TimelineTurn(
                turn_id=doc["turn_id"],
                ordinal=offset + position,
                ts=doc.get("started_at"),
                status=doc.get("status") or "ok",
                error_type=doc.get("error_type"),
                prompt=clip(typed_text(doc.get("first_user_text") or ""), "", chars),
                answer=clip(doc.get("last_assistant_text") or "", "", chars),
            )
            for position, doc in enumerate(docs, start=1)
        ]
        # a page past the end: the conversation's first turn names it
        named = docs or (self._turn_page(principal, conversation_id, now, 0, 1)[1] if total else [])
        head = named[0] if named else {}
        return ConversationTurns(
            conversation_id=conversation_id,
            title=head.get("title"),
            agent=head.get("agent"),
            total=total,
            offset=offset,
            turns=turns,
        )

    def _turn_page(
        self, principal: Principal, conversation_id: str, now: datetime, offset: int, limit: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """The conversation's live turn count and the turn documents of one page."""
        with elasticsearch_errors(self.settings.elasticsearch.url):
            return lookups.conversation_turns(
                self.client,
                self.turns_alias,
                principal,
                conversation_id,
                now,
                offset=offset,
                limit=limit,
                routing=self.routing_for(principal, self.turns_alias),
            )

    def turn(self, principal: Principal, conversation_id: str, turn_id: str) -> TurnView:
        """A known turn from its TurnLog; NotFound unless it is the principal's and live."""
        now = datetime.now(UTC)
        with elasticsearch_errors(self.settings.elasticsearch.url):
            docs = fetch_turns(
                self.client,
                self.turns_alias,
                principal,
                [(conversation_id, turn_id)],
                now,
                routing=self.routing_for(principal, self.turns_alias),
            )
        doc = docs.get((conversation_id, turn_id))
        if doc is None:
            raise NotFound(f"turn {conversation_id}/{turn_id} not found")
        return turn_view(doc)

    def _catalog_hit(
        self, doc: dict[str, Any], request: SearchRequest, position: int | None = None
    ) -> SearchHit:
        return SearchHit(
            conversation_id=doc["conversation_id"],
            turn_id=doc["turn_id"],
            ts=doc.get("started_at"),
            ordinal=position if position is not None else doc.get("ordinal"),
            title=doc.get("title"),
            agent=doc.get("agent"),
            status=doc.get("status") or "ok",
            error_type=doc.get("error_type"),
            snippets=snippets_from_payload(
                doc.get("payload") or {},
                request.snippet_targets,
                request.query,
                self.settings.search.snippet_chars,
            ),
        )

    def _nth(self, principal: Principal, request: SearchRequest, now: datetime) -> SearchResponse:
        assert request.conversation_id is not None and request.ordinal is not None
        found = lookups.nth_turn(
            self.client,
            self.turns_alias,
            principal,
            request.conversation_id,
            request.ordinal,
            now,
            routing=self.routing_for(principal, self.turns_alias),
        )
        request, warnings = self._cut_query(request)
        if not found:
            warnings.append(f"no turn at ordinal {request.ordinal}")
        hits = [self._catalog_hit(doc, request, position) for position, doc in found]
        return SearchResponse(mode="catalog", query=request.query, hits=hits, warnings=warnings)

    def _window(
        self, principal: Principal, request: SearchRequest, now: datetime
    ) -> SearchResponse:
        docs = lookups.window_turns(
            self.client,
            self.turns_alias,
            principal,
            request,
            now,
            routing=self.routing_for(principal, self.turns_alias),
        )
        request, warnings = self._cut_query(request)
        hits = [self._catalog_hit(doc, request) for doc in docs]
        return SearchResponse(mode="catalog", query=request.query, hits=hits, warnings=warnings)

    def _cut(self, query: str) -> tuple[str, list[str]]:
        """`query` cut to the configured length, with the warning that says so when it was."""
        limit = self.settings.search.query_max_chars
        if len(query) <= limit:
            return query, []
        return query[:limit], [f"query_truncated: cut to {limit} characters"]

    def _cut_query(self, request: SearchRequest) -> tuple[SearchRequest, list[str]]:
        """The request with its query cut to the configured length (a catalog answer echoes it)."""
        query, warnings = self._cut(request.query)
        if not warnings:
            return request, warnings
        return request.model_copy(update={"query": query}), warnings

    def _embed(self, query: str, warnings: list[str]) -> QueryVector | None:
        if self.embedder is None:
            warnings.append("semantic_unavailable: no embedding model; lexical and trigram only")
            return None
        try:
            vector = self.embedder.embed(query)
        except Exception as exc:  # noqa: BLE001 - the model failing must not fail the search
            log.warning("query embedding failed: %s", exc)
            vector = None
        if vector is None:
            warnings.append(
                "semantic_unavailable: query embedding failed; lexical and trigram only"
            )
        return vector

    def focused_query(
        self, principal: Principal, request: SearchRequest, query: str, now: datetime
    ) -> str:
        """`query` without the names the caller's memory cannot tell apart (`names.py`), counted
        in the rows the arms search. The query as given in conversation scope, when
        `focus_names` (the request's, else the settings') is off, and when the counts cannot be
        read in full (the arms then report what is wrong)."""
        found = self._names_to_count(request, query)
        if not found:
            return query
        filt = row_filter(principal, request, now)
        body = names.counts_body(filt, sorted(set(found.values())))
        try:
            response = self.client.search(
                index=self.rows_alias, routing=self.routing_for(principal, self.rows_alias), **body
            )
        except (ApiError, TransportError) as exc:
            log.warning("name counts unavailable, searching the query as given: %s", exc)
            return query
        if response.get("timed_out") or response.get("_shards", {}).get("failed"):
            return query
        return names.without_names(query, names.left_out(found, response["aggregations"]))

    def _names_to_count(self, request: SearchRequest, query: str) -> dict[str, str]:
        """The names of `query` whose counts `focused_query` reads (none when it reads none)."""
        on = self.knobs(request).focus_names
        topic, _ = split_time_hint(query)
        return names.query_names(topic) if on and request.scope != "conversation" else {}

    def _early_embedding(
        self, request: SearchRequest, query: str, semantic: bool
    ) -> Future[Embedding] | None:
        """The query's embedding, started on a pool thread when `focused_query` counts its
        names first: the count and the embedding overlap, and the vector serves whenever no
        name is left out (most queries that name someone). None otherwise."""
        if not semantic or not self._names_to_count(request, query):
            return None

        def embed() -> Embedding:
            said: list[str] = []
            return Embedding(self._embed(query, said), said)

        return _ARMS_POOL.submit(embed)

    def arm_bodies(
        self,
        principal: Principal,
        request: SearchRequest,
        query: str,
        vector: list[float] | None,
        now: datetime,
        model: str | None = None,
    ) -> dict[Arm, dict[str, Any]]:
        """The Elasticsearch bodies of the arms that can run for this query.

        The text arms see the query without its relative time expression ("from last week"):
        those words say when, not what, and would match unrelated rows. kNN embeds it whole.
        """
        s = self.settings
        text_query, _ = split_time_hint(query)
        rows = self._arm_rows(request)
        filt = row_filter(principal, request, now)
        bodies: dict[Arm, dict[str, Any]] = {
            "lexical": lexical_body(
                text_query,
                filt,
                size=rows,
                min_match=s.search.lexical_min_match,
                phrase_boost=s.search.phrase_boost,
                phrase_slop=s.search.phrase_slop,
            )
        }
        trigram = trigram_body(
            text_query,
            filt,
            size=rows,
            min_match=s.search.trigram_min_match,
            fuzzy_min_match=s.search.fuzzy_min_match,
        )
        if trigram is not None:
            bodies["trigram"] = trigram
        if vector is not None:
            bodies["semantic"] = self._semantic_body(principal, request, vector, now, model)
        return bodies

    def _arm_rows(self, request: SearchRequest) -> int:
        """Rows each arm fetches: enough for the turns wanted (more when capped), times
        `overfetch_rows` (a turn has several rows)."""
        cap = cap_of(self.knobs(request), request.scope)
        wanted_turns = max(3 * request.top_k, request.top_k + 10) * (cap or 1)
        return wanted_turns * self.settings.search.overfetch_rows

    def _semantic_body(
        self,
        principal: Principal,
        request: SearchRequest,
        vector: list[float],
        now: datetime,
        model: str | None,
    ) -> dict[str, Any]:
        """The kNN arm's body (`semantic_body`) under the request's row filter."""
        s = self.settings.search
        k = max(self._arm_rows(request), s.knn_k)
        return semantic_body(
            vector,
            row_filter(principal, request, now),
            k=k,
            num_candidates=max(s.num_candidates, math.ceil(KNN_CANDIDATES_PER_K * k)),
            oversample=s.knn_oversample,
            model=model,
        )

    def knobs(self, request: SearchRequest) -> SearchKnobs:
        """The ranking knobs of `request`: the configured ones with the request's overrides."""
        return request.ranking_knobs(self.settings.search.knobs)

    def run_arms(
        self, bodies: dict[Name, dict[str, Any]], routing: str | None = None
    ) -> dict[Name, list[RowHit]]:
        """All arms in one _msearch (on the `routing` shard when given); an arm that errors
        fails the call with a clear message."""
        header: dict[str, Any] = {"index": self.rows_alias}
        if routing is not None:
            header["routing"] = routing
        searches: list[dict[str, Any]] = []
        for body in bodies.values():
            searches.extend([header, body])
        responses = self.client.msearch(searches=searches)["responses"]
        out: dict[Name, list[RowHit]] = {}
        for arm, response in zip(bodies, responses, strict=True):
            error = response.get("error")
            if error and error.get("type") == "index_not_found_exception":
                raise SearchUnavailable(
                    f"search index {self.rows_alias!r} missing at "
                    f"{self.settings.elasticsearch.url}; run the indexing pipeline first"
                )
            if error:
                raise SearchUnavailable(f"{arm} arm failed: {error.get('reason', error)}")
            out[arm] = parse_hits(response)
        return out

    def _ranked_arms(
        self,
        principal: Principal,
        request: SearchRequest,
        query: str,
        now: datetime,
        semantic: bool,
        warnings: list[str],
        early: Future[Embedding] | None = None,
    ) -> dict[Arm, list[RowHit]]:
        """Every arm's hits, the text arms' rows with their query coverage. The text arms need
        no query vector, so they run (one _msearch, on a pool thread, which then scores their
        rows' coverage) while the query is embedded (or `early` ends: the query's embedding,
        started before); the kNN arm follows as soon as its vector is ready. A search then
        waits for the longer of the text arms and embedding plus kNN, instead of their sum."""
        routing = self.routing_for(principal, self.rows_alias)
        text = _ARMS_POOL.submit(self._text_arms, principal, request, query, now, routing)
        vector = None
        if early is not None:
            vector, said = early.result()
            warnings += said
        elif semantic:
            vector = self._embed(query, warnings)
        knn = {}
        if vector is not None:
            knn = self.semantic_arm(
                principal, request, query, vector.values, now, routing, model=vector.model
            )
        return text.result() | knn

    def _text_arms(
        self,
        principal: Principal,
        request: SearchRequest,
        query: str,
        now: datetime,
        routing: str | None,
    ) -> dict[Arm, list[RowHit]]:
        """The text arms' rows (one _msearch), each with its coverage of the query's words
        without their time expression (`with_coverage`)."""
        rows = self.run_arms(self.arm_bodies(principal, request, query, None, now), routing)
        return with_coverage(rows, split_time_hint(query)[0])

    def semantic_arm(
        self,
        principal: Principal,
        request: SearchRequest,
        query: str,
        vector: list[float],
        now: datetime,
        routing: str | None = None,
        model: str | None = None,
    ) -> dict[Arm, list[RowHit]]:
        """The kNN arm's rows, lifted and expanded by session rows when the session weight
        (request, else settings) is above 0 outside conversation scope (`sessions`), then
        interleaved with the rows of each part of a compound question (`subquestions`, when
        `split_questions`, the request's else the settings', is on; the parts embed and search
        on a pool thread while the whole query's kNN runs)."""
        parts = self._sub_questions(request, query)
        pending = (
            _ARMS_POOL.submit(self._part_rows, principal, request, parts, now, routing)
            if parts
            else None
        )
        s = self.settings.search
        weight = self.knobs(request).session_weight
        try:
            body = self._semantic_body(principal, request, vector, now, model)
            if weight <= 0 or request.scope == "conversation":
                rows = self.run_arms({"semantic": body}, routing)["semantic"]
            else:

                def run(bodies: dict[str, dict[str, Any]]) -> dict[str, list[RowHit]]:
                    return self.run_arms(bodies, routing)

                rows = sessions.lifted_semantic(
                    run,
                    body,
                    principal,
                    request,
                    now,
                    weight=weight,
                    expand=s.session_expand,
                    model=model,
                )
        except BaseException:
            if pending is not None:
                pending.cancel()  # the whole query failed: nothing waits for its parts
            raise
        found = pending.result() if pending else []
        return {"semantic": subquestions.interleave([rows, *found])}

    def _sub_questions(self, request: SearchRequest, query: str) -> list[str]:
        """The parts of a compound `query` the kNN arm also asks (`subquestions`), when
        `split_questions` (the request's, else the settings') is on and a model embeds them."""
        on = self.knobs(request).split_questions
        return subquestions.sub_questions(query) if on and self.embedder else []

    def _part_rows(
        self,
        principal: Principal,
        request: SearchRequest,
        parts: list[str],
        now: datetime,
        routing: str | None,
    ) -> list[list[RowHit]]:
        """The `CTXDB_SEARCH_KNN_K` best kNN rows of each of a compound question's `parts`, each
        embedded by the same model and searched under the same row filter as the whole query;
        none when a part cannot be embedded (the whole query's rows then stand alone)."""
        try:
            vectors = [self.embedder.embed(part) for part in parts] if self.embedder else []
        except Exception as exc:  # noqa: BLE001 - the model failing must not fail the search
            log.warning("embedding the parts of a compound question failed: %s", exc, exc_info=True)
            return []
        ready = [vector for vector in vectors if vector is not None]
        if not ready or len(ready) < len(parts):
            return []
        s = self.settings.search
        filt = row_filter(principal, request, now)
        candidates = max(s.num_candidates, math.ceil(KNN_CANDIDATES_PER_K * s.knn_k))
        bodies = {
            f"semantic (question part {n})": semantic_body(
                vector.values,
                filt,
                k=s.knn_k,
                num_candidates=candidates,
                oversample=s.knn_oversample,
                model=vector.model,
            )
            for n, vector in enumerate(ready, start=1)
        }
        return list(self.run_arms(bodies, routing).values())

    def _hybrid(
        self, principal: Principal, request: SearchRequest, now: datetime
    ) -> SearchResponse:
        if request.scope == "conversation":
            lookups.require_conversation(
                self.client,
                self.turns_alias,
                principal,
                request.conversation_id or "",
                now,
                routing=self.routing_for(principal, self.turns_alias),
            )
        query, warnings = self._cut(request.query.strip())
        warnings += window_warnings(request, query, now)
        knobs = self.knobs(request)
        semantic = knobs.weight_semantic > 0
        early = self._early_embedding(request, query, semantic)
        searched = self.focused_query(principal, request, query, now)
        if request.explain and searched != query:
            warnings.append(f"names_left_out: the arms searched for {searched!r}")
        ranked = self._ranked_arms(
            principal,
            request,
            searched,
            now,
            semantic,
            warnings,
            early if searched == query else None,
        )
        text_query, hint = split_time_hint(searched)
        window = hint.window(now) if hint else None
        kept = rank_turns(ranked, knobs, now, request.top_k, window, text_query, request.scope)
        docs = fetch_turns(
            self.client,
            self.turns_alias,
            principal,
            [(f.conversation_id, f.turn_id) for f in kept],
            now,
            routing=self.routing_for(principal, self.turns_alias),
        )
        hits = [
            self._hit(
                turn, docs.get((turn.conversation_id, turn.turn_id)), request, searched, warnings
            )
            for turn in kept
        ]
        return SearchResponse(mode="search", query=query, hits=hits, warnings=warnings)

    def _hit(
        self,
        turn: FusedTurn,
        doc: dict[str, Any] | None,
        request: SearchRequest,
        query: str,
        warnings: list[str],
    ) -> SearchHit:
        """One fused turn as a hit, its snippets from its turn document `doc`; without one, a
        snippet from its best row and a warning."""
        best = turn.best_row
        chars = self.settings.search.snippet_chars
        if doc is None:
            warnings.append(
                f"turn_log_missing: {turn.conversation_id}/{turn.turn_id}; fallback snippet"
            )
            snippets = [fallback_snippet(best, query, chars)]
        else:
            snippets = snippets_from_payload(
                doc.get("payload") or {}, request.snippet_targets, query, chars
            )
        strength = relevance(turn.rows)
        found = doc or {}
        return SearchHit(
            conversation_id=turn.conversation_id,
            turn_id=turn.turn_id,
            score=turn.final,
            target=best.target,
            matched_targets=turn.matched_targets,
            ts=turn.ts,
            ordinal=found.get("ordinal"),
            title=found.get("title"),
            agent=found.get("agent") or best.agent,
            status=found.get("status") or "ok",
            error_type=found.get("error_type"),
            relevance=round(strength, 4),
            weak=is_weak(strength),
            snippets=snippets,
            explain=turn.explain if request.explain else None,
        )
