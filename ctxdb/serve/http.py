"""HTTP API of the conversation search service (FastAPI; OpenAPI at /openapi.json).

Every endpoint except /healthz needs `Authorization: Bearer <token>`; the token's principal bounds
every query. Another user's conversation, turn or ref answers 404 exactly like a missing one.
"""

from typing import Annotated
from urllib.parse import quote

from elasticsearch import Elasticsearch
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ctxdb.contract.refs import RefError
from ctxdb.index.client import make_client
from ctxdb.search.models import (
    ConversationList,
    MissingQuery,
    NotFound,
    SearchRequest,
    SearchResponse,
    SearchUnavailable,
    TurnView,
)
from ctxdb.search.service import QueryEmbedder, SearchService, default_embedder
from ctxdb.serve.auth import Authenticator, AuthError, Principal
from ctxdb.serve.resolve import Resolver
from ctxdb.serve.viewer import viewer_router
from ctxdb.settings import Settings

_bearer = HTTPBearer(auto_error=False)


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": code, "detail": detail})


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
        embedder = default_embedder(settings)
    service = SearchService(settings, client, embedder)
    resolver = Resolver(settings, client)
    authenticator = Authenticator(settings)
    app = FastAPI(
        title="ctxdb conversation search",
        version="1",
        description="Hybrid conversation search (kNN + BM25 + trigram, RRF, recency lift), "
        "catalog, known-turn reads and conv:fi: ref pulls inside the caller's identity boundary.",
    )

    def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        try:
            return authenticator.authenticate(credentials.credentials if credentials else None)
        except AuthError as exc:
            raise HTTPException(
                status_code=401, detail=str(exc), headers={"WWW-Authenticate": "Bearer"}
            ) from exc

    Caller = Annotated[Principal, Depends(principal)]

    @app.exception_handler(MissingQuery)
    def _missing_query(_: Request, exc: MissingQuery) -> JSONResponse:
        return _error(400, "missing_query", str(exc))

    @app.exception_handler(NotFound)
    def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return _error(404, "not_found", str(exc))

    @app.exception_handler(RefError)
    def _bad_ref(_: Request, exc: RefError) -> JSONResponse:
        return _error(400, "invalid_ref", str(exc))

    @app.exception_handler(SearchUnavailable)
    def _unavailable(_: Request, exc: SearchUnavailable) -> JSONResponse:
        return _error(503, "search_unavailable", str(exc))

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """Liveness, plus whether Elasticsearch answers."""
        try:
            status = client.cluster.health()["status"]
        except Exception as exc:  # report, never raise, from a health probe
            return {"status": "degraded", "elasticsearch": f"unreachable: {type(exc).__name__}"}
        return {"status": "ok", "elasticsearch": status}

    @app.post("/v1/search", response_model=SearchResponse, response_model_exclude_none=True)
    def search(request: SearchRequest, caller: Caller) -> SearchResponse:
        """Hybrid search, or catalog lookups (ordinal, or a window without a query)."""
        return service.search(caller, request)

    @app.get("/v1/conversations", response_model=ConversationList)
    def conversations(
        caller: Caller,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        agent: str | None = None,
    ) -> ConversationList:
        """The caller's conversations, most recent activity first."""
        return service.conversations(caller, limit=limit, agent=agent)

    @app.get("/v1/conversations/{conversation_id}/turns/{turn_id}", response_model=TurnView)
    def turn(conversation_id: str, turn_id: str, caller: Caller) -> TurnView:
        """One known turn reconstructed from its TurnLog."""
        return service.turn(caller, conversation_id, turn_id)

    @app.get(
        "/v1/pull",
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}}},
    )
    def pull(
        caller: Caller,
        ref: Annotated[str, Query(description="conv:fi:conv_<id>.turn_<id>.<path>")],
        conversation_id: str | None = None,
    ) -> Response:
        """The bytes behind a conv:fi: ref, while its turn is retained."""
        pulled = resolver.pull(caller, ref, conversation_id)
        return Response(
            content=pulled.data,
            media_type=pulled.mime,
            headers={
                "Content-Disposition": f"attachment; filename*=UTF-8''{quote(pulled.filename)}"
            },
        )

    app.include_router(viewer_router())
    return app
