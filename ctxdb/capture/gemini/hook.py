"""`ctxdb capture gemini hook`: Gemini CLI's `AfterAgent` / `SessionEnd` hooks import the session.

Gemini CLI runs a command hook with a JSON payload on stdin whose common fields include
`session_id`, `transcript_path` (the session file) and `hook_event_name`. After each answered turn
(`AfterAgent`) and when the session ends (`SessionEnd`) the hook re-imports that session file
whole (`import_sessions`, its last turn closed): the events file is rewritten only when it
changed, and landing keeps one copy of each event id. The hook prints `{}` (Gemini CLI parses
stdout as JSON) and always exits 0; failures are logged, never raised into Gemini CLI.
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

log = logging.getLogger(__name__)
EVENTS = frozenset({"AfterAgent", "SessionEnd"})


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
    return import_sessions([path], spool_dir, identity, session_events, settle_s=0)


def run(spool_dir: Path, identity: Identity, root: Path, stdin: Any = None) -> int:
    """Read one payload from stdin and handle it; print `{}`, return 0 whatever happens."""
    try:
        stats = handle(json.loads((stdin or sys.stdin).read()), spool_dir, identity, root)
        if stats is not None and stats.problems:
            log.warning("gemini hook: %s", "; ".join(stats.problems))
    except Exception:  # a hook must never disturb Gemini CLI
        log.exception("gemini hook failed")
    sys.stdout.write("{}\n")
    return 0
