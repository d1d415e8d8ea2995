"""Fencing of Delta commits: what a writer checks before each commit.

Writers (landing, derivation) take whatever their caller holds around the run. When that is a
`Fenced` object (the writer lease of `ctxdb.coordination.lease`), its `check()` runs before
every commit and raises once the run has lost it; without one, `unfenced` checks nothing. The
protocol lives apart from the lease, so a stage that commits to Delta needs nothing of
Elasticsearch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class Fenced(Protocol):
    """Something a writer holds that says, before each commit, whether it still may commit."""

    def check(self) -> None:
        """Return when the holder may still commit; raise when it lost the right to."""


def unfenced() -> None:
    """No fence to check (a run without the writer lease)."""


def fence_of(held: object) -> Callable[[], None]:
    """The check to run before each commit of a run holding `held`."""
    return held.check if isinstance(held, Fenced) else unfenced
