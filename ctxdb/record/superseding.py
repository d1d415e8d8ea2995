"""What an importer inferred gives way to what the host wrote.

An importer that reads a session file gone idle with its last turn open closes that turn
provisionally (`ctxdb.contract.events.Provisional`): a `turn.closed`, the last answer read and a
step for each tool call not yet returned, under ids of their own. When the file grows the host's
own close, answer and steps land beside them; derivation keeps, per turn, the host's events and
of the inferred ones only those nothing the host wrote replaces, from the latest inference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

STEP = "chat.step"
COMPLETION = "assistant.completion"


def _inferred(payload: Any) -> bool:
    return bool(payload.get("provisional"))


def closing_row(rows: Sequence[int], payloads: Sequence[Any]) -> int:
    """The row of the close a turn ends with: its first close the host wrote, else its last
    inferred one (`rows`: its `turn.closed` rows in arrival order)."""
    written = [row for row in rows if not _inferred(payloads[row])]
    return written[0] if written else rows[-1]


def current(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A turn's block-making events (arrival order) without the inferred ones superseded: an
    inferred answer when the host wrote one, an inferred step when the host wrote that step, and
    of several inferences of one answer or step the last."""
    if not any(_inferred(e["payload"]) for e in events):
        return list(events)
    written = {_slot(e) for e in events if not _inferred(e["payload"])}
    last = {_slot(e): i for i, e in enumerate(events) if _inferred(e["payload"])}
    return [
        e
        for i, e in enumerate(events)
        if not _inferred(e["payload"]) or (_slot(e) not in written and last[_slot(e)] == i)
    ]


def superseded(events: Sequence[Mapping[str, Any]]) -> set[str]:
    """The ids of the events among one turn's (arrival order) that `current` leaves out."""
    kept = {e["event_id"] for e in current(events)}
    return {e["event_id"] for e in events if e["event_id"] not in kept}


def _slot(event: Mapping[str, Any]) -> tuple[str, str]:
    """What one event fills in its turn: the answer, a step by its name, else the event itself."""
    kind = event["type"]
    if kind == COMPLETION:
        return (kind, "")
    if kind == STEP:
        return (kind, str(event["payload"].get("step")))
    return (kind, event["event_id"])
