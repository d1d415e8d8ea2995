"""The memory viewer: a static page served at `/` that reads the HTTP API with the user's token.

The page holds no data of its own; every read goes through `/v1/*` with the bearer token the
person signs in with, so the API's identity rules apply unchanged. No build step and no external
assets: four files under `static/`, sent with a Content-Security-Policy that allows only this
origin.
"""

from __future__ import annotations

import re
from importlib import resources
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Request
from fastapi.responses import Response

_STATIC = resources.files("ctxdb.serve") / "static"
_TYPES = {
    "viewer.js": "text/javascript",
    "markdown.js": "text/javascript",
    "viewer.css": "text/css",
}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")


def malformed_escape(raw_path: bytes) -> bool:
    """Whether a request path has a malformed percent escape: a `%` not followed by two hex
    digits, or escapes whose bytes are not UTF-8 (the server decodes those to U+FFFD)."""
    if _BAD_ESCAPE.search(raw_path):
        return True
    try:
        unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _page(request: Request) -> Response:
    """The page; 400 when its path has a malformed escape (the page then says so itself)."""
    html = (_STATIC / "viewer.html").read_bytes()
    status = 400 if malformed_escape(request.scope.get("raw_path") or b"") else 200
    return Response(
        html, status_code=status, media_type="text/html; charset=utf-8", headers=_HEADERS
    )


def viewer_router() -> APIRouter:
    """Routes of the viewer: its page under every client-side path, and its assets."""
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def home(request: Request) -> Response:
        return _page(request)

    @router.get("/conversations/{conversation_id}")
    def conversation(request: Request, conversation_id: str) -> Response:
        return _page(request)

    @router.get("/conversations/{conversation_id}/turns/{turn_id}")
    def turn(request: Request, conversation_id: str, turn_id: str) -> Response:
        return _page(request)

    @router.get("/static/{name}")
    def asset(name: str) -> Response:
        if name not in _TYPES:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response((_STATIC / name).read_bytes(), media_type=_TYPES[name], headers=_HEADERS)

    return router
