"""Canonical `conv:` references: parse, format and qualify them (grammar in docs/events.md).

    conv:<family>:[conv_<conversation_id>.][turn_<turn_id>.]<path>
    conv:turn:[conv_<conversation_id>.]<turn_id>
    conv:conversation:<conversation_id>

Families: fi (file bytes and workspace objects), ar (conversation records), tc (tool records),
so (source rows), ws (working summaries), su (summary/search records), ev (accepted events).
Conversation and turn ids never contain `.`, `/` or `\\`, so the first `.` ends each segment.
"""

from __future__ import annotations

import re
from typing import Literal, TypeGuard

from pydantic import BaseModel, ConfigDict

FAMILIES = ("fi", "ar", "tc", "so", "ws", "su", "ev")
Family = Literal["fi", "ar", "tc", "so", "ws", "su", "ev", "turn", "conversation"]
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}$")


class RefError(ValueError):
    """A string that is not a well-formed `conv:` reference."""


class Ref(BaseModel):
    """One parsed reference; `str(ref)` formats it back exactly."""

    model_config = ConfigDict(frozen=True)

    family: Family
    conversation_id: str | None = None
    turn_id: str | None = None
    path: str = ""

    def __str__(self) -> str:
        return format_ref(self)


def _known_family(family: str) -> TypeGuard[Family]:
    return family in FAMILIES or family in ("turn", "conversation")


def _check_id(kind: str, value: str, ref: str) -> str:
    if not _ID.match(value):
        raise RefError(f"invalid {kind} id {value!r} in ref {ref!r}")
    return value


_SEGMENTS = {
    "conversation": ("conv_", "an owner segment but no body"),
    "turn": ("turn_", "a turn segment but no path"),
}


def _leading_id(
    kind: Literal["conversation", "turn"], body: str, ref: str
) -> tuple[str | None, str]:
    """The id of the `conv_<id>.` (kind conversation) or `turn_<id>.` (kind turn) segment `body`
    starts with, None without one; and the rest of `body`."""
    prefix, missing = _SEGMENTS[kind]
    if not body.startswith(prefix):
        return None, body
    head, dot, rest = body.partition(".")
    if not dot:
        raise RefError(f"ref {ref!r} has {missing}")
    return _check_id(kind, head.removeprefix(prefix), ref), rest


def _check_path(path: str, ref: str) -> str:
    if not path:
        raise RefError(f"ref {ref!r} has an empty path")
    if "\\" in path or path.startswith("/") or any(seg in ("", "..") for seg in path.split("/")):
        raise RefError(f"ref {ref!r} has an unsafe path {path!r}")
    return path


def parse_ref(ref: str) -> Ref:
    """Parse a `conv:` reference or raise `RefError` saying what is wrong with it."""
    if not isinstance(ref, str) or not ref.startswith("conv:"):
        raise RefError(f"not a conv: ref: {ref!r}")
    family, sep, body = ref[5:].partition(":")
    if not sep:
        raise RefError(f"ref {ref!r} has no family separator")
    if not _known_family(family):
        raise RefError(f"unknown ref family {family!r} in {ref!r}")
    if family == "conversation":
        return Ref(family=family, conversation_id=_check_id("conversation", body, ref))
    conversation_id, body = _leading_id("conversation", body, ref)
    if family == "turn":
        return Ref(
            family=family, conversation_id=conversation_id, turn_id=_check_id("turn", body, ref)
        )
    turn_id, body = _leading_id("turn", body, ref)
    return Ref(
        family=family, conversation_id=conversation_id, turn_id=turn_id, path=_check_path(body, ref)
    )


def format_ref(ref: Ref) -> str:
    """The canonical string of a reference (validates its parts)."""
    if ref.family == "conversation":
        return f"conv:conversation:{ref.conversation_id}"
    owner = f"conv_{ref.conversation_id}." if ref.conversation_id is not None else ""
    if ref.family == "turn":
        return f"conv:turn:{owner}{ref.turn_id}"
    turn = f"turn_{ref.turn_id}." if ref.turn_id is not None else ""
    text = f"conv:{ref.family}:{owner}{turn}{ref.path}"
    return format_checked(text)


def format_checked(text: str) -> str:
    parse_ref(text)
    return text


def make_ref(
    family: str, path: str, turn_id: str | None = None, conversation_id: str | None = None
) -> str:
    """Build and validate a reference string, e.g. `make_ref("fi", "files/a.csv", "t1")`."""
    if family not in FAMILIES:
        raise RefError(f"unknown ref family {family!r}")
    owner = (
        f"conv_{_check_id('conversation', conversation_id, path)}."
        if conversation_id is not None
        else ""
    )
    turn = f"turn_{_check_id('turn', turn_id, path)}." if turn_id is not None else ""
    text = f"conv:{family}:{owner}{turn}{path}"
    _check_path(path, text)
    return text


def qualify(ref: str, conversation_id: str) -> str:
    """Add the `conv_<conversation_id>.` owner segment (a ref owned elsewhere is an error)."""
    parsed = parse_ref(ref)
    if parsed.conversation_id not in (None, conversation_id):
        raise RefError(f"ref {ref!r} belongs to conversation {parsed.conversation_id!r}")
    if parsed.family == "conversation":
        return ref
    _check_id("conversation", conversation_id, ref)
    return format_ref(parsed.model_copy(update={"conversation_id": conversation_id}))
