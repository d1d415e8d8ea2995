"""Keep the live indices (behind their aliases) in step with Delta: the `search_index` asset."""

from __future__ import annotations

import logging

from elasticsearch import ConnectionError as ESConnectionError
from elasticsearch import ConnectionTimeout, Elasticsearch

from ctxdb.index.bulk import ElasticsearchUnavailable
from ctxdb.index.incremental import SyncReport, sync_index
from ctxdb.index.lease import writer_lease_for
from ctxdb.index.lifecycle import KINDS, drop_retired, ensure_index
from ctxdb.index.mappings import alias_name
from ctxdb.index.routing import settings_layout
from ctxdb.index.sources import SOURCES
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

log = logging.getLogger(__name__)


def sync_live(
    store: DeltaStore, es: Elasticsearch, settings: Settings, *, model_id: str
) -> list[SyncReport]:
    """Ensure both aliases exist, sync each live index incrementally, drop retired versions.

    Holds the writer lease (`LeaseHeld` when a reindex, sweep or erasure runs elsewhere). Raises
    ElasticsearchUnavailable when the node cannot be reached; since `index_state` only advances
    after a successful sync, the next run catches up.
    """
    try:
        with writer_lease_for(es, settings, "index sync"):
            return _sync_live(store, es, settings, model_id=model_id)
    except (ESConnectionError, ConnectionTimeout) as exc:
        raise ElasticsearchUnavailable(
            f"Elasticsearch at {settings.elasticsearch.url} is unreachable: {exc}"
        ) from exc


def _sync_live(
    store: DeltaStore, es: Elasticsearch, settings: Settings, *, model_id: str
) -> list[SyncReport]:
    reports = []
    for kind in KINDS:
        index = ensure_index(
            es,
            settings.elasticsearch.index_prefix,
            kind,
            dims=settings.embedding.dims,
            model_id=model_id,
            layout=settings_layout(settings),
        )
        if kind in SOURCES:
            reports.append(
                sync_index(
                    store,
                    es,
                    SOURCES[kind],
                    index,
                    model_id=model_id,
                    chunk_size=settings.elasticsearch.chunk_size,
                    threads=settings.elasticsearch.bulk_threads,
                    timeout_s=settings.elasticsearch.bulk_timeout_s,
                    max_retries=settings.elasticsearch.bulk_max_retries,
                )
            )
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
