"""The recorder for asyncio hosts: the same turns, with waits that never block the event loop.

    async with AsyncRecorder.from_settings(settings, tenant=..., app=..., agent=...) as rec:
        async with rec.turn(user_id="u1", conversation_id="c1") as turn:
            turn.submission("...")        # never waits: validates and queues
            turn.completion("...")
        await rec.aflush()

A turn's methods only validate and queue (no I/O), so they are called without `await`; `flush`
and `aclose` wait for the writer in a worker thread. A task cancelled inside `async with
rec.turn(...)` closes the turn as `cancelled`, any other exception as `error`.
"""

from __future__ import annotations

import asyncio

from ctxdb.capture.recorder import Recorder


class AsyncRecorder(Recorder):
    """`Recorder` with awaitable `flush`/`aclose` and `async with` support."""

    async def aflush(self, timeout: float | None = 10.0) -> bool:
        """Wait (off the event loop) until every event recorded so far is written."""
        return await asyncio.to_thread(Recorder.flush, self, timeout)

    async def aclose(self, timeout: float | None = 10.0) -> None:
        """Close open turns as cancelled and write everything (off the event loop)."""
        await asyncio.to_thread(Recorder.close, self, timeout)

    async def __aenter__(self) -> AsyncRecorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
