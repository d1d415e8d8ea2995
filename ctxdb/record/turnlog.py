"""TurnLogs: the reloadable record of one closed turn, built from that turn's raw events.

Block types, order and `path` refs follow the KDCube reference (docs/tables.md, turn_logs):
user prompts (m0..mN) -> context events -> attachment cards -> steps and rich activity ->
hosted files -> notes -> working summary -> completion(s) -> suggested follow-ups.
Blocks are de-duplicated by a per-type fingerprint: a re-sent or late event never doubles a block.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from ctxdb.contract.events import RICH_ADAPTERS, RICH_EVENT_TYPES
from ctxdb.contract.refs import make_ref

RecordingKind = Literal["none", "minimal", "rich"]
RECORDING_STATE: dict[str, int] = {"none": 0, "minimal": 1, "rich": 2}
ERROR_TEXT = "An error occurred."

USER_BLOCK_TYPES = frozenset({"user.prompt", "user.followup", "user.steer"})
COMPLETION = "assistant.completion"
SUMMARY = "conv.working.summary"
NOTE = "react.note"
ATTACHMENT = "user.attachment.meta"
HOSTED_FILE = "react.tool.result"
STEP = "assistant.step"


class Block(BaseModel):
    """One TurnLog block (reference: type, author, turn_id, ts, mime, path, text, meta)."""

    model_config = ConfigDict(frozen=True)

    type: str
    author: Literal["user", "assistant", "system"]
    turn_id: str
    ts: datetime
    mime: str = "text/plain"
    path: str
    text: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)


class Feedback(BaseModel):
    count: int
    last_ts: datetime
    last_reaction: str | None = None
    last_origin: str | None = None
    last_text: str | None = None


class TurnLog(BaseModel):
    """The TurnLog envelope stored as `turn_logs.payload`."""

    turn_id: str
    ts: datetime
    end_ts: datetime
    blocks: list[Block]
    sources_used: list[str] = Field(default_factory=list)
    blocks_count: int
    tokens: dict[str, int] | None = None
    feedback: Feedback | None = None


class TurnRecord(BaseModel):
    """A TurnLog plus the accounting and identity the derived tables need."""

    tenant: str
    app: str
    agent: str
    user_id: str
    conversation_id: str
    turn_id: str
    adapter: str
    recording_kind: RecordingKind
    error: bool
    started_at: datetime
    ended_at: datetime
    last_event_at: datetime
    source_event_ids: list[str]
    log: TurnLog

    @property
    def recording_state(self) -> int:
        return RECORDING_STATE[self.recording_kind]


def parse_turn_log(payload: str | bytes) -> TurnLog:
    """Parse a `turn_logs.payload` JSON string back into the TurnLog model."""
    return TurnLog.model_validate_json(payload)


def fingerprint(block: Block) -> str:
    """Per-type identity of a block, independent of its position (paths and message ids)."""
    meta = block.meta
    key: tuple[Any, ...]
    if block.type in USER_BLOCK_TYPES:
        key = (block.text, meta.get("event_type"), meta.get("batch_id"), block.ts.isoformat())
    elif block.type == ATTACHMENT:
        key = (block.path,)
    elif block.type == HOSTED_FILE and meta.get("kind") == "file":
        key = (meta.get("artifact_path"), meta.get("sha256"))
    elif block.type == STEP:
        key = (meta.get("step"), meta.get("phase"), meta.get("status"))
    elif block.type in (COMPLETION, SUMMARY, NOTE):
        key = (block.text, meta.get("error", False))
    else:
        key = (block.text, json.dumps(meta, sort_keys=True, default=str))
    raw = json.dumps([block.type, *key], default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def dedupe_blocks(blocks: Iterable[Block]) -> list[Block]:
    """Keep the first block of every fingerprint, in order."""
    seen: set[str] = set()
    kept = []
    for block in blocks:
        fp = fingerprint(block)
        if fp not in seen:
            seen.add(fp)
            kept.append(block)
    return kept


def merge_turn_logs(
    existing: TurnLog, existing_kind: RecordingKind, incoming: TurnLog, incoming_kind: RecordingKind
) -> tuple[TurnLog, RecordingKind]:
    """Merge a rewrite of the same turn: a higher recording state replaces a lower one (never the
    reverse); at equal state the existing blocks stay and only new fingerprints are appended."""
    if RECORDING_STATE[incoming_kind] > RECORDING_STATE[existing_kind]:
        return incoming, incoming_kind
    if RECORDING_STATE[incoming_kind] < RECORDING_STATE[existing_kind]:
        return existing, existing_kind
    blocks = dedupe_blocks([*existing.blocks, *incoming.blocks])
    merged = existing.model_copy(
        update={
            "blocks": blocks,
            "blocks_count": len(blocks),
            "end_ts": max(existing.end_ts, incoming.end_ts),
            "feedback": incoming.feedback or existing.feedback,
            "tokens": incoming.tokens or existing.tokens,
            "sources_used": list(dict.fromkeys([*existing.sources_used, *incoming.sources_used])),
        }
    )
    return merged, existing_kind


_SECTION = {
    "user.prompt": 0,
    "user.followup": 0,
    "user.steer": 0,
    "context": 1,
    ATTACHMENT: 2,
    STEP: 3,
    "react.tool.call": 3,
    "react.thinking": 3,
    "react.tool.result": 3,
    "hosted.file": 4,
    NOTE: 5,
    SUMMARY: 6,
    COMPLETION: 7,
    "stage.suggested_followups": 8,
}


class _Draft(NamedTuple):
    """A block before positional paths are assigned."""

    section: int
    seq: int
    block: Block


def _event_ts(event: Mapping[str, Any]) -> datetime:
    return event["occurred_at"]


def _user_block(event: Mapping[str, Any], rich: bool, turn_id: str) -> Block:
    p = event["payload"]
    kind = p.get("event_type", "prompt")
    arrived = p.get("arrived_at")
    return Block(
        type=f"user.{kind}" if rich and kind != "prompt" else "user.prompt",
        author="user",
        turn_id=turn_id,
        ts=datetime.fromisoformat(arrived).astimezone(UTC) if arrived else _event_ts(event),
        path="",
        text=p["text"],
        meta={
            "event_type": f"event.user.{kind}",
            "batch_id": p.get("batch_id") or f"{turn_id}.batch",
            "event_id": event["event_id"],
        },
    )


def _context_block(event: Mapping[str, Any], turn_id: str) -> Block:
    p = event["payload"]
    return Block(
        type=f"user.context.{p['kind']}",
        author="user",
        turn_id=turn_id,
        ts=_event_ts(event),
        path=make_ref("ev", event["event_id"], turn_id),
        text=p.get("label", ""),
        mime="application/json",
        meta={
            "event": p,
            "kind": p["kind"],
            "label": p.get("label", ""),
            "ref": p.get("ref"),
            "source": p.get("source"),
            "batch_id": p.get("batch_id") or f"{turn_id}.batch",
        },
    )


def _attachment_block(event: Mapping[str, Any], turn_id: str) -> Block:
    p = event["payload"]
    return Block(
        type=ATTACHMENT,
        author="user",
        turn_id=turn_id,
        ts=_event_ts(event),
        mime=p["mime"],
        path=make_ref("fi", f"user.attachments/{p['name']}", turn_id),
        text=p.get("extracted_text") or "",
        meta={
            "filename": p["name"],
            "mime": p["mime"],
            "size": p["size"],
            "storage_ref": p["storage_ref"],
            "has_text": bool(p.get("extracted_text")),
            "batch_id": p.get("batch_id") or f"{turn_id}.batch",
        },
    )


def _step_block(event: Mapping[str, Any], turn_id: str) -> Block:
    p = event["payload"]
    return Block(
        type=STEP,
        author="assistant",
        turn_id=turn_id,
        ts=_event_ts(event),
        path=make_ref("ev", event["event_id"], turn_id),
        text=p.get("title") or f"{p.get('tool') or p['step']}: {p.get('status') or p['phase']}",
        meta={
            "step": p["step"],
            "phase": p["phase"],
            "tool": p.get("tool"),
            "status": p.get("status") or p["phase"],
        },
    )


def _hosted_block(event: Mapping[str, Any], turn_id: str) -> Block:
    p = event["payload"]
    artifact = make_ref("fi", f"files/{p['path']}", turn_id)
    return Block(
        type=HOSTED_FILE,
        author="assistant",
        turn_id=turn_id,
        ts=_event_ts(event),
        mime=p["mime"],
        path="",
        text=f"Hosted file {p['path']} at {artifact}",
        meta={
            "kind": "file",
            "artifact_path": artifact,
            "hosted_uri": artifact,
            "filename": p["path"],
            "mime": p["mime"],
            "size": p["size"],
            "sha256": p["sha256"],
        },
    )


def _rich_block(event: Mapping[str, Any], turn_id: str, seq: int) -> Block:
    p = event["payload"]
    call = p.get("call_id") or f"call_{seq}"
    kind = p["block_type"]
    path = {
        "react.tool.call": make_ref("tc", f"{call}.call", turn_id),
        "react.tool.result": make_ref("tc", f"{call}.result", turn_id),
        "react.thinking": make_ref("ar", f"react.thinking.{seq}", turn_id),
        "stage.suggested_followups": make_ref("ar", "stage.suggested_followups", turn_id),
    }[kind]
    return Block(
        type=kind,
        author="assistant",
        turn_id=turn_id,
        ts=_event_ts(event),
        path=path,
        text=p.get("text", ""),
        meta={**p.get("meta", {}), "tool": p.get("tool"), "call_id": call},
    )


def _completion_block(event: Mapping[str, Any], turn_id: str) -> Block:
    p = event["payload"]
    error = bool(p.get("error"))
    meta: dict[str, Any] = {"error": error}
    if error:
        meta["error_type"] = p.get("error_type") or "unknown"
    return Block(
        type=COMPLETION,
        author="assistant",
        turn_id=turn_id,
        ts=_event_ts(event),
        path="",
        text=p.get("text") or (ERROR_TEXT if error else ""),
        meta=meta,
    )


def _drafts(events: Sequence[Mapping[str, Any]], rich: bool, turn_id: str) -> list[_Draft]:
    drafts: list[_Draft] = []
    summary: dict[str, Any] = {}
    summary_ts: datetime | None = None
    for seq, event in enumerate(events):
        kind = event["type"]
        block: Block | None = None
        section = 0
        if kind == "user.submission":
            block = _user_block(event, rich, turn_id)
        elif kind == "user.context":
            block, section = _context_block(event, turn_id), _SECTION["context"]
        elif kind == "user.attachment":
            block = _attachment_block(event, turn_id)
        elif kind == "chat.step":
            block = _step_block(event, turn_id)
        elif kind == "file.hosted":
            block, section = _hosted_block(event, turn_id), _SECTION["hosted.file"]
        elif kind == "react.block":
            block = _rich_block(event, turn_id, seq)
        elif kind == "react.note":
            p = event["payload"]
            block = Block(
                type=NOTE,
                author="assistant",
                turn_id=turn_id,
                ts=_event_ts(event),
                path="",
                text=p["text"],
                meta={"visibility": "internal"},
            )
        elif kind == "assistant.completion":
            block = _completion_block(event, turn_id)
        elif kind in ("react.summary", "react.anchors"):
            summary.update({k: v for k, v in event["payload"].items() if v})
            summary_ts = summary_ts or _event_ts(event)
        if block is not None:
            drafts.append(_Draft(section or _SECTION[block.type], seq, block))
    if summary and summary_ts is not None:
        block = Block(
            type=SUMMARY,
            author="assistant",
            turn_id=turn_id,
            ts=summary_ts,
            path=make_ref("ws", "working_summary", turn_id),
            text=summary.get("text", ""),
            meta={
                "scope": summary.get("scope", "turn"),
                "refs": summary.get("refs", []),
                "anchors": {
                    "phrases": summary.get("phrases", []),
                    "entities": summary.get("entities", []),
                },
            },
        )
        drafts.append(_Draft(_SECTION[SUMMARY], len(events), block))
    return drafts


def _assign_paths(blocks: list[Block], turn_id: str) -> list[Block]:
    """Positional paths: user.prompt[.N] with message ids m0..mN, completion[.N], code_exec_<i>."""
    counters: dict[str, int] = {}
    out = []
    for block in blocks:
        if block.path:
            out.append(block)
            continue
        group = "user" if block.type in USER_BLOCK_TYPES else block.type
        n = counters.get(group, 0)
        counters[group] = n + 1
        update: dict[str, Any] = {}
        if group == "user":
            name = block.type
            update["path"] = make_ref("ar", name if n == 0 else f"{name}.{n}", turn_id)
            update["meta"] = {**block.meta, "message_id": f"m{n}"}
        elif block.type == COMPLETION:
            base = "assistant.completion"
            update["path"] = make_ref("ar", base if n == 0 else f"{base}.{n}", turn_id)
        elif block.type == NOTE:
            update["path"] = make_ref("ar", f"react.note.{n}", turn_id)
        elif block.type == HOSTED_FILE:
            update["path"] = make_ref("tc", f"code_exec_{n}.result", turn_id)
        out.append(block.model_copy(update=update))
    return out


def _feedback(events: Sequence[Mapping[str, Any]]) -> Feedback | None:
    items = [e for e in events if e["type"] == "feedback"]
    if not items:
        return None
    last = items[-1]
    p = last["payload"]
    return Feedback(
        count=len(items),
        last_ts=last["occurred_at"],
        last_reaction=p.get("reaction"),
        last_origin=p.get("origin"),
        last_text=p.get("text"),
    )


def _sources(events: Sequence[Mapping[str, Any]]) -> list[str]:
    found: dict[str, None] = {}
    for event in events:
        p = event["payload"]
        if event["type"] == "communicator.event" and p.get("name") == "chat.citations":
            for item in p.get("data", {}).get("items", []):
                ref = item.get("url") or item.get("ref") if isinstance(item, dict) else None
                if ref:
                    found.setdefault(str(ref), None)
    return list(found)


def recording_kind(events: Sequence[Mapping[str, Any]]) -> RecordingKind:
    """`rich` when a rich adapter or any rich contribution recorded the turn, else `minimal`."""
    rich = any(e["adapter"] in RICH_ADAPTERS or e["type"] in RICH_EVENT_TYPES for e in events)
    return "rich" if rich else "minimal"


def build_turn_record(events: Sequence[Mapping[str, Any]]) -> TurnRecord | None:
    """The TurnRecord of one turn from its events (sorted by arrival); None while it is not closed.

    Each event is a mapping with `event_id`, `type`, `occurred_at` (aware datetime), `adapter`,
    identity fields and a decoded `payload` dict (as stored in `raw_turn_events`).
    """
    closed = [e for e in events if e["type"] == "turn.closed"]
    if not closed:
        return None
    first = events[0]
    turn_id = first["turn_id"]
    kind = recording_kind(events)
    rich = kind == "rich"
    drafts = _drafts(events, rich, turn_id)
    completions = [d for d in drafts if d.block.type == COMPLETION]
    if not rich and len(completions) > 1:
        drafts = [d for d in drafts if d.block.type != COMPLETION or d is completions[-1]]
    if not completions:
        close = closed[0]["payload"]
        block = Block(
            type=COMPLETION,
            author="assistant",
            turn_id=turn_id,
            ts=closed[0]["occurred_at"],
            path="",
            text=ERROR_TEXT,
            meta={"error": True, "error_type": close.get("error_type") or "missing_completion"},
        )
        drafts.append(_Draft(_SECTION[COMPLETION], len(events), block))
    if not any(d.block.type in USER_BLOCK_TYPES for d in drafts):
        block = Block(
            type="user.prompt",
            author="user",
            turn_id=turn_id,
            ts=events[0]["occurred_at"],
            path="",
            meta={"event_type": "event.user.prompt", "batch_id": f"{turn_id}.batch"},
        )
        drafts.append(_Draft(_SECTION["user.prompt"], -1, block))
    drafts.sort(key=lambda d: (d.section, d.block.ts if d.section == 0 else d.seq, d.seq))
    blocks = _assign_paths(dedupe_blocks(d.block for d in drafts), turn_id)
    started = [e["occurred_at"] for e in events if e["type"] == "turn.started"]
    started_at = min(started) if started else min(e["occurred_at"] for e in events)
    ended_at = closed[0]["occurred_at"]
    final = [b for b in blocks if b.type == COMPLETION][-1]
    tokens_in = [e["payload"].get("tokens_in") for e in events if e["type"] == COMPLETION]
    tokens_out = [e["payload"].get("tokens_out") for e in events if e["type"] == COMPLETION]
    tokens = None
    if any(t is not None for t in tokens_in + tokens_out):
        tokens = {"in": sum(t or 0 for t in tokens_in), "out": sum(t or 0 for t in tokens_out)}
    log = TurnLog(
        turn_id=turn_id,
        ts=started_at,
        end_ts=ended_at,
        blocks=blocks,
        sources_used=_sources(events),
        blocks_count=len(blocks),
        tokens=tokens,
        feedback=_feedback(events),
    )
    return TurnRecord(
        tenant=first["tenant"],
        app=first["app"],
        agent=first["agent"],
        user_id=first["user_id"],
        conversation_id=first["conversation_id"],
        turn_id=turn_id,
        adapter="react"
        if rich and any(e["adapter"] == "react" for e in events)
        else closed[0]["adapter"],
        recording_kind=kind,
        error=bool(final.meta.get("error")),
        started_at=started_at,
        ended_at=ended_at,
        last_event_at=max(e["occurred_at"] for e in events),
        source_event_ids=[e["event_id"] for e in events],
        log=log,
    )
