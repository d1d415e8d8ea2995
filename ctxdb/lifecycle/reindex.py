"""Zero-downtime reindex: build the next index versions from Delta, verify, swap aliases atomically.

Searches keep answering from the old indices while the new ones are built. A failure before the
swap deletes the partial builds and leaves the aliases untouched; a crash leaves at worst an
abandoned build that the next reindex deletes first. The swap is one `_aliases` call for every
kind, so reads never see zero or two indices. Retired indices are deleted after a grace period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from elasticsearch import Elasticsearch

from ctxdb.coordination.lease import Lease, writer_lease_for
from ctxdb.embedding.model import Embedder
from ctxdb.embedding.stage import EmbedReport, embed_role_rows
from ctxdb.index.bulk import bulk_options, outage_as_unavailable
from ctxdb.index.incremental import SyncReport, current_versions, sync_index
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.index.routing import settings_layout
from ctxdb.index.sources import SOURCES, Source
from ctxdb.index.status import count
from ctxdb.index.versions import (
    Swap,
    alias_target,
    create_index,
    drop_abandoned,
    drop_retired,
    finish_bulk_load,
    swap_aliases,
    versions,
)
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

log = logging.getLogger(__name__)


class ReindexFailed(RuntimeError):
    """The new indices did not verify; the aliases still point at the old ones."""


@dataclass
class ReindexReport:
    """What one reindex did."""

    model_id: str
    embed: EmbedReport
    swaps: list[Swap] = field(default_factory=list)
    builds: dict[str, SyncReport] = field(default_factory=dict)
    abandoned_dropped: list[str] = field(default_factory=list)
    retired_dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_metadata(self) -> dict[str, str | int | float]:
        data: dict[str, str | int | float] = {
            "model_id": self.model_id,
            "seconds": round(self.seconds, 2),
            "embedded": self.embed.embedded,
            "cache_hits": self.embed.cache_hits,
        }
        for swap in self.swaps:
            data[f"{swap.alias}"] = f"{swap.old} -> {swap.new}"
        for kind, build in self.builds.items():
            data[f"{kind}_docs"] = build.docs
            data[f"{kind}_vectors"] = build.vectors
        return data


def verify_build(es: Elasticsearch, build: SyncReport, *, min_coverage_pct: float) -> None:
    """The new index holds every document and every vector Delta says it should."""
    docs = count(es, build.index)
    if docs != build.docs:
        raise ReindexFailed(f"{build.index}: {docs} documents, expected {build.docs}")
    if build.kind != ROWS:
        return
    vectors = count(es, build.index, {"exists": {"field": "embedding"}})
    if vectors != build.vectors:
        raise ReindexFailed(f"{build.index}: {vectors} vectors, expected {build.vectors}")
    coverage = 100.0 * vectors / docs if docs else 100.0
    if coverage < min_coverage_pct:
        raise ReindexFailed(
            f"{build.index}: vector coverage {coverage:.1f}% below {min_coverage_pct:.1f}%"
        )


def reindex(
    store: DeltaStore,
    es: Elasticsearch,
    settings: Settings,
    embedder: Embedder,
    *,
    min_coverage_pct: float = 0.0,
    before_swap: Callable[[dict[str, str]], None] | None = None,
) -> ReindexReport:
    """Build, verify and swap in new versions of every index from Delta (not from Elasticsearch).

    Cached embeddings are reused when `embedder.model_id` is unchanged; a new model id embeds
    every text again. `before_swap` (tests) runs with the new index names right before the swap.
    Holds the writer lease throughout (`LeaseHeld` when another writer runs); a lease lost
    meanwhile stops it before the swap.
    """
    with (
        outage_as_unavailable(settings.elasticsearch.url, "reindex"),
        writer_lease_for(es, settings, "reindex") as lease,
    ):
        return _reindex(
            store,
            es,
            settings,
            embedder,
            lease,
            min_coverage_pct=min_coverage_pct,
            before_swap=before_swap,
        )


def _reindex(
    store: DeltaStore,
    es: Elasticsearch,
    settings: Settings,
    embedder: Embedder,
    lease: Lease,
    *,
    min_coverage_pct: float,
    before_swap: Callable[[dict[str, str]], None] | None,
) -> ReindexReport:
    started = time.monotonic()
    prefix = settings.elasticsearch.index_prefix
    report = ReindexReport(model_id=embedder.model_id, embed=EmbedReport())
    for kind in SOURCES:
        report.abandoned_dropped += drop_abandoned(es, prefix, kind)
    report.embed = embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
    builds: dict[str, str] = {}
    try:
        for kind, source in SOURCES.items():
            builds[kind] = _next_index(es, settings, kind, embedder.model_id)
            build = _load_build(store, es, settings, source, builds[kind], embedder.model_id)
            finish_bulk_load(es, builds[kind], kind)
            verify_build(es, build, min_coverage_pct=min_coverage_pct)
            report.builds[kind] = build
        if before_swap is not None:
            before_swap(dict(builds))
        lease.check()
    except BaseException:
        for name in builds.values():
            es.indices.delete(index=name, ignore_unavailable=True)
        log.error(
            "reindex failed; deleted partial builds %s, aliases untouched", list(builds.values())
        )
        raise
    report.swaps = [
        Swap(alias_name(prefix, kind), alias_target(es, alias_name(prefix, kind)), name)
        for kind, name in builds.items()
    ]
    swap_aliases(es, report.swaps)
    report.seconds = time.monotonic() - started
    return report


def _next_index(es: Elasticsearch, settings: Settings, kind: str, model_id: str) -> str:
    """Create the next version of `kind`'s index, set up for a bulk load; its name."""
    prefix = settings.elasticsearch.index_prefix
    return create_index(
        es,
        prefix,
        kind,
        max(versions(es, prefix, kind), default=0) + 1,
        dims=settings.embedding.dims,
        model_id=model_id,
        bulk_load=True,
        layout=settings_layout(settings),
    )


def _load_build(
    store: DeltaStore,
    es: Elasticsearch,
    settings: Settings,
    source: Source,
    index: str,
    model_id: str,
) -> SyncReport:
    """Fill a new index from `source`'s Delta tables at their current versions (no refresh)."""
    return sync_index(
        store,
        es,
        source,
        index,
        model_id=model_id,
        bulk=bulk_options(settings.elasticsearch),
        refresh=False,
        versions=current_versions(store, source.tables),
    )


def drop_after_grace(
    es: Elasticsearch, settings: Settings, *, grace_s: float, wait: bool = True
) -> list[str]:
    """Stamp retired versions, wait out `grace_s` (when `wait`), then delete them."""
    for kind in SOURCES:
        drop_retired(es, settings.elasticsearch.index_prefix, kind, grace_s=float("inf"))
    if wait and grace_s > 0:
        time.sleep(grace_s)
    dropped: list[str] = []
    for kind in SOURCES:
        dropped += drop_retired(es, settings.elasticsearch.index_prefix, kind, grace_s=grace_s)
    return dropped
