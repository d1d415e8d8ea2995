"""Static hash shards of the conversation id: the unit the embedding and indexing stages fan out on.

A conversation belongs to shard `int(sha256(conversation_id)[:15 hex digits], 16) % count`. The
hash is SHA-256 (computed by the `polars-hash` expression plugin), so the assignment is stable
across processes, machines, Python and polars versions, and can be recomputed anywhere; Python's
`hash()` is salted per process and polars' own `Expr.hash` may change between releases, so neither
is used. Every row of one conversation lands in the same shard, and every conversation in exactly
one, so the shards of one count partition the role rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl
import polars_hash as plh

HEX_DIGITS = 15
"""Hex digits of the digest read as the shard number (60 bits: fits a signed 64-bit integer)."""

_NAME = re.compile(r"^shard-(\d+)-of-(\d+)$")

WHOLE_RANGE_JOBS = frozenset({"memory_job"})
"""Jobs whose shard-partitioned steps cover every shard in one run (a run over the whole partition
range); a run of theirs over some shards only is refused (assets/shards.py)."""


def shard_expr(count: int, column: str = "conversation_id") -> pl.Expr:
    """The shard (0 .. count-1) of each value of `column`, as an Int64 polars expression."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    digest = plh.col(column).chash.sha2_256()
    return (digest.str.slice(0, HEX_DIGITS).str.to_integer(base=16) % count).cast(pl.Int64)


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: the conversations whose stable hash modulo `count` is `index`."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} is not in 0..{self.count - 1}")

    @property
    def name(self) -> str:
        """`shard-<index>-of-<count>`: used in watermark ids, index state keys and lease names."""
        return f"shard-{self.index}-of-{self.count}"

    @classmethod
    def parse(cls, name: str) -> Shard:
        match = _NAME.match(name)
        if match is None:
            raise ValueError(f"not a shard name: {name!r} (expected shard-<i>-of-<n>)")
        return cls(int(match[1]), int(match[2]))

    def expr(self, column: str = "conversation_id") -> pl.Expr:
        """True for the values of `column` in this shard."""
        return shard_expr(self.count, column) == self.index


def all_shards(count: int) -> list[Shard]:
    """The `count` shards that together hold every conversation."""
    return [Shard(index, count) for index in range(count)]


def in_shard(
    frame: pl.DataFrame, shard: Shard | None, column: str = "conversation_id"
) -> pl.DataFrame:
    """The rows of `frame` in `shard` (all of them when `shard` is None)."""
    return frame if shard is None else frame.filter(shard.expr(column))
