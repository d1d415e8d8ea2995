"""The memory viewer: a static page served at `/` that reads the HTTP API with the user's token.

The page holds no data of its own; every read goes through `/v1/*` with the bearer token the
person signs in with, so the API's identity rules apply unchanged. No build step and no external
assets: three files under `static/`, sent with a Content-Security-Policy that allows only this
origin.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

_STATIC = resources.files("ctxdb.serve") / "static"
_TYPES = {"viewer.js": "text/javascript", "viewer.css": "text/css"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _page() -> Response:
    html = (_STATIC / "viewer.html").read_bytes()
    return Response(html, media_type="text/html; charset=utf-8", headers=_HEADERS)


def viewer_router() -> APIRouter:
    """Routes of the viewer: its page under every client-side path, and its two assets."""
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def home() -> Response:
        return _page()

    @router.get("/conversations/{conversation_id}")
    def conversation(conversation_id: str) -> Response:
        return _page()

    @router.get("/conversations/{conversation_id}/turns/{turn_id}")
    def turn(conversation_id: str, turn_id: str) -> Response:
        return _page()

    @router.get("/static/{name}")
    def asset(name: str) -> Response:
        if name not in _TYPES:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response((_STATIC / name).read_bytes(), media_type=_TYPES[name], headers=_HEADERS)

    return router
