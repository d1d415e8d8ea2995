"""What every HTTP request passes before and after a route: size limits, short validation errors,
no Elasticsearch detail in answers, relative redirects.

`RequestGuard` is a pure ASGI middleware: a query string over the limit answers 414, a body over
the limit 413 (checked on `Content-Length` and again on the bytes that arrive), and a redirect's
absolute `Location` (Starlette builds it from the Host header) is cut to its path and query.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_REDIRECTS = {301, 302, 303, 307, 308}
_MAX_PROBLEMS = 5
_MAX_MESSAGE_CHARS = 200
MAX_DETAIL_CHARS = 500


def error_body(code: str, detail: str) -> dict[str, str]:
    """The JSON body of every error answer; a detail echoing a long input is cut."""
    if len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 1] + "…"
    return {"error": code, "detail": detail}


def _problem(error: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
    message = str(error.get("msg", "invalid"))[:_MAX_MESSAGE_CHARS]
    return f"{where}: {message}" if where else message


def validation_detail(exc: RequestValidationError) -> str:
    """One short line naming each problem (field and reason), never echoing the input."""
    problems = [_problem(error) for error in exc.errors()]
    more = len(problems) - _MAX_PROBLEMS
    line = "; ".join(problems[:_MAX_PROBLEMS])
    return f"{line}; and {more} more" if more > 0 else line


def validation_handler(_: Request, exc: Exception) -> JSONResponse:
    """422 `invalid_request` with a short message (the default echoes the input back)."""
    assert isinstance(exc, RequestValidationError)
    body = error_body("invalid_request", validation_detail(exc))
    return JSONResponse(status_code=422, content=body)


def relative_location(location: str) -> str:
    """A redirect target without scheme and host: `/path?query`."""
    parts = urlsplit(location)
    return urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment))


async def _answer(send: Send, status: int, code: str, detail: str) -> None:
    body = json.dumps(error_body(code, detail)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class RequestGuard:
    """Size limits on the query string and body, and relative redirects (ASGI middleware)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_query_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_query_bytes = max_query_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if len(scope.get("query_string", b"")) > self.max_query_bytes:
            detail = f"query string over {self.max_query_bytes} bytes"
            await _answer(send, 414, "uri_too_long", detail)
            return
        too_large = f"request body over {self.max_body_bytes} bytes"
        length = _content_length(scope)
        if length is not None and length > self.max_body_bytes:
            await _answer(send, 413, "body_too_large", too_large)
            return
        body = await self._read_body(receive)
        if body is None:
            await _answer(send, 413, "body_too_large", too_large)
            return
        await self.app(scope, self._replay(body, receive), self._relative_redirects(send))

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit."""
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    @staticmethod
    def _replay(body: bytes, receive: Receive) -> Receive:
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    @staticmethod
    def _relative_redirects(send: Send) -> Send:
        async def relative(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in _REDIRECTS:
                message["headers"] = [
                    (name, relative_location(value.decode("latin-1")).encode("latin-1"))
                    if name.lower() == b"location"
                    else (name, value)
                    for name, value in message.get("headers", ())
                ]
            await send(message)

        return relative
