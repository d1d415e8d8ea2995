"""Fitting candidate items into a budget: the highest-priority items that fit, rendered in
section order; the budget holds by construction (the whole text is counted at the end and the
lowest-priority item dropped until it fits)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from ctxdb.contract.private import strip_private
from ctxdb.pack.tokens import count_tokens, cut_to_tokens

if TYPE_CHECKING:  # the models load only where a pack is returned whole (the hooks start fast)
    from ctxdb.pack.models import PackItem, Section

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
    age_at: int = -1
    """Where `age` stands in `text` (-1: nowhere it can be told apart, e.g. inside a private
    span), so that the item can be told again at a later time (`at`)."""

    def item(self) -> PackItem:
        from ctxdb.pack.models import PackItem

        return PackItem(
            section=self.section, text=self.text, ref=self.ref, ts=self.ts, age=self.age
        )

    def at(self, now: datetime) -> Candidate | None:
        """This item as it reads at `now` (its age told from `now`, tokens recounted); None when
        its age cannot be found in its text."""
        if self.ts is None or self.age is None:
            return self
        if self.age_at < 0:
            return None
        told = age(self.ts, now)
        if told == self.age:
            return self
        text = self.text[: self.age_at] + told + self.text[self.age_at + len(self.age) :]
        return replace(self, text=text, age=told, tokens=count_tokens(text))


def age(ts: datetime | None, now: datetime) -> str:
    """How long before `now` `ts` was: "just now", "5 minutes ago", "3 days ago"."""
    if ts is None:
        return "at an unknown time"
    seconds = max(0.0, (now - ts).total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


def candidate(
    section: Section,
    priority: tuple[int, ...],
    order: tuple[object, ...],
    text: str,
    ref: str | None = None,
    ts: datetime | None = None,
    age: str | None = None,
    age_at: int = -1,
) -> Candidate:
    """A candidate whose text is stripped of `<private>` spans and counted; `age_at`, where
    `age` starts in `text`, is kept (moved past what the stripping removed before it) when the
    stripped text still holds the age there."""
    clean = strip_private(text).strip()
    at = -1
    if age is not None and age_at >= 0:
        before = strip_private(text[:age_at]).lstrip()
        found = clean.startswith(before) and clean[len(before) :].startswith(age)
        at = len(before) if found else -1
    return Candidate(section, priority, order, clean, ref, ts, age, count_tokens(clean), at)


def header(where: str, budget: int, now: datetime) -> Candidate:
    """The pack's first line: what it covers (`where`) and when it was told."""
    text = f"# Memory from ctxdb: {where}, as of {now:%Y-%m-%d %H:%M} UTC"
    return candidate("header", (-1,), (0,), cut_to_tokens(text, budget - 1), None)


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
