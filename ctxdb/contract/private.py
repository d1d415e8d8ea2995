"""`<private>...</private>` spans: removed from every text capture writes and from every context
pack (standard library only, so the Claude Code hook can use it too).

A span runs from `<private>` to the next `</private>` (tags matched case-insensitively, across
lines); an unclosed `<private>` runs to the end of the text.
"""

from __future__ import annotations

import re
from typing import Any

_PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.DOTALL | re.IGNORECASE)
_UNCLOSED = re.compile(r"<private>(?:(?!</private>).)*\Z", re.DOTALL | re.IGNORECASE)
OPEN_TAG = "<private>"


def strip_private(text: str) -> str:
    """`text` without its `<private>...</private>` spans."""
    return _PRIVATE.sub("", text) if "<" in text else text


def strip_private_open(text: str) -> str:
    """`text` without its closed `<private>` spans; an unclosed one is cut to its bare opening
    tag, so that text joined to it later is still private up to its `</private>` (the Claude Code
    hook keeps an answer's text between processes this way)."""
    if "<" not in text:
        return text
    stripped = _PRIVATE.sub("", text)
    return stripped + OPEN_TAG if _UNCLOSED.search(text) else stripped


def strip_private_all(value: Any) -> Any:
    """`value` with `strip_private` applied to every string inside it (dicts, lists, tuples)."""
    if isinstance(value, str):
        return strip_private(value)
    if isinstance(value, dict):
        return {key: strip_private_all(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [strip_private_all(item) for item in value]
    return value
