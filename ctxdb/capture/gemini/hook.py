"""`ctxdb capture gemini hook`: Gemini CLI's `AfterAgent` / `SessionEnd` hooks import the session.

Gemini CLI runs a command hook with a JSON payload on stdin whose common fields include
`session_id`, `transcript_path` (the session file) and `hook_event_name`. After each answered turn
(`AfterAgent`) and when the session ends (`SessionEnd`) the hook re-imports that session file
whole (`import_sessions`, its last turn closed provisionally until the next prompt closes it for
good, streamed: memory stays bounded): the events no file of an earlier day holds go to the
session's file in the day's partition, rewritten only when it changed, and landing keeps one copy
of each event id. The hook prints `{}`
(Gemini CLI parses stdout as JSON) and always exits 0; failures are logged, never raised into
Gemini CLI.

Bounds: the payload is read up to `MAX_PAYLOAD_BYTES` (a longer one is refused, never held), and
a session file over `MAX_SESSION_BYTES` is not re-imported by the hook, whose run time grows with
the session (Gemini CLI rewrites a `.json` session whole, so there is no offset to resume from):
it logs that `ctxdb capture gemini import` takes it, which reads any size in bounded memory.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from ctxdb.capture.claude_code.importer import ImportStats
from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.gemini.importer import session_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.capture.reading import MAX_PAYLOAD_BYTES

log = logging.getLogger(__name__)
EVENTS = frozenset({"AfterAgent", "SessionEnd"})
MAX_SESSION_BYTES = 64 * 1024 * 1024
"""Largest session file the hook re-imports (about 3 s, 40 MB of memory, on 2 shared vCPUs); a
larger one is left to the importer."""


def handle(payload: Any, spool_dir: Path, identity: Identity, root: Path) -> ImportStats | None:
    """Import the session a hook payload names; None when the payload is for another event or
    names no session file under `root` (Gemini CLI's `~/.gemini/tmp`)."""
    if not isinstance(payload, dict) or payload.get("hook_event_name") not in EVENTS:
        return None
    transcript = payload.get("transcript_path")
    if not isinstance(transcript, str) or not transcript:
        raise ValueError("payload has no transcript_path")
    path = Path(transcript).expanduser().resolve()
    if not path.is_relative_to(root.expanduser().resolve()) or not path.name.startswith("session-"):
        raise ValueError(f"{transcript} is not a session file under {root}")
    size = path.stat().st_size
    if size > MAX_SESSION_BYTES:
        raise ValueError(
            f"{transcript} holds {size >> 20} MiB, over the hook's {MAX_SESSION_BYTES >> 20} MiB: "
            "not imported by the hook; run `ctxdb capture gemini import` for it"
        )
    return import_sessions([path], spool_dir, identity, session_events, settle_s=0)


def read_payload(stdin: Any) -> Any:
    """The JSON payload on `stdin` (binary or text), read up to `MAX_PAYLOAD_BYTES`; ValueError
    when it is longer (never held whole) or not JSON."""
    raw = stdin.read(MAX_PAYLOAD_BYTES + 1)
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload over {MAX_PAYLOAD_BYTES >> 20} MiB: refused")
    return json.loads(raw)


def run(spool_dir: Path, identity: Identity, root: Path, stdin: Any = None) -> int:
    """Read one payload from stdin and handle it; print `{}`, return 0 whatever happens."""
    try:
        payload = read_payload(stdin or sys.stdin.buffer)
        stats = handle(payload, spool_dir, identity, root)
        if stats is not None and stats.problems:
            log.warning("gemini hook: %s", "; ".join(stats.problems))
    except ValueError as exc:  # the payload or the session it names is refused: one line
        log.warning("gemini hook: %s", exc)
    except Exception:  # a hook must never disturb Gemini CLI
        log.exception("gemini hook failed")
    sys.stdout.write("{}\n")
    return 0
