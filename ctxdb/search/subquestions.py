"""Compound questions, asked of the kNN arm one part at a time.

A question that joins two ("what was my favorite part of the conference, and can I do that
anywhere?") has its answers in different turns, often of different sessions. One query vector
lies between the two meanings and follows the one that dominates, so the other part's answer can
rank past 100 in the kNN arm (on real chat, the semantic arm held every answer of such a question
in its top 10 for 43 % of them). The text arms match words and find both.

`sub_questions` splits a query where a new question starts: after a "?", or at "and" (with or
without a comma before it), when a wh-word ("what", "how", "when", ...) or a helper verb and its
subject ("did I", "can you", "is there") follows; "pasta and is close to my office" goes on with
the same subject and stays whole. A part without a content word ("why?") stays with its
neighbour; a query yields at most `MAX_PARTS` parts (the rest stays in the last one), or none
when it is a single question.
`interleave` merges the kNN rows of the whole query and of each part round-robin by rank, so the
arm's first rows are the best of every part.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxdb.search.arms import RowHit
from ctxdb.text import stems

MAX_PARTS = 3
"""Parts of one query, each one more kNN search."""
WH_WORDS = "what|what's|how|how's|when|where|who|whom|whose|why|which"
HELPERS = "do|does|did|is|are|am|was|were|can|could|have|has|had|will|would|should"
SUBJECTS = "i|you|he|she|it|we|they|there|my|your|his|her|our|their|the|this|that"
_QUESTION = rf"(?:{WH_WORDS})\b|(?:{HELPERS})\s+(?:{SUBJECTS})\b"
"""Where a new question starts: a wh-word, or a helper verb before its subject ("and can I",
not "and can teach me", which goes on with the same subject)."""
# (?<!\s) anchors the whitespace run at its start, so a long run is scanned once, not once per
# position
_SPLIT = re.compile(rf"(?<=\?)\s+(?={_QUESTION})|,?(?<!\s)\s+and\s+(?={_QUESTION})", re.I)


def sub_questions(query: str) -> list[str]:
    """The questions `query` joins (module docstring); [] for a single question. A piece without
    a content word joins its neighbour (the next one when it comes first)."""
    parts: list[str] = []
    lead = ""
    for piece in (p.strip() for p in _SPLIT.split(query)):
        if not piece:
            continue
        if not parts and not stems(piece):
            lead = f"{lead} {piece}".strip()
        elif not parts:
            parts.append(f"{lead} {piece}".strip())
        elif not stems(piece) or len(parts) == MAX_PARTS:
            parts[-1] = f"{parts[-1]} {piece}"
        else:
            parts.append(piece)
    return parts if len(parts) > 1 else []


def interleave(ranked: Sequence[Sequence[RowHit]]) -> list[RowHit]:
    """The rows of every list, round-robin by rank, each row once (its first place)."""
    merged: dict[tuple[str, str, str, str | None], RowHit] = {}
    for rank in range(max((len(rows) for rows in ranked), default=0)):
        for rows in ranked:
            if rank < len(rows):
                merged.setdefault(rows[rank].identity, rows[rank])
    return list(merged.values())
