"""Consistency of each live index with Delta: document counts, and on demand the ids that differ.

The count check (`count_mismatches`, the `search_index` asset check) costs no more with a bigger
memory: Delta's side is the row count in the file statistics of the table each document comes
from (one document per role row, one per TurnLog), Elasticsearch's side is `_count` on the alias.
Only when the counts differ are the ids compared, to name what is missing or extra. The full
id-level comparison (`verify_ids`, `ctxdb index verify`) reads every id on both sides and also
catches a missing document hidden by an extra one; it runs on demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
from elasticsearch import Elasticsearch

from ctxdb.index.documents import ID
from ctxdb.index.incremental import build_base, current_versions, indexed_ids
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sources import SOURCES, Source
from ctxdb.index.versions import alias_target
from ctxdb.storage.changes import row_count
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, TURN_LOGS

DOCUMENT_TABLES = {ROWS: ROLE_ROWS, TURNS: TURN_LOGS}
"""The table holding one row per document of each index kind."""


@dataclass
class CountCheck:
    """Delta rows versus index documents for one kind, with samples of differing ids."""

    kind: str
    index: str | None
    delta: int
    documents: int
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.delta == self.documents and not self.missing and not self.extra

    def as_metadata(self) -> dict[str, int | str]:
        return {
            "index": self.index or "",
            "delta": self.delta,
            "documents": self.documents,
            "missing_ids": ", ".join(self.missing),
            "extra_ids": ", ".join(self.extra),
        }


def count_mismatches(
    store: DeltaStore, es: Elasticsearch, prefix: str, *, sample: int = 20
) -> list[CountCheck]:
    """One CountCheck per index kind from counts alone (file statistics, `_count`); the ids are
    compared only for a kind whose counts differ."""
    checks = []
    for kind, source in SOURCES.items():
        index = alias_target(es, alias_name(prefix, kind))
        documents = es.count(index=index)["count"] if index else 0
        delta = row_count(store, DOCUMENT_TABLES[kind])
        check = CountCheck(kind=kind, index=index, delta=delta, documents=documents)
        checks.append(check if check.ok else _compare_ids(store, es, kind, source, index, sample))
    return checks


def verify_ids(
    store: DeltaStore, es: Elasticsearch, prefix: str, *, sample: int = 20
) -> list[CountCheck]:
    """One CountCheck per index kind from every id on both sides (reads whole tables and scrolls
    every document: an on-demand verification)."""
    return [
        _compare_ids(store, es, kind, source, alias_target(es, alias_name(prefix, kind)), sample)
        for kind, source in SOURCES.items()
    ]


def _compare_ids(
    store: DeltaStore,
    es: Elasticsearch,
    kind: str,
    source: Source,
    index: str | None,
    sample: int,
) -> CountCheck:
    """Ids of `kind` in Delta (model id does not change ids, so any is fine) versus `index`."""
    expected = build_base(store, source, current_versions(store, source.tables), "").get_column(ID)
    found = indexed_ids(es, index) if index else pl.Series(ID, [], dtype=pl.String)
    return CountCheck(
        kind=kind,
        index=index,
        delta=expected.len(),
        documents=found.len(),
        missing=expected.filter(~expected.is_in(found.implode())).head(sample).to_list(),
        extra=found.filter(~found.is_in(expected.implode())).head(sample).to_list(),
    )
