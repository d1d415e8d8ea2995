"""TurnLogs: the reloadable record of one closed turn, built from that turn's raw events.

Block types, order and `path` refs follow the KDCube reference (docs/tables.md, turn_logs):
user prompts (m0..mN) -> context events -> attachment cards -> steps and rich activity ->
hosted files -> notes -> working summary -> completion(s) -> suggested follow-ups.
Blocks are de-duplicated by a per-type fingerprint: a re-sent or late event never doubles a block.

Derivation (`ctxdb.record.records`) builds each turn as plain dicts (`Turn`, blocks already in
their JSON shape, times as epoch microseconds beside their ISO text) and serializes them with
pydantic-core's encoder; the pydantic models below are the TurnLog contract for readers
(`parse_turn_log`) and for `records.build_turn_record`, which converts the same build.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any, Literal, NamedTuple

import msgspec
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from ctxdb.contract.events import INT64_MAX
from ctxdb.contract.refs import make_ref
from ctxdb.record.superseding import closing_row, current

RecordingKind = Literal["none", "minimal", "rich"]
TurnStatus = Literal["ok", "cancelled", "error"]
"""How a turn closed: answered, stopped by the user (or the host) or failed."""
RECORDING_STATE: dict[str, int] = {"none": 0, "minimal": 1, "rich": 2}
ERROR_TEXT = "An error occurred."

USER_BLOCK_TYPES = frozenset({"user.prompt", "user.followup", "user.steer"})
COMPLETION = "assistant.completion"
NO_ANSWER = "no_answer"
"""The close's `error_type` when a capture host saw the turn end without any answer text."""
SUMMARY = "conv.working.summary"
NOTE = "react.note"
ATTACHMENT = "user.attachment.meta"
HOSTED_FILE = "react.tool.result"
STEP = "assistant.step"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ENCODE = msgspec.json.Encoder(enc_hook=str, order="sorted").encode
"""Canonical bytes of a block's meta (keys sorted), for its fingerprint."""
PLAIN = "text/plain"


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
    status: TurnStatus = "ok"
    error_type: str | None = None
    model: str | None = None
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


def iso(dt: datetime) -> str:
    """A UTC time as pydantic serializes it (no fraction when the microseconds are 0)."""
    return dt.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


def micros(dt: datetime) -> int:
    """Microseconds since the epoch of an aware time."""
    return (dt - EPOCH) // timedelta(microseconds=1)


def from_micros(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def _key(type_: str, text: Any, meta: Mapping[str, Any], ts: int, path: str) -> tuple[Any, ...]:
    """Per-type identity of a block, independent of its position (paths and message ids)."""
    if type_ in USER_BLOCK_TYPES:
        return (type_, text, meta.get("event_type"), meta.get("batch_id"), ts)
    if type_ == ATTACHMENT:
        return (type_, path)
    if type_ == HOSTED_FILE and meta.get("kind") == "file":
        return (type_, meta.get("artifact_path"), meta.get("sha256"))
    if type_ == STEP:
        return (type_, meta.get("step"), meta.get("phase"), meta.get("status"))
    if type_ in (COMPLETION, SUMMARY, NOTE):
        return (type_, text, meta.get("error", False))
    return (type_, text, _ENCODE(meta))


class Section(IntEnum):
    """Where a block sits in its TurnLog, in the reference's order (the module docstring)."""

    PROMPTS = 0
    CONTEXT = 1
    ATTACHMENTS = 2
    ACTIVITY = 3
    """Steps and rich activity: tool calls and results, thinking."""
    HOSTED_FILES = 4
    NOTES = 5
    SUMMARY = 6
    COMPLETIONS = 7
    FOLLOWUPS = 8


_REACT_SECTION = {
    "react.tool.call": Section.ACTIVITY,
    "react.thinking": Section.ACTIVITY,
    "react.tool.result": Section.ACTIVITY,
    "stage.suggested_followups": Section.FOLLOWUPS,
}
"""The section of each `react.block` block type."""


@dataclass(slots=True)
class Turn:
    """One closed turn as derivation builds it: identity, accounting and the TurnLog's blocks as
    JSON-ready dicts (`block_ts`: each block's time in epoch microseconds)."""

    tenant: str
    app: str
    agent: str
    user_id: str
    conversation_id: str
    turn_id: str
    adapter: str
    recording_kind: str
    error: bool
    status: str
    error_type: str | None
    model: str | None
    project: str | None
    started_at: int
    ended_at: int
    last_event_at: int
    started_iso: str
    ended_iso: str
    source_event_ids: list[str]
    blocks: list[dict[str, Any]]
    block_ts: list[int]
    sources_used: list[str]
    tokens: dict[str, int] | None
    feedback: dict[str, Any] | None

    @property
    def recording_state(self) -> int:
        return RECORDING_STATE[self.recording_kind]

    def log_dict(self) -> dict[str, Any]:
        """The TurnLog in the field order and shapes of the `TurnLog` model."""
        return {
            "turn_id": self.turn_id,
            "ts": self.started_iso,
            "end_ts": self.ended_iso,
            "blocks": self.blocks,
            "sources_used": self.sources_used,
            "blocks_count": len(self.blocks),
            "tokens": self.tokens,
            "feedback": self.feedback,
        }

    def log_json(self) -> str:
        """The `turn_logs.payload` text (byte for byte `TurnLog.model_dump_json()`)."""
        return to_json(self.log_dict()).decode()

    def to_record(self) -> TurnRecord:
        """The same turn as the pydantic `TurnRecord`."""
        return TurnRecord(
            tenant=self.tenant,
            app=self.app,
            agent=self.agent,
            user_id=self.user_id,
            conversation_id=self.conversation_id,
            turn_id=self.turn_id,
            adapter=self.adapter,
            recording_kind=self.recording_kind,  # type: ignore[arg-type]
            error=self.error,
            status=self.status,  # type: ignore[arg-type]
            error_type=self.error_type,
            model=self.model,
            started_at=from_micros(self.started_at),
            ended_at=from_micros(self.ended_at),
            last_event_at=from_micros(self.last_event_at),
            source_event_ids=self.source_event_ids,
            log=parse_turn_log(self.log_json()),
        )


_SUSPECT = ("\\", "//", "..")


def _path_ok(path: str, family: str, turn_prefix: str) -> str:
    """`make_ref(family, path, turn_id)` for a turn id already checked (`turn_prefix` is
    `turn_<turn_id>.`): only a path that might be unsafe goes through `make_ref`'s checks."""
    if not path or path[0] == "/" or path[-1] == "/" or any(s in path for s in _SUSPECT):
        return make_ref(family, path, turn_prefix[5:-1])
    return f"conv:{family}:{turn_prefix}{path}"


def _block(
    type_: str, author: str, turn_id: str, ts: str, path: str, text: Any, meta: dict, mime: str
) -> dict[str, Any]:
    return {
        "type": type_,
        "author": author,
        "turn_id": turn_id,
        "ts": ts,
        "mime": mime,
        "path": path,
        "text": text,
        "meta": meta,
    }


class Draft(NamedTuple):
    """A block before dedupe and paths; drafts sort by (section, order, seq)."""

    section: Section
    order: int
    """Its place within the section: its event's seq, or its arrival time for a prompt."""
    seq: int
    """Its event's index among all the turn's events (-1: made up, not from an event)."""
    ts: int
    """Its time in epoch microseconds."""
    block: dict[str, Any]


@dataclass(slots=True)
class _Drafting:
    """One turn's drafting state: its identity, and what its events have built so far."""

    turn_id: str
    tp: str
    rich: bool
    tokens_in: list[Any] = field(default_factory=list)
    tokens_out: list[Any] = field(default_factory=list)
    model: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    summary_at: Mapping[str, Any] | None = None

    def batch(self, p: Mapping[str, Any]) -> str:
        """The event's batch id, or the turn's default batch."""
        return p.get("batch_id") or f"{self.turn_id}.batch"


def _placed(section: Section, event: Mapping[str, Any], block: dict[str, Any]) -> Draft:
    """The draft of a block that sorts by its event's position within its section."""
    seq = event["seq"]
    return Draft(section, seq, seq, event["ts"], block)


def _submission(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    """A user prompt, follow-up or steer, timed by its arrival when the adapter recorded one."""
    p = event["payload"]
    sub = p.get("event_type", "prompt")
    ts, at = event["ts"], event["iso"]
    arrived = p.get("arrived_at")
    if arrived:
        moment = datetime.fromisoformat(arrived).astimezone(UTC)
        ts, at = micros(moment), iso(moment)
    meta = {
        "event_type": f"event.user.{sub}",
        "batch_id": d.batch(p),
        "event_id": event["event_id"],
    }
    type_ = f"user.{sub}" if d.rich and sub != "prompt" else "user.prompt"
    block = _block(type_, "user", d.turn_id, at, "", p["text"], meta, PLAIN)
    return Draft(Section.PROMPTS, ts, event["seq"], ts, block)


def _context(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    p = event["payload"]
    meta = {
        "event": p,
        "kind": p["kind"],
        "label": p.get("label", ""),
        "ref": p.get("ref"),
        "source": p.get("source"),
        "batch_id": d.batch(p),
    }
    path = _path_ok(event["event_id"], "ev", d.tp)
    type_, label = f"user.context.{p['kind']}", p.get("label", "")
    block = _block(type_, "user", d.turn_id, event["iso"], path, label, meta, "application/json")
    return _placed(Section.CONTEXT, event, block)


def _attachment(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    p = event["payload"]
    meta = {
        "filename": p["name"],
        "mime": p["mime"],
        "size": p["size"],
        "storage_ref": p["storage_ref"],
        "has_text": bool(p.get("extracted_text")),
        "batch_id": d.batch(p),
    }
    path = _path_ok(f"user.attachments/{p['name']}", "fi", d.tp)
    text = p.get("extracted_text") or ""
    block = _block(ATTACHMENT, "user", d.turn_id, event["iso"], path, text, meta, p["mime"])
    return _placed(Section.ATTACHMENTS, event, block)


def _step(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    p = event["payload"]
    meta = {
        "step": p["step"],
        "phase": p["phase"],
        "tool": p.get("tool"),
        "status": p.get("status") or p["phase"],
        **{k: p[k] for k in ("input", "output") if p.get(k)},
    }
    title = p.get("title") or f"{p.get('tool') or p['step']}: {p.get('status') or p['phase']}"
    path = _path_ok(event["event_id"], "ev", d.tp)
    block = _block(STEP, "assistant", d.turn_id, event["iso"], path, title, meta, PLAIN)
    return _placed(Section.ACTIVITY, event, block)


def _hosted_file(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    p = event["payload"]
    artifact = _path_ok(f"files/{p['path']}", "fi", d.tp)
    meta = {
        "kind": "file",
        "artifact_path": artifact,
        "hosted_uri": artifact,
        "filename": p["path"],
        "mime": p["mime"],
        "size": p["size"],
        "sha256": p["sha256"],
    }
    text = f"Hosted file {p['path']} at {artifact}"
    block = _block(HOSTED_FILE, "assistant", d.turn_id, event["iso"], "", text, meta, p["mime"])
    return _placed(Section.HOSTED_FILES, event, block)


def _react_path(block_type: str, call: str, seq: int, tp: str) -> str:
    """The path of a ReAct block: tool calls and results by call id, the rest by type."""
    if block_type == "react.tool.call":
        return _path_ok(f"{call}.call", "tc", tp)
    if block_type == "react.tool.result":
        return _path_ok(f"{call}.result", "tc", tp)
    if block_type == "react.thinking":
        return f"conv:ar:{tp}react.thinking.{seq}"
    if block_type == "stage.suggested_followups":
        return f"conv:ar:{tp}stage.suggested_followups"
    raise KeyError(block_type)


def _react_block(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    p = event["payload"]
    call = p.get("call_id") or f"call_{event['seq']}"
    block_type = p["block_type"]
    path = _react_path(block_type, call, event["seq"], d.tp)
    meta = {**p.get("meta", {}), "tool": p.get("tool"), "call_id": call}
    text = p.get("text", "")
    block = _block(block_type, "assistant", d.turn_id, event["iso"], path, text, meta, PLAIN)
    return _placed(_REACT_SECTION[block_type], event, block)


def _note(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    meta = {"visibility": "internal"}
    text = event["payload"]["text"]
    block = _block(NOTE, "assistant", d.turn_id, event["iso"], "", text, meta, PLAIN)
    return _placed(Section.NOTES, event, block)


def _completion(d: _Drafting, event: Mapping[str, Any]) -> Draft:
    """An answer (or the error that replaced it); its token counts and model are kept for the
    turn (the model of the last completion naming one)."""
    p = event["payload"]
    d.tokens_in.append(p.get("tokens_in"))
    d.tokens_out.append(p.get("tokens_out"))
    d.model = p.get("model") or d.model
    error = bool(p.get("error"))
    meta: dict[str, Any] = {"error": error}
    if error:
        meta["error_type"] = p.get("error_type") or "unknown"
    text = p.get("text") or (ERROR_TEXT if error else "")
    block = _block(COMPLETION, "assistant", d.turn_id, event["iso"], "", text, meta, PLAIN)
    return _placed(Section.COMPLETIONS, event, block)


def _summary_part(d: _Drafting, event: Mapping[str, Any]) -> None:
    """A summary or anchors event: its non-empty fields join the turn's one working summary,
    timed by the first such event."""
    d.summary.update({k: v for k, v in event["payload"].items() if v})
    d.summary_at = d.summary_at or event


def _summary(d: _Drafting, at: Mapping[str, Any], n: int) -> Draft:
    """The working summary block, placed after all `n` events of the turn."""
    s = d.summary
    meta = {
        "scope": s.get("scope", "turn"),
        "refs": s.get("refs", []),
        "anchors": {"phrases": s.get("phrases", []), "entities": s.get("entities", [])},
    }
    path = f"conv:ws:{d.tp}working_summary"
    block = _block(SUMMARY, "assistant", d.turn_id, at["iso"], path, s.get("text", ""), meta, PLAIN)
    return Draft(Section.SUMMARY, n, n, at["ts"], block)


_BUILDERS: dict[str, Callable[[_Drafting, Mapping[str, Any]], Draft | None]] = {
    "user.submission": _submission,
    "user.context": _context,
    "user.attachment": _attachment,
    "chat.step": _step,
    "file.hosted": _hosted_file,
    "react.block": _react_block,
    "react.note": _note,
    "assistant.completion": _completion,
    "react.summary": _summary_part,
    "react.anchors": _summary_part,
}
"""The builder of each block-making event type (other types make no block)."""
BLOCK_EVENT_TYPES = list(_BUILDERS)
"""The event types that make (or add to) a TurnLog block."""


def _drafts(
    events: Sequence[Mapping[str, Any]], rich: bool, turn_id: str, tp: str, n: int
) -> tuple[list[Draft], _Drafting]:
    """The draft of every block-making event of one turn (of `n` events), and the drafting
    state (the completions' token counts and model)."""
    d = _Drafting(turn_id, tp, rich)
    drafts = []
    for event in events:
        build = _BUILDERS.get(event["type"])
        draft = build(d, event) if build is not None else None
        if draft is not None:
            drafts.append(draft)
    if d.summary and d.summary_at is not None:
        drafts.append(_summary(d, d.summary_at, n))
    return drafts, d


def _dedupe(drafts: Sequence[Draft]) -> list[Draft]:
    """The first draft of every fingerprint, in order."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for draft in drafts:
        block = draft.block
        key = _key(block["type"], block["text"], block["meta"], draft.ts, block["path"])
        if key not in seen:
            seen.add(key)
            kept.append(draft)
    return kept


def _assign_paths(blocks: list[dict[str, Any]], tp: str) -> None:
    """Positional paths: user.prompt[.N] with message ids m0..mN, completion[.N], code_exec_<i>."""
    counters: dict[str, int] = {}
    for block in blocks:
        if block["path"]:
            continue
        kind = block["type"]
        group = "user" if kind in USER_BLOCK_TYPES else kind
        n = counters.get(group, 0)
        counters[group] = n + 1
        if group == "user":
            block["path"] = f"conv:ar:{tp}{kind if n == 0 else f'{kind}.{n}'}"
            block["meta"] = {**block["meta"], "message_id": f"m{n}"}
        elif kind == COMPLETION:
            block["path"] = f"conv:ar:{tp}{COMPLETION if n == 0 else f'{COMPLETION}.{n}'}"
        elif kind == NOTE:
            block["path"] = f"conv:ar:{tp}react.note.{n}"
        elif kind == HOSTED_FILE:
            block["path"] = f"conv:tc:{tp}code_exec_{n}.result"


def _feedback(facts: Mapping[str, Any], iso: Sequence[str], payloads: Sequence[Any]) -> Any:
    if not facts["feedback_count"]:
        return None
    row = facts["feedback_last"]
    p = payloads[row]
    return {
        "count": facts["feedback_count"],
        "last_ts": iso[row],
        "last_reaction": p.get("reaction"),
        "last_origin": p.get("origin"),
        "last_text": p.get("text"),
    }


def _sources(rows: Sequence[int], payloads: Sequence[Any]) -> list[str]:
    found: dict[str, None] = {}
    for row in rows:
        p = payloads[row]
        if p.get("name") == "chat.citations":
            for item in p.get("data", {}).get("items", []):
                ref = item.get("url") or item.get("ref") if isinstance(item, dict) else None
                if ref:
                    found.setdefault(str(ref), None)
    return list(found)


def _one_answer(drafts: list[Draft]) -> list[Draft]:
    """A minimal turn answered more than once keeps only its last completion."""
    completions = [d for d in drafts if d.section == Section.COMPLETIONS]
    if len(completions) <= 1:
        return drafts
    last = completions[-1]
    return [d for d in drafts if d.section != Section.COMPLETIONS or d is last]


def unanswered(block: Mapping[str, Any]) -> bool:
    """Whether a block is a completion with no answer to show or index: the empty one of a turn
    cancelled before any answer, or of a turn its agent ended without text (`NO_ANSWER`)."""
    meta = block.get("meta") or {}
    quiet = meta.get("cancelled") or meta.get("error_type") == NO_ANSWER
    return block.get("type") == COMPLETION and not block.get("text") and bool(quiet)


def _missing_completion(
    turn_id: str, closing: Mapping[str, Any], at: str, ts: int, n: int
) -> Draft:
    """The completion of a turn closed without one (`closing`: the close event's payload): an
    error, or no answer at all when the user cancelled the turn."""
    error_type = closing.get("error_type") or "missing_completion"
    cancelled = closing.get("status") == "cancelled"
    meta = {"error": not cancelled, "error_type": error_type}
    if cancelled:  # stopped by the user: no answer, and none invented
        meta["cancelled"] = True
    # a capture host saw the agent end its turn without text: an error, and no invented text
    text = "" if cancelled or error_type == NO_ANSWER else ERROR_TEXT
    block = _block(COMPLETION, "assistant", turn_id, at, "", text, meta, PLAIN)
    return Draft(Section.COMPLETIONS, n, n, ts, block)


def _missing_prompt(turn_id: str, at: str, ts: int) -> Draft:
    """An empty prompt for a turn whose prompt was never recorded, first in the turn."""
    meta = {"event_type": "event.user.prompt", "batch_id": f"{turn_id}.batch"}
    block = _block("user.prompt", "user", turn_id, at, "", "", meta, PLAIN)
    return Draft(Section.PROMPTS, ts, -1, ts, block)


def close_status(closing: Mapping[str, Any], final: Mapping[str, Any]) -> tuple[str, str | None]:
    """The turn's `status` and `error_type` from its close event's payload and its final
    completion block: cancelled when the close says so (an answer written before the stop
    kept), else error when the answer is an error or the close reports one, else ok."""
    if closing.get("status") == "cancelled":
        return "cancelled", closing.get("error_type")
    if final["meta"].get("error"):
        return "error", final["meta"].get("error_type") or closing.get("error_type")
    if closing.get("status") == "error":
        return "error", closing.get("error_type")
    return "ok", None


def _tokens(tokens_in: list[Any], tokens_out: list[Any]) -> dict[str, int] | None:
    """The turn's token totals, or None when no completion reported a count."""
    if all(t is None for t in tokens_in + tokens_out):
        return None
    return {"in": _token_sum(tokens_in), "out": _token_sum(tokens_out)}


def assemble_turn(
    events: Sequence[Mapping[str, Any]],
    facts: Mapping[str, Any],
    columns: Mapping[str, Sequence[Any]],
    payloads: Sequence[Any],
) -> Turn:
    """The `Turn` of one closed turn.

    `events`: its block-making events in arrival order, each a dict with `event_id`, `type`, the
    decoded `payload`, `ts` (epoch microseconds), `iso` (the same time as TurnLog JSON writes it)
    and `seq` (index among all the turn's events). `facts`: the turn's aggregates
    (`ctxdb.record.records`; `closes`: its `turn.closed` rows), whose row numbers index
    `columns` (identity, `adapter`, `ts`, `iso` of every event) and `payloads`.
    """
    first, started = facts["first"], facts["started"]
    closed = closing_row(facts["closes"], payloads)
    turn_id = columns["turn_id"][first]
    make_ref("ar", "x", turn_id)  # checks the turn id once for every path below
    tp = f"turn_{turn_id}."
    rich = facts["rich"]
    n = facts["n"]
    ts, iso = columns["ts"], columns["iso"]
    drafts, drafted = _drafts(current(events), rich, turn_id, tp, n)
    drafts = _one_answer(drafts) if not rich else drafts
    if not any(d.section == Section.COMPLETIONS for d in drafts):
        drafts.append(_missing_completion(turn_id, payloads[closed], iso[closed], ts[closed], n))
    if not any(d.section == Section.PROMPTS for d in drafts):
        drafts.append(_missing_prompt(turn_id, iso[first], ts[first]))
    drafts.sort(key=lambda d: (d.section, d.order, d.seq))
    kept = _dedupe(drafts)
    blocks = [d.block for d in kept]
    _assign_paths(blocks, tp)
    final = [b for b in blocks if b["type"] == COMPLETION][-1]
    status, error_type = close_status(payloads[closed], final)
    return Turn(
        tenant=columns["tenant"][first],
        app=columns["app"][first],
        agent=columns["agent"][first],
        user_id=columns["user_id"][first],
        conversation_id=columns["conversation_id"][first],
        turn_id=turn_id,
        adapter="react" if rich and facts["react"] else columns["adapter"][closed],
        recording_kind="rich" if rich else "minimal",
        error=bool(final["meta"].get("error")),
        status=status,
        error_type=error_type,
        model=drafted.model,
        project=payloads[started].get("project"),
        started_at=ts[started],
        ended_at=ts[closed],
        last_event_at=facts["last_ts"],
        started_iso=iso[started],
        ended_iso=iso[closed],
        source_event_ids=facts["event_ids"],
        blocks=blocks,
        block_ts=[d.ts for d in kept],
        sources_used=_sources(facts["communicator"], payloads),
        tokens=_tokens(drafted.tokens_in, drafted.tokens_out),
        feedback=_feedback(facts, iso, payloads),
    )


IDENTITY = ("tenant", "app", "agent", "user_id", "conversation_id", "turn_id")


def _token_sum(counts: list[int | None]) -> int:
    """A turn's token count, saturated at the Int64 column's bound: each count is within it (the
    contract's bound), but several completions of one turn may add up past it."""
    return min(sum(t or 0 for t in counts), INT64_MAX)
