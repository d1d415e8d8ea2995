"""Fitting candidate items into a budget: the highest-priority items that fit, rendered in
section order; the budget holds by construction (the whole text is counted at the end and the
lowest-priority item dropped until it fits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ctxdb.contract.private import strip_private
from ctxdb.pack.models import PackItem, Section
from ctxdb.pack.tokens import count_tokens

HEADINGS: dict[Section, str] = {
    "header": "",
    "sessions": "## Recent sessions",
    "unfinished": "## Unfinished turns (cancelled or error, not resumed)",
    "work": "## Recent work (files, commands, outcomes)",
    "turns": "## Turns (oldest first; the newest whole)",
    "related": "## Earlier turns related to the query",
}
ORDER: tuple[Section, ...] = ("header", "sessions", "unfinished", "work", "turns", "related")


@dataclass(frozen=True)
class Candidate:
    """An item that may go into the pack: `priority` (lower first) decides what is kept,
    `order` where it stands inside its section."""

    section: Section
    priority: tuple[int, ...]
    order: tuple[object, ...]
    text: str
    ref: str | None = None
    ts: datetime | None = None
    age: str | None = None
    tokens: int = field(default=0, compare=False)

    def item(self) -> PackItem:
        return PackItem(
            section=self.section, text=self.text, ref=self.ref, ts=self.ts, age=self.age
        )


def candidate(
    section: Section,
    priority: tuple[int, ...],
    order: tuple[object, ...],
    text: str,
    ref: str | None = None,
    ts: datetime | None = None,
    age: str | None = None,
) -> Candidate:
    """A candidate whose text is stripped of `<private>` spans and counted."""
    clean = strip_private(text).strip()
    return Candidate(section, priority, order, clean, ref, ts, age, count_tokens(clean))


def render(kept: list[Candidate]) -> str:
    """The pack text: each section's heading, then its items in order."""
    lines: list[str] = []
    for section in ORDER:
        items = sorted((c for c in kept if c.section == section), key=lambda c: c.order)
        if not items:
            continue
        if HEADINGS[section]:
            lines += ["", HEADINGS[section]]
        lines += [c.text for c in items]
    return strip_private("\n".join(lines).strip()) + "\n" if lines else ""


def _cost(c: Candidate, sections: set[Section]) -> tuple[int, int]:
    """Tokens and characters `c` adds to a pack already holding `sections`."""
    heading = HEADINGS[c.section] if c.section not in sections else ""
    return c.tokens + count_tokens(heading), len(c.text) + 1 + (len(heading) + 2 if heading else 0)


def fit(candidates: list[Candidate], budget: int, max_chars: int | None) -> list[Candidate]:
    """The candidates kept: highest priority first, each one that still fits."""
    limit_chars = max_chars if max_chars is not None else 1 << 62
    kept: list[Candidate] = []
    sections: set[Section] = set()
    tokens = chars = 0
    for c in sorted(candidates, key=lambda c: (c.priority, c.order)):
        more_tokens, more_chars = _cost(c, sections)
        if tokens + more_tokens <= budget and chars + more_chars <= limit_chars:
            kept.append(c)
            sections.add(c.section)
            tokens, chars = tokens + more_tokens, chars + more_chars
    while kept:
        text = render(kept)
        if count_tokens(text) <= budget and len(text) <= limit_chars:
            break
        kept.pop()
    return kept
