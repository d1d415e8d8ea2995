"""Incremental sync of Delta tables into one concrete index, tracked by source table versions.

Each concrete index has a row in the `index_state` Delta table with the versions of its source
tables it was last synced from and its document count. A run whose sources have the same versions
does nothing. Otherwise only the documents in scope of a change are built, at the old and the new
versions (`ctxdb.index.changed_docs`: from the files the Delta log added and removed in between,
plus the unchanged rows sharing a changed scope value), diffed by content fingerprint, and only
changed documents are indexed; documents whose rows disappeared are deleted. When the old version is
gone (its log cleaned up or a file of it vacuumed: `ctxdb.storage.changes.ChangesUnavailable`),
when a table gained a contract column since (its old rows cannot be compared with the new), or
there is no state, every document is indexed and ids found in the index but not in Delta are
deleted; any other failure to read the changes is raised (`ChangesUnreadable`), never a full sync.

A full sync streams: it splits the documents into parts of about `FULL_PART_ROWS` rows of the
first source table (by a stable hash of `Source.partition`, so every row a document depends on is
in its part), and builds, completes and bulk-indexes one part at a time; only the document ids of
the parts are kept, to delete the ids of the index that no part holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from elasticsearch import Elasticsearch, helpers

from ctxdb.index.bulk import DEFAULT_BULK, BulkOptions, BulkReport, bulk_write
from ctxdb.index.changed_docs import changed_bases
from ctxdb.index.documents import FINGERPRINT, ID, delete_actions, index_actions
from ctxdb.index.index_failures import settle
from ctxdb.index.routing import is_routed, stored_routing
from ctxdb.index.sources import Source, Versions
from ctxdb.storage.arrow import frame_of
from ctxdb.storage.changes import ChangesUnavailable, read_retried
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard, in_shard
from ctxdb.storage.tables import INDEX_STATE, INDEX_STATE_SCHEMA

log = logging.getLogger(__name__)
WHOLE = Shard(0, 1)
"""The one part of an unsplit build."""


@dataclass
class SyncReport:
    """What one sync of one index did."""

    kind: str
    index: str
    skipped: bool = False
    full: bool = False
    docs: int = 0
    vectors: int = 0
    indexed: int = 0
    deleted: int = 0
    rejected: int = 0
    seconds: float = 0.0

    def as_metadata(self) -> dict[str, str | int | float | bool]:
        return dict(self.__dict__)


def current_versions(store: DeltaStore, tables: tuple[str, ...]) -> Versions:
    return {table: store.version(table) for table in tables}


def read_at(store: DeltaStore, table: str, schema: pa.Schema, version: int | None) -> pl.DataFrame:
    """The table as of `version` (empty when the table did not exist then)."""
    if version is None:
        return frame_of(schema.empty_table())
    return store.read(table, schema, version=version)


def read_part(
    store: DeltaStore,
    table: str,
    schema: pa.Schema,
    version: int | None,
    part: Shard,
    column: str,
    shard: Shard | None = None,
) -> pl.DataFrame:
    """The rows of the table as of `version` whose `column` hashes into `part` (and, where the
    table has a `conversation_id`, of `shard`'s conversations), read by a streaming scan that
    keeps only those rows."""
    keep = [part.expr(column)] if part.count > 1 else []
    if shard is not None and "conversation_id" in schema.names:
        keep.append(shard.expr())
    if version is None or not keep:
        return read_at(store, table, schema, version)
    scan = store.scan(table, version).filter(pl.all_horizontal(keep))
    return scan.collect(engine="streaming")


def build_base(
    store: DeltaStore,
    source: Source,
    versions: Versions,
    model_id: str,
    part: Shard = WHOLE,
    shard: Shard | None = None,
) -> pl.DataFrame:
    """The base frame of the documents as of `versions` (of those in `part`, when split; the
    rows of `shard`'s conversations are kept by the scans, when given)."""
    frames = {
        t: read_part(store, t, source.schemas[t], versions[t], part, source.partition, shard)
        for t in source.tables
    }
    return source.base(frames, model_id)


FULL_PART_ROWS = 200_000
"""Rows of the first source table per part of a full sync: its memory is bounded by a part."""
FULL_PART_BYTES = 32 * 2**20
"""Parquet bytes of the source tables per part of a full sync. Rows alone do not bound a part of
turns: a TurnLog's payload makes a turn several KB in memory (10M events: a part of 177k turns,
112 MB of parquet, built a 562 MB frame and 1.5 GB of RSS). Role rows stay bounded by rows
(10M events: 330 MB of parquet, 15 parts of 200k rows)."""


def full_parts(
    store: DeltaStore, source: Source, versions: Versions, shard: Shard | None = None
) -> int:
    """How many parts a full sync at `versions` builds, from the Delta log: the first source
    table's rows over `FULL_PART_ROWS` or the source tables' bytes over `FULL_PART_BYTES`,
    whichever is more (their share of `shard`'s conversations), at least one."""
    sizes = [_size(store, table, versions[table]) for table in source.tables]
    share = 1 if shard is None else shard.count
    by_rows = -(-sizes[0][0] // (FULL_PART_ROWS * share))
    by_bytes = -(-sum(size for _, size in sizes) // (FULL_PART_BYTES * share))
    return max(1, by_rows, by_bytes)


def _size(store: DeltaStore, table: str, version: int | None) -> tuple[int, int]:
    """Rows and parquet bytes of `table` at `version` (0, 0 when absent)."""
    dt = store.table(table) if version is not None else None
    if dt is None or version is None:
        return 0, 0
    dt.load_as_version(version)
    files = pa.table(dt.get_add_actions(flatten=True))
    return (
        pc.sum(files["num_records"]).as_py() or 0,
        pc.sum(files["size_bytes"]).as_py() or 0,
    )


def _bases(
    store: DeltaStore, source: Source, old: Versions, new: Versions, model_id: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(new, old) base frames: only the documents in scope of a change when the source declares
    a scope, else every document at both versions; `ChangesUnavailable` when `old` is gone."""
    if source.scope:
        return changed_bases(store, source, old, new, model_id)
    old_base = read_retried(
        ",".join(source.tables), f"versions {old}", lambda: build_base(store, source, old, model_id)
    )
    return build_base(store, source, new, model_id), old_base


def index_uuid(es: Elasticsearch, index: str) -> str:
    return es.indices.get_settings(index=index, name="index.uuid")[index]["settings"]["index"][
        "uuid"
    ]


def read_state(store: DeltaStore, index: str, uuid: str) -> tuple[Versions, int] | None:
    """Source versions `index` was last synced from and its document count then (None if
    never, or if it was recreated)."""
    state = store.read(INDEX_STATE, INDEX_STATE_SCHEMA).filter(
        (pl.col("index_name") == index) & (pl.col("index_uuid") == uuid)
    )
    if state.is_empty():
        return None
    return json.loads(state.get_column("source_versions")[0]), state.get_column("docs")[0]


def write_state(
    store: DeltaStore, index: str, uuid: str, kind: str, versions: Versions, docs: int
) -> None:
    frame = pl.DataFrame(
        {
            "index_name": [index],
            "index_uuid": [uuid],
            "kind": [kind],
            "source_versions": [json.dumps(versions, sort_keys=True)],
            "docs": [docs],
            "updated_at": [datetime.now(UTC)],
        }
    )
    store.upsert(INDEX_STATE, frame, keys=["index_name"], schema=INDEX_STATE_SCHEMA)


def indexed_ids(es: Elasticsearch, index: str, shard: Shard | None = None) -> pl.Series:
    """Every document id in `index` (of `shard`'s conversations, when given)."""
    query: dict[str, Any] = {"query": {"match_all": {}}}
    if shard is None:
        hits = helpers.scan(es, index=index, query=query, _source=False)
        return pl.Series(ID, [hit["_id"] for hit in hits], dtype=pl.String)
    ids, conversations = [], []
    for hit in helpers.scan(es, index=index, query=query, _source=["conversation_id"]):
        ids.append(hit["_id"])
        conversations.append(hit["_source"].get("conversation_id"))
    frame = pl.DataFrame(
        {ID: ids, "conversation_id": conversations},
        schema={ID: pl.String, "conversation_id": pl.String},
    )
    return in_shard(frame, shard).get_column(ID)


def state_name(index: str, shard: Shard | None) -> str:
    """The `index_state` key of `index`, or of one shard of it (each shard syncs on its own)."""
    return index if shard is None else f"{index}/{shard.name}"


def plan_changes(
    new: pl.DataFrame, old: pl.DataFrame | None, existing: pl.Series | None
) -> tuple[pl.DataFrame, pl.Series]:
    """(documents to index, ids to delete) from the new and old base frames."""
    if old is None:
        ids = existing if existing is not None else pl.Series(ID, [], dtype=pl.String)
        gone = ids.filter(~ids.is_in(new.get_column(ID).implode()))
        return new, gone
    changed = new.join(old.select(ID, FINGERPRINT), on=[ID, FINGERPRINT], how="anti")
    gone = old.join(new.select(ID), on=ID, how="anti").get_column(ID)
    return changed, gone


def sync_index(
    store: DeltaStore,
    es: Elasticsearch,
    source: Source,
    index: str,
    *,
    model_id: str,
    bulk: BulkOptions = DEFAULT_BULK,
    refresh: bool = True,
    versions: Versions | None = None,
    shard: Shard | None = None,
) -> SyncReport:
    """Bring `index` up to date with `source`'s Delta tables (at `versions`, default: latest);
    with `shard`, only the documents of that shard's conversations, under a state of its own."""
    started = time.monotonic()
    report = SyncReport(kind=source.kind, index=index)
    target = versions or current_versions(store, source.tables)
    uuid = index_uuid(es, index)
    key = state_name(index, shard)
    state, docs_before = read_state(store, key, uuid) or (None, 0)
    if state == target:
        report.skipped = True
        report.seconds = time.monotonic() - started
        return report
    old = None
    if state is not None:
        try:
            new, old = _bases(store, source, state, target, model_id)
        except ChangesUnavailable as exc:
            log.warning(
                "full sync of %s: %s changes since %s unavailable (%s)",
                index,
                source.kind,
                state,
                exc,
            )
    write = _Writer(store, es, source, index, model_id, report, bulk)
    if old is None:
        report.full = True
        docs_after = _full_sync(store, es, source, index, target, model_id, shard, write)
    else:
        new, old = in_shard(new, shard), in_shard(old, shard)
        changed, gone = plan_changes(new, old, None)
        added = changed.join(old.select(ID), on=ID, how="anti").height
        docs_after = docs_before + added - gone.len()
        write(changed, gone)
    if refresh:
        es.indices.refresh(index=index)
    write_state(store, key, uuid, source.kind, target, docs=docs_after)
    report.docs = docs_after
    report.seconds = time.monotonic() - started
    log.info("synced %s: %d indexed, %d deleted", index, report.indexed, report.deleted)
    return report


def _full_sync(
    store: DeltaStore,
    es: Elasticsearch,
    source: Source,
    index: str,
    target: Versions,
    model_id: str,
    shard: Shard | None,
    write: Callable[[pl.DataFrame, pl.Series], None],
) -> int:
    """Index every document part by part, then delete the ids of the index no part holds;
    returns the document count."""
    parts = full_parts(store, source, target, shard)
    kept, docs = [], 0
    for number in range(parts):
        part = Shard(number, parts)
        new = in_shard(build_base(store, source, target, model_id, part, shard), shard)
        kept.append(new.get_column(ID))
        docs += new.height
        write(new, kept[-1].clear())
    existing = indexed_ids(es, index, shard)
    write(new.clear(), existing.filter(~existing.is_in(pl.concat(kept).implode())))
    return docs


@dataclass(frozen=True)
class _Writer:
    """Completes documents and bulk-writes them with the deletes, adding up into `report`."""

    store: DeltaStore
    es: Elasticsearch
    source: Source
    index: str
    model_id: str
    report: SyncReport
    options: BulkOptions

    def __call__(self, changed: pl.DataFrame, gone: pl.Series) -> None:
        docs = self.source.complete(self.store, changed, self.model_id)
        routed = is_routed(self.es, self.index)
        placed = (
            stored_routing(self.es, self.index, gone) if routed and not gone.is_empty() else None
        )
        result: BulkReport = bulk_write(
            self.es,
            chain(
                index_actions(
                    docs,
                    self.index,
                    json_columns=self.source.json_columns,
                    finish=self.source.finish,
                    routed=routed,
                ),
                delete_actions(gone, self.index, placed),
            ),
            raise_on_failure=False,
            **self.options,
        )
        self.report.rejected += settle(self.store, self.source.kind, self.index, result, docs, gone)
        self.report.indexed += result.indexed
        self.report.deleted += result.deleted
        if "embedding" in docs.columns:
            self.report.vectors += int(docs.get_column("embedding").is_not_null().sum())
