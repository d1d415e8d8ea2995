"""Capture at the host boundary: hosts record their turns as contract events (docs/capture.md).
In: a host's turns (recorder calls, LangGraph calls, Claude Code hooks and transcripts); out:
contract events in JSONL files under the landing location, published atomically.

`Recorder` / `AsyncRecorder` (`ctxdb.capture.recorder`, `ctxdb.capture.aio`) are the SDK any
Python host embeds; `ctxdb.capture.langgraph` wraps a compiled LangGraph graph;
`ctxdb.capture.claude_code` records Claude Code through its hooks and transcripts.

The names below load on first use, so the Claude Code hook (standard library only, started once
per hook event) never pays for pydantic when it imports its own modules from this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Recorder": "ctxdb.capture.recorder",
    "Turn": "ctxdb.capture.recorder",
    "RecorderStats": "ctxdb.capture.recorder",
    "CaptureError": "ctxdb.capture.recorder",
    "InvalidEventError": "ctxdb.capture.recorder",
    "CaptureIOError": "ctxdb.capture.recorder",
    "AsyncRecorder": "ctxdb.capture.aio",
    "strip_private": "ctxdb.contract.private",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ctxdb.capture' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
