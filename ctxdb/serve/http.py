"""HTTP API of the conversation search service (FastAPI; OpenAPI at /openapi.json).

Every endpoint except /healthz needs `Authorization: Bearer <token>`; the token's principal bounds
every query. Another user's conversation, turn or ref answers 404 exactly like a missing one.
"""

import logging
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from elasticsearch import Elasticsearch
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ctxdb.auth.authenticate import Authenticator
from ctxdb.auth.credentials import AuthError, Principal
from ctxdb.contract.events import REF_MAX_CHARS, Ident, RefId
from ctxdb.contract.refs import RefError
from ctxdb.errors import SearchUnavailable
from ctxdb.index.client import make_client
from ctxdb.pack.build import build_pack
from ctxdb.pack.models import ContextPack, ContextRequest
from ctxdb.search.lookups import MAX_CONVERSATIONS, MAX_LISTED, MAX_RESULT_WINDOW
from ctxdb.search.models import (
    ConversationList,
    ConversationTurns,
    Identity,
    MissingQuery,
    NotFound,
    SearchRequest,
    SearchResponse,
    TurnView,
)
from ctxdb.search.service import QueryEmbedder, SearchService, default_embedder
from ctxdb.serve.guards import RequestGuard, error_body, validation_handler
from ctxdb.serve.mcp_server import mcp_router
from ctxdb.serve.resolve import Resolver
from ctxdb.serve.viewer import viewer_router
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

log = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False)


def _client(request: Request) -> Elasticsearch:
    return request.app.state.client


def _service(request: Request) -> SearchService:
    return request.app.state.service


def _resolver(request: Request) -> Resolver:
    return request.app.state.resolver


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller behind the bearer token (401 without a valid one)."""
    authenticator: Authenticator = request.app.state.authenticator
    try:
        return authenticator.authenticate(credentials.credentials if credentials else None)
    except AuthError as exc:
        raise HTTPException(
            status_code=401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}
        ) from exc


Caller = Annotated[Principal, Depends(_principal)]
Service = Annotated[SearchService, Depends(_service)]

health_router = APIRouter()
search_router = APIRouter()
files_router = APIRouter()


@health_router.get("/healthz")
def healthz(client: Annotated[Elasticsearch, Depends(_client)]) -> dict[str, str]:
    """Liveness, plus whether Elasticsearch answers."""
    try:
        status = client.cluster.health()["status"]
    except Exception as exc:  # noqa: BLE001 - report, never raise, from a health probe
        return {"status": "degraded", "elasticsearch": f"unreachable: {type(exc).__name__}"}
    return {"status": "ok", "elasticsearch": status}


@search_router.post("/v1/search", response_model=SearchResponse, response_model_exclude_none=True)
def search(request: SearchRequest, caller: Caller, service: Service) -> SearchResponse:
    """Hybrid search, or catalog lookups (ordinal, or a window without a query)."""
    return service.search(caller, request)


@search_router.get("/v1/me", response_model=Identity)
def me(caller: Caller) -> Identity:
    """The user and tenant the bearer token speaks for."""
    return Identity(user_id=caller.user_id, tenant=caller.tenant)


@search_router.get("/v1/conversations", response_model=ConversationList)
def conversations(
    caller: Caller,
    service: Service,
    limit: Annotated[int, Query(ge=1, le=MAX_CONVERSATIONS)] = 50,
    offset: Annotated[int, Query(ge=0, lt=MAX_LISTED)] = 0,
    agent: Annotated[Ident | None, Query()] = None,
) -> ConversationList:
    """A page of the caller's conversations, most recent activity first (`next_offset` gives
    the next page, through the 10,000 most recently active)."""
    return service.conversations(caller, limit=limit, offset=offset, agent=agent)


TIMELINE_PAGE = 200
"""The most turns one page of a conversation's timeline holds."""


@search_router.get("/v1/conversations/{conversation_id}/turns", response_model=ConversationTurns)
def conversation_turns(
    conversation_id: Annotated[RefId, Path()],
    caller: Caller,
    service: Service,
    offset: Annotated[int, Query(ge=0, le=MAX_RESULT_WINDOW - TIMELINE_PAGE)] = 0,
    limit: Annotated[int, Query(ge=1, le=TIMELINE_PAGE)] = 100,
) -> ConversationTurns:
    """A page of the conversation's turns, oldest first: all of them, `limit` at a time."""
    return service.conversation_turns(caller, conversation_id, offset=offset, limit=limit)


@search_router.get("/v1/conversations/{conversation_id}/turns/{turn_id}", response_model=TurnView)
def turn(
    conversation_id: Annotated[RefId, Path()],
    turn_id: Annotated[RefId, Path()],
    caller: Caller,
    service: Service,
) -> TurnView:
    """One known turn reconstructed from its TurnLog."""
    return service.turn(caller, conversation_id, turn_id)


@search_router.get("/v1/context", response_model=ContextPack)
def context(
    params: Annotated[ContextRequest, Query()], caller: Caller, service: Service, request: Request
) -> ContextPack:
    """The context pack: a compact digest of the caller's memory (a project's with `project`,
    a conversation's reload with `conversation_id`), within `budget` tokens."""
    store: DeltaStore = request.app.state.store
    return build_pack(caller, params, datetime.now(UTC), store, service.search)


@files_router.get(
    "/v1/pull",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def pull(
    caller: Caller,
    resolver: Annotated[Resolver, Depends(_resolver)],
    ref: Annotated[
        str, Query(max_length=REF_MAX_CHARS, description="conv:fi:conv_<id>.turn_<id>.<path>")
    ],
    conversation_id: Annotated[RefId | None, Query()] = None,
) -> Response:
    """The bytes behind a conv:fi: ref, while its turn is retained."""
    pulled = resolver.pull(caller, ref, conversation_id)
    return Response(
        content=pulled.data,
        media_type=pulled.mime,
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(pulled.filename)}"},
    )


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(code, detail))


def _unavailable(_: Request, exc: Exception) -> JSONResponse:
    """503 without the cluster's URL or raw error: those go to the server log."""
    log.warning("search unavailable: %s", exc)
    return _error(503, "search_unavailable", "search is unavailable; the server log has the cause")


_ERRORS: dict[type[Exception], tuple[int, str]] = {
    MissingQuery: (400, "missing_query"),
    NotFound: (404, "not_found"),
    RefError: (400, "invalid_ref"),
}


def _add_error_handlers(app: FastAPI) -> None:
    """Domain errors answer as `{"error": <code>, "detail": <message>}` with their status."""
    for error, (status, code) in _ERRORS.items():

        def handler(
            _: Request, exc: Exception, status: int = status, code: str = code
        ) -> JSONResponse:
            return _error(status, code, str(exc))

        app.add_exception_handler(error, handler)
    app.add_exception_handler(SearchUnavailable, _unavailable)
    app.add_exception_handler(RequestValidationError, validation_handler)


def create_app(
    settings: Settings,
    client: Elasticsearch | None = None,
    embedder: QueryEmbedder | None = None,
    *,
    load_model: bool = True,
) -> FastAPI:
    """The app; the client and embedder default to the configured ones (model loads lazily)."""
    client = client or make_client(settings)
    if embedder is None and load_model:
        embedder = default_embedder(settings, client)
    app = FastAPI(
        title="ctxdb conversation search",
        version="1",
        description="Hybrid conversation search (kNN + BM25 + trigram, RRF, recency lift), "
        "catalog, known-turn reads and conv:fi: ref pulls inside the caller's identity boundary.",
    )
    app.state.client = client
    app.state.service = SearchService(settings, client, embedder)
    app.state.resolver = Resolver(settings, client)
    app.state.store = DeltaStore.from_settings(settings)
    app.state.authenticator = Authenticator(settings, make_client)
    _add_error_handlers(app)
    for router in (health_router, search_router, files_router, viewer_router()):
        app.include_router(router)
    app.include_router(mcp_router(app, settings))
    app.add_middleware(
        RequestGuard,
        max_body_bytes=settings.http.max_body_bytes,
        max_query_bytes=settings.http.max_query_bytes,
    )
    return app
