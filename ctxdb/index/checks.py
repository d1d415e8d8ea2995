"""Consistency of each live index with Delta: document counts and the ids that differ."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
from elasticsearch import Elasticsearch

from ctxdb.index.documents import ID
from ctxdb.index.incremental import build_base, current_versions, indexed_ids
from ctxdb.index.lifecycle import alias_target
from ctxdb.index.mappings import alias_name
from ctxdb.index.sources import SOURCES
from ctxdb.storage.delta import DeltaStore


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
    """One CountCheck per index kind (model id does not change ids, so any is fine here)."""
    checks = []
    for kind, source in SOURCES.items():
        expected = build_base(store, source, current_versions(store, source.tables), "").get_column(
            ID
        )
        index = alias_target(es, alias_name(prefix, kind))
        found = indexed_ids(es, index) if index else pl.Series(ID, [], dtype=pl.String)
        checks.append(
            CountCheck(
                kind=kind,
                index=index,
                delta=expected.len(),
                documents=found.len(),
                missing=expected.filter(~expected.is_in(found.implode())).head(sample).to_list(),
                extra=found.filter(~found.is_in(expected.implode())).head(sample).to_list(),
            )
        )
    return checks
