"""Keep the live indices (behind their aliases) in step with Delta: the `search_index` asset."""

from __future__ import annotations

import logging

from elasticsearch import BadRequestError, Elasticsearch

from ctxdb.coordination.lease import writer_lease_for
from ctxdb.index.bulk import bulk_options, outage_as_unavailable
from ctxdb.index.incremental import SyncReport, sync_index
from ctxdb.index.mappings import alias_name
from ctxdb.index.routing import settings_layout
from ctxdb.index.sources import SOURCES
from ctxdb.index.versions import KINDS, drop_retired, ensure_index, record_model_id
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard

log = logging.getLogger(__name__)


def sync_live(
    store: DeltaStore,
    es: Elasticsearch,
    settings: Settings,
    *,
    model_id: str,
    shard: Shard | None = None,
) -> list[SyncReport]:
    """Ensure both aliases exist, sync each live index incrementally, drop retired versions.

    With `shard`, only that shard's documents are synced, under the shard's writer lease, so the
    shards of one count run at once; shard 0 drops the retired versions. Without, every document,
    under the global lease.

    Holds the writer lease (`LeaseHeld` when a reindex, sweep or erasure runs elsewhere). Raises
    ElasticsearchUnavailable when the node cannot be reached; since `index_state` only advances
    after a successful sync, the next run catches up.
    """
    operation = "index sync" if shard is None else f"index sync {shard.name}"
    with (
        outage_as_unavailable(settings.elasticsearch.url, operation),
        writer_lease_for(es, settings, operation, shard),
    ):
        return _sync_live(store, es, settings, model_id=model_id, shard=shard)


def _ensure(es: Elasticsearch, settings: Settings, kind: str, model_id: str) -> str:
    """`ensure_index`, once more when a concurrent shard created the first version first."""
    for last in (False, True):
        try:
            return ensure_index(
                es,
                settings.elasticsearch.index_prefix,
                kind,
                dims=settings.embedding.dims,
                model_id=model_id,
                layout=settings_layout(settings),
            )
        except BadRequestError as exc:
            if last or exc.error != "resource_already_exists_exception":
                raise
    raise AssertionError("unreachable")


def _sync_live(
    store: DeltaStore,
    es: Elasticsearch,
    settings: Settings,
    *,
    model_id: str,
    shard: Shard | None,
) -> list[SyncReport]:
    reports = []
    for kind in KINDS:
        index = _ensure(es, settings, kind, model_id)
        if kind in SOURCES:
            report = sync_index(
                store,
                es,
                SOURCES[kind],
                index,
                model_id=model_id,
                bulk=bulk_options(settings.elasticsearch),
                shard=shard,
            )
            reports.append(report)
            if not report.skipped:  # the documents it wrote carry `model_id`
                record_model_id(es, index, model_id)
        if shard is not None and shard.index != 0:
            continue
        dropped = drop_retired(
            es,
            settings.elasticsearch.index_prefix,
            kind,
            grace_s=settings.elasticsearch.reindex_grace_s,
        )
        if dropped:
            log.info(
                "%s: dropped retired %s",
                alias_name(settings.elasticsearch.index_prefix, kind),
                dropped,
            )
    return reports
