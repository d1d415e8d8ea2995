"""Snippets and known-turn views from TurnLog payloads stored in the turns index.

A hit's snippets come from its TurnLog blocks by target. When the TurnLog is missing (not yet
indexed, or purged), the matched role row's own text becomes one fallback snippet and the response
carries a warning. Turn documents are read with a search (ids + identity + expiry filter), never a
plain get, so the identity boundary holds here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from elasticsearch import Elasticsearch

from ctxdb.contract.identity import Principal
from ctxdb.contract.refs import RefError, qualify
from ctxdb.index.mappings import turn_doc_id
from ctxdb.record.titles import typed_text
from ctxdb.record.turns import TurnStatus, unanswered
from ctxdb.search.arms import RowHit
from ctxdb.search.filters import turn_filter
from ctxdb.search.models import (
    CUT_OFF,
    ERROR_ANSWER,
    FileCard,
    Message,
    Snippet,
    Step,
    StepKind,
    Target,
    TurnView,
)
from ctxdb.text import words

MAX_SNIPPETS_PER_TARGET = 3

USER_TYPES = ("user.prompt", "user.followup", "user.steer")
TARGET_TYPES: dict[Target, tuple[str, ...]] = {
    "user": USER_TYPES,
    "assistant": ("assistant.completion",),
    "summary": ("conv.working.summary",),
    "notes": ("react.note",),
    "attachment": ("user.attachment",),
    "steps": ("assistant.step",),
}


def block_target(block: dict[str, Any]) -> Target | None:
    """Which snippet target a TurnLog block belongs to (by its type prefix), if any."""
    kind = str(block.get("type") or "")
    for target, prefixes in TARGET_TYPES.items():
        if any(kind == p or kind.startswith(p + ".") for p in prefixes):
            return target
    return None


def clip(text: str, query: str, chars: int) -> str:
    """At most `chars` characters of `text`, centred on the first query word it contains."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    lowered = text.lower()
    hits = [i for w in words(query) if len(w) >= 3 and (i := lowered.find(w)) >= 0]
    start = max(0, min(hits) - chars // 4) if hits else 0
    start = min(start, len(text) - chars)
    piece = text[start : start + chars]
    return ("…" if start > 0 else "") + piece + ("…" if start + chars < len(text) else "")


def snippets_from_payload(
    payload: dict[str, Any], targets: Sequence[Target], query: str, chars: int
) -> list[Snippet]:
    """Snippets for `targets` from the TurnLog blocks, in block order, a few per target (steps:
    those matching the most query words; a user message: what was typed, host wrappers out)."""
    counts: dict[Target, int] = {}
    out: list[Snippet] = []
    blocks = payload.get("blocks") or []
    steps = {id(b): step_text(b, query) for b in blocks if block_target(b) == "steps"}
    best = max((m for _, m in steps.values()), default=0)
    for block in blocks:
        target = block_target(block)
        text = block.get("text")
        if target == "steps":
            text, matched = steps[id(block)]
            text = text if best and matched == best else None
        elif target == "user" and isinstance(text, str):
            text = typed_text(text)  # what was typed, without the host's wrappers
        if target is None or target not in targets or not isinstance(text, str) or not text.strip():
            continue
        if counts.get(target, 0) >= MAX_SNIPPETS_PER_TARGET:
            continue
        counts[target] = counts.get(target, 0) + 1
        out.append(
            Snippet(
                target=target,
                text=clip(text, query, chars),
                path=block.get("path"),
                ts=block.get("ts"),
            )
        )
    return out


def step_text(block: dict[str, Any], query: str) -> tuple[str, int]:
    """A step's snippet text (`tool | title | input`) and how many query words it holds (0 for
    a step without a recorded input): a turn shows the commands that matched best."""
    meta = block.get("meta") or {}
    if not meta.get("input"):
        return "", 0
    text = f"{meta.get('tool') or ''} | {block.get('text') or ''} | {meta['input']}"
    lowered = text.lower()
    return text, len({w for w in words(query or "") if len(w) >= 3 and w in lowered})


def fallback_snippet(row: RowHit, query: str, chars: int) -> Snippet:
    """One snippet from the matched role row when the TurnLog is missing."""
    return Snippet(
        target=row.target,
        text=clip(row.text, query, chars),
        path=f"conv:ar:{row.turn_id}.react.turn.index",
        ts=row.ts,
        source="retrieval_row",
    )


def fetch_turns(
    client: Elasticsearch,
    alias: str,
    principal: Principal,
    keys: Iterable[tuple[str, str]],
    now: datetime,
    *,
    routing: str | None = None,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Live turn documents of the principal for (conversation, turn) keys (`routing`: the
    principal's routing key on an index routed by user)."""
    ids = [turn_doc_id(conv, turn) for conv, turn in dict.fromkeys(keys)]
    if not ids:
        return {}
    response = client.search(
        index=alias,
        query={"bool": {"filter": [{"ids": {"values": ids}}, *turn_filter(principal, now)]}},
        size=len(ids),
        routing=routing,
    )
    return {
        (h["_source"]["conversation_id"], h["_source"]["turn_id"]): h["_source"]
        for h in response["hits"]["hits"]
    }


def pullable_ref(value: object, conversation_id: str) -> str | None:
    """A `conv:fi:` ref qualified with its conversation (what `pull` accepts), else None."""
    if not isinstance(value, str) or not value.startswith("conv:fi:"):
        return None
    try:
        return qualify(value, conversation_id)
    except RefError:
        return None


def _card(block: dict[str, Any], conversation_id: str) -> FileCard:
    meta = block.get("meta") or {}
    candidates = [
        meta.get("storage_ref"),
        meta.get("ref"),
        meta.get("artifact_path"),
        block.get("path"),
    ]
    ref = next((r for c in candidates if (r := pullable_ref(c, conversation_id))), None)
    path = meta.get("artifact_path") or block.get("path")
    named = ref or path
    return FileCard(
        ref=ref,
        path=path,
        filename=meta.get("filename") or (named.rsplit("/", 1)[-1] if named else None),
        mime=block.get("mime") or meta.get("mime"),
        size=meta.get("size"),
        hosted_uri=meta.get("hosted_uri"),
        text=block.get("text") if isinstance(block.get("text"), str) else None,
    )


def _is_hosted_file(block: dict[str, Any]) -> bool:
    meta = block.get("meta") or {}
    return block.get("type") == "react.tool.result" and (
        meta.get("kind") == "file" or bool(meta.get("hosted_uri"))
    )


STEP_KINDS: dict[str, StepKind] = {
    "assistant.step": "step",
    "react.tool.call": "tool_call",
    "react.tool.result": "tool_result",
    "react.thinking": "thinking",
}


def _step(block: dict[str, Any]) -> Step:
    meta = block.get("meta") or {}
    text = block.get("text")
    return Step(
        kind=STEP_KINDS[block["type"]],
        text=text if isinstance(text, str) else "",
        tool=meta.get("tool"),
        status=meta.get("status"),
        call_id=meta.get("call_id"),
        input=meta.get("input"),
        output=meta.get("output"),
        ts=block.get("ts"),
        path=block.get("path"),
    )


def _no_answer(block: dict[str, Any]) -> bool:
    """The empty completion of a turn cancelled before any answer: no message to show."""
    meta = block.get("meta") or {}
    return block.get("type") == "assistant.completion" and bool(
        meta.get("cancelled") and not block.get("text")
    )


def _legacy_status(blocks: list[dict[str, Any]]) -> TurnStatus:
    """The status of a turn indexed before TurnLogs carried one, read off its blocks."""
    if any(_no_answer(b) for b in blocks):
        return "cancelled"
    final = [b for b in blocks if b.get("type") == "assistant.completion"][-1:]
    return "error" if final and (final[0].get("meta") or {}).get("error") else "ok"


def _answer_kind(target: str, meta: dict[str, Any], doc: dict[str, Any]) -> str | None:
    """An answer's `event_type`: the error the turn failed with, or what a turn the user
    interrupted had written so far; None for an ordinary answer (or a user message)."""
    if target != "assistant":
        return None
    if meta.get("error"):
        return ERROR_ANSWER
    return CUT_OFF if doc.get("status") == "cancelled" else None


def turn_view(doc: dict[str, Any]) -> TurnView:
    """Reconstruct a turn (messages, steps, attachment cards, hosted files, citations) from its
    TurnLog."""
    payload = doc.get("payload") or {}
    blocks = payload.get("blocks") or []
    messages: list[Message] = []
    steps: list[Step] = []
    attachments: list[FileCard] = []
    files: list[FileCard] = []
    summary = None
    for block in blocks:
        kind = block.get("type")
        meta = block.get("meta") or {}
        target = block_target(block)
        if unanswered(block):
            continue
        if target in ("user", "assistant") and isinstance(block.get("text"), str):
            messages.append(
                Message(
                    role=target,
                    text=block["text"],
                    ts=block.get("ts"),
                    path=block.get("path"),
                    event_type=meta.get("event_type") or _answer_kind(target, meta, doc),
                )
            )
        elif kind == "user.attachment.meta":
            attachments.append(_card(block, doc["conversation_id"]))
        elif _is_hosted_file(block):
            files.append(_card(block, doc["conversation_id"]))
        elif kind in STEP_KINDS:
            steps.append(_step(block))
        elif target == "summary":
            summary = block.get("text")
    citations = [
        c if isinstance(c, dict) else {"source": c} for c in payload.get("sources_used") or []
    ]
    return TurnView(
        conversation_id=doc["conversation_id"],
        turn_id=doc["turn_id"],
        title=doc.get("title"),
        ordinal=doc.get("ordinal"),
        started_at=doc.get("started_at"),
        ended_at=doc.get("ended_at"),
        error=bool(doc.get("error")),
        status=doc.get("status") or _legacy_status(blocks),
        error_type=doc.get("error_type"),
        messages=messages,
        steps=steps,
        attachments=attachments,
        files=files,
        citations=citations,
        summary=summary,
    )
