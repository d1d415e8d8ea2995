"""What every transcript-importing host shares: one turn mapper, token counts and the importer.

Codex CLI (`ctxdb.capture.codex`) and Gemini CLI (`ctxdb.capture.gemini`) read their session files
into the same `Record`s the Claude Code mapper understands (`ctxdb.capture.claude_code.transcript`)
and feed them through `HostMapper`, the Claude Code `TurnMapper` with the host's own `adapter`
and event-id prefix, plus `Tokens` records: the tokens a turn used are summed into its
`assistant.completion` (`tokens_in`, `tokens_out`). Ids come from the session file, so importing a
file twice writes nothing the second time (`ctxdb.capture.part_files`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from ctxdb.capture.claude_code.importer import SETTLE_S, ImportStats, Mapped, write_sessions
from ctxdb.capture.claude_code.transcript import Record
from ctxdb.capture.claude_code.turns import Identity, TurnMapper, safe_id
from ctxdb.contract.private import strip_private


class Tokens(NamedTuple):
    """Tokens one model call used: prompt (`tokens_in`) and output (`tokens_out`)."""

    tokens_in: int
    tokens_out: int


class HostMapper(TurnMapper):
    """`TurnMapper` for another host: events carry `adapter` and ids `<prefix>-...`; `Tokens`
    records are added to the completion of the open turn (they open the waiting prompt's turn:
    some Codex releases count a turn's tokens before its first answer)."""

    def __init__(
        self,
        identity: Identity,
        session_id: str,
        adapter: str,
        prefix: str,
        clean: Callable[[str], str] = strip_private,
    ) -> None:
        super().__init__(identity, session_id, {}, clean)
        self.adapter = adapter
        self.prefix = prefix

    def feed(self, records: Iterable[Record | Tokens]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for record in records:
            if isinstance(record, Tokens):
                events += self.start()  # tokens spent on the waiting prompt: its turn began
                if self.turn is not None:
                    used = self.turn.setdefault("tokens", [0, 0])
                    used[0] += record.tokens_in
                    used[1] += record.tokens_out
            else:
                events += super().feed([record])
        return events

    def close(
        self, ts: str | None = None, text: str | None = None, finished: bool = False
    ) -> list[dict[str, Any]]:
        used = self.turn.get("tokens") if self.turn is not None else None
        events = super().close(ts, text, finished)
        for event in events:
            if event["type"] == "assistant.completion" and used:
                event["payload"].update(tokens_in=used[0], tokens_out=used[1])
        return events

    def _event(
        self, kind: str, suffix: str, ts: str, payload: dict[str, Any], step: bool = False
    ) -> dict[str, Any]:
        event = super()._event(kind, suffix, ts, payload, step)
        event["event_id"] = f"{self.prefix}-{event['event_id'].removeprefix('cc-')}"
        event["adapter"] = self.adapter
        return event


def import_sessions(
    paths: list[Path],
    spool_dir: Path,
    identity: Identity,
    read: Callable[[Path, Identity, bool, Callable[[str], str]], Mapped],
    settle_s: float = SETTLE_S,
    clean: Callable[[str], str] = strip_private,
    excluded: Callable[[str | None], bool] | None = None,
    progress: Callable[[int], None] | None = None,
    erased: Callable[[str], bool] | None = None,
) -> ImportStats:
    """Write the events of every session file in `paths` that no file of an earlier day holds to
    `<spool_dir>/import/dt=YYYY-MM-DD/<session>.jsonl` (the day of the import; atomically, only when
    its bytes changed), except those of `excluded` projects and `erased` conversations. `read` maps
    one file: (path, identity, settled, clean) -> `Mapped`; a file untouched for `settle_s` seconds
    is settled (its last turn is closed). A file that cannot be read or is not a session is counted
    in `failed` with a one-line reason, and the others are still imported."""
    now = time.time()
    return write_sessions(
        paths,
        lambda path: read(path, identity, now - path.stat().st_mtime >= settle_s, clean),
        lambda path: spool_dir / "import" / f"{safe_id(path.stem)}.jsonl",
        excluded,
        progress,
        (OSError, ValueError),
        erased,
    )
