"""Physical deletion primitives shared by the retention sweep and erasure.

Delta rows are deleted by predicate or by key (MERGE ... WHEN MATCHED DELETE), each commit
tagged with the deleting run's id so that `deleted_by` can count a run's deletes from the tables'
history (an interrupted attempt's included); Elasticsearch documents by id through
`ctxdb.index.bulk.bulk_write` (the embedded node has no delete_by_query), and
conversation files through `pyarrow.fs` (local paths and object stores).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties
from elasticsearch import ApiError, Elasticsearch, TransportError
from elasticsearch.helpers import scan
from pyarrow import fs as pafs

from ctxdb.index.bulk import BulkOptions, ElasticsearchUnavailable, bulk_write
from ctxdb.index.documents import ID, delete_actions
from ctxdb.index.mappings import alias_name
from ctxdb.index.routing import is_routed, stored_routing
from ctxdb.storage import object_store
from ctxdb.storage.delta import DeltaStore, among

log = logging.getLogger(__name__)

LOOKUP_IDS = 100_000
"""Ids pushed into one scan by `present_among`: a scan keeps only the matches of its ids, so
its memory is bounded by this many ids, whatever the size of the table."""
RUN_ID_KEY = "ctxdb.run_id"
"""Commit metadata key naming the retention sweep or erasure that made a Delta delete."""


def sql_ts(ts: datetime) -> str:
    """A UTC timestamp literal for Delta SQL predicates."""
    return "'" + ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ") + "'"


def columns_of(store: DeltaStore, table: str) -> list[str]:
    """Column names of a Delta table ([] when it does not exist)."""
    dt = store.table(table)
    return [] if dt is None else list(pa.schema(dt.schema().to_arrow()).names)


def row_count(store: DeltaStore, table: str) -> int:
    """Rows of a table from its Delta log (file statistics; 0 when it does not exist)."""
    dt = store.table(table)
    if dt is None:
        return 0
    return pc.sum(pa.table(dt.get_add_actions(flatten=True))["num_records"]).as_py() or 0


def part_count(store: DeltaStore, tables: Iterable[str], part_rows: int) -> int:
    """Parts of at most about `part_rows` rows of the largest of `tables` (at least one)."""
    return max(1, -(-max(row_count(store, t) for t in tables) // part_rows))


def present_among(scan: pl.LazyFrame, key: pl.Expr, ids: pl.Series) -> pl.Series:
    """The distinct values of `ids` that `key` takes in some row of `scan`.

    The ids go into the scan's predicate `LOOKUP_IDS` at a time, in sorted order so that each
    lookup spans a narrow range: files whose statistics rule that range out are skipped, the
    others stream through keeping only the matching keys, so memory is bounded by the ids, not
    by the table."""
    unique = ids.unique().sort()
    found = [
        scan.filter(among(key, unique.slice(start, LOOKUP_IDS)))
        .select(key.alias(ids.name))
        .unique()
        .collect()
        .to_series()
        for start in range(0, unique.len(), LOOKUP_IDS)
    ]
    return pl.concat(found) if found else unique.clear()


def run_tag(run_id: str | None) -> CommitProperties | None:
    """Commit properties naming `run_id` in the commit's metadata (None: untagged)."""
    return None if run_id is None else CommitProperties(custom_metadata={RUN_ID_KEY: run_id})


def delete_where(store: DeltaStore, table: str, predicate: str, run_id: str | None = None) -> int:
    """DELETE the rows matching a SQL predicate in one commit tagged with `run_id`."""
    dt = store.table(table)
    if dt is None:
        return 0
    with store.guarded(table, "delete from"):
        metrics = dt.delete(predicate, commit_properties=run_tag(run_id))
    return int(metrics.get("num_deleted_rows", 0))


def delete_keys(
    store: DeltaStore,
    table: str,
    keys: pl.DataFrame,
    run_id: str | None = None,
    within: str | None = None,
) -> int:
    """Delete the rows whose key columns match a row of `keys` (one MERGE commit tagged with
    `run_id`, reading only the files `within` and the keys' span may hold:
    `DeltaStore.delete_keys`)."""
    return store.delete_keys(table, keys, within=within, commit_properties=run_tag(run_id))


def deleted_by(
    store: DeltaStore, tables: Iterable[str], run_id: str, since: dict[str, int | None]
) -> dict[str, int]:
    """Rows each existing table lost to commits tagged with `run_id` after version `since[table]`
    (every commit when the table did not exist then): what the run deleted over all its
    attempts, read from the Delta log."""
    counts: dict[str, int] = {}
    for table in tables:
        dt = store.table(table)
        if dt is None:
            continue
        start = since.get(table)
        newer = dt.version() - start if start is not None else None
        counts[table] = 0
        if newer == 0:
            continue
        for commit in dt.history(newer):
            if commit.get(RUN_ID_KEY) != run_id:
                continue
            metrics = commit.get("operationMetrics") or {}
            deleted = metrics.get("num_deleted_rows", metrics.get("num_target_rows_deleted", 0))
            counts[table] += int(deleted)
    return counts


def vacuum(
    store: DeltaStore, tables: Iterable[str], hours: int, dry_run: bool, full: bool = False
) -> dict[str, int]:
    """VACUUM each existing table, removing files tombstoned more than `hours` ago.

    Only files the log removed are deleted (not a "full" vacuum), so a concurrent writer's
    uncommitted files are never touched even with `hours=0`. `full` also deletes every other
    file the current version does not read that is older than `hours`: the change data feed's
    `_change_data` files (pre-images of deleted rows), which no log entry removes; the caller
    holds the writer lease, so no writer of the table has uncommitted files.
    """
    removed: dict[str, int] = {}
    for table in tables:
        dt = store.table(table)
        if dt is None:
            continue
        files = dt.vacuum(
            retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False, full=full
        )
        removed[table] = len(files)
    return removed


@dataclass
class EsDeleteResult:
    """Outcome of deleting documents by id: what went, what was already gone, what is pending."""

    deleted: dict[str, int] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    failed: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not any(self.failed.values())


def kind_indices(es: Elasticsearch, prefix: str, kind: str) -> list[str]:
    """Every concrete index of `kind`: those behind the alias plus every versioned index.

    Deleting from all versions means a document is also removed from an index a concurrent
    reindex is still building, so an alias swap cannot bring it back.
    """
    alias = alias_name(prefix, kind)
    found = es.indices.get(
        index=f"{alias},{alias}-v*",
        allow_no_indices=True,
        ignore_unavailable=True,
        expand_wildcards="open",
    )
    return sorted(found.body)


def delete_docs(
    es: Elasticsearch,
    prefix: str,
    ids: Mapping[str, Sequence[str]],
    bulk: BulkOptions,
) -> EsDeleteResult:
    """Bulk-delete documents by id from every index of each kind (`{"rows": [...], ...}`)
    through `bulk_write` with the sync's `bulk` options (chunk size, retries of 429s, a timeout
    per request).

    A 404 (document or index already gone) counts as deleted-before. The first connection
    failure or timeout is reported in `error`; the ids that were not confirmed gone are listed
    in `failed`.
    """
    result = EsDeleteResult()
    for kind, doc_ids in ids.items():
        doc_ids = list(dict.fromkeys(doc_ids))
        result.deleted[kind] = 0
        result.missing[kind] = 0
        failed = _delete_kind(es, prefix, kind, doc_ids, bulk, result) if doc_ids else set()
        result.failed[kind] = sorted(failed)
        if failed:
            result.error = result.error or f"{len(failed)} {kind} deletes not confirmed"
            log.warning("%d %s documents not deleted from Elasticsearch", len(failed), kind)
    return result


def _delete_kind(
    es: Elasticsearch,
    prefix: str,
    kind: str,
    doc_ids: list[str],
    bulk: BulkOptions,
    result: EsDeleteResult,
) -> set[str]:
    """Delete `doc_ids` from every index of `kind`, counting into `result`; the ids not
    confirmed gone (all of them when Elasticsearch failed, with `result.error` saying why)."""
    try:
        indices = kind_indices(es, prefix, kind)
        actions, unplaced = _delete_actions(es, indices, doc_ids)
        report = bulk_write(es, actions, **bulk, raise_on_failure=False)
        if indices:
            es.indices.refresh(index=",".join(indices))
    except (TransportError, ApiError, ElasticsearchUnavailable) as exc:
        result.error = result.error or f"{type(exc).__name__}: {exc}"
        return set(doc_ids)
    result.deleted[kind] += report.deleted
    result.missing[kind] += unplaced + report.not_found
    return {failure["id"] for failure in report.failures}


def _delete_actions(
    es: Elasticsearch, indices: Sequence[str], doc_ids: Sequence[str]
) -> tuple[Iterator[dict], int]:
    """Deletes of `doc_ids` from every index, and how many (index, id) pairs are known gone
    already. On an index routed by user each delete carries the routing its document was
    indexed with, read back by a search after a refresh (retention and erasure know ids, not
    users); ids that search does not find are not in that index."""
    parts: list[Iterator[dict]] = []
    unplaced = 0
    ids = pl.Series(ID, doc_ids, dtype=pl.String)
    for index in indices:
        placed = None
        if is_routed(es, index):
            es.indices.refresh(index=index)
            placed = stored_routing(es, index, doc_ids)
            unplaced += len(doc_ids) - len(placed)
        parts.append(delete_actions(ids, index, placed))
    return chain.from_iterable(parts), unplaced


def scan_sources(
    es: Elasticsearch, prefix: str, kind: str, query: dict, fields: Sequence[str]
) -> pl.DataFrame:
    """`fields` of every document of `kind` (all index versions) matching `query`."""
    schema = dict.fromkeys(fields, pl.String)
    indices = kind_indices(es, prefix, kind)
    if not indices:
        return pl.DataFrame(schema=schema)
    hits = scan(
        es, index=",".join(indices), query={"query": query, "_source": list(fields)}, size=1000
    )
    found = [{f: hit["_source"].get(f) for f in fields} for hit in hits]
    return pl.DataFrame(found, schema=schema)


def scan_ids(es: Elasticsearch, prefix: str, kind: str, query: dict) -> list[str]:
    """Ids of every document of `kind` (all index versions) matching `query`."""
    indices = kind_indices(es, prefix, kind)
    if not indices:
        return []
    hits = scan(es, index=",".join(indices), query={"query": query, "_source": False}, size=1000)
    return list(dict.fromkeys(hit["_id"] for hit in hits))


def count_docs(es: Elasticsearch, prefix: str, kind: str, query: dict) -> int:
    """How many documents of `kind` (all index versions) match `query`."""
    indices = kind_indices(es, prefix, kind)
    if not indices:
        return 0
    return int(es.count(index=",".join(indices), query=query)["count"])


def remove_paths(
    root: str, relative: Iterable[str], storage_options: object_store.StorageOptions | None = None
) -> int:
    """Delete files or directories under the storage root `root` (reached with
    `storage_options`); returns how many existed."""
    filesystem, base = object_store.filesystem(object_store.absolute(root), storage_options)
    removed = 0
    for rel in dict.fromkeys(relative):
        path = f"{base.rstrip('/')}/{rel.strip('/')}"
        info = filesystem.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            filesystem.delete_dir(path)
            removed += 1
        elif info.type == pafs.FileType.File:
            filesystem.delete_file(path)
            removed += 1
    return removed


def existing_paths(
    root: str, relative: Iterable[str], storage_options: object_store.StorageOptions | None = None
) -> list[str]:
    """The paths of `relative` present under the storage root `root` (reached with
    `storage_options`)."""
    filesystem, base = object_store.filesystem(object_store.absolute(root), storage_options)
    return [
        rel
        for rel in relative
        if filesystem.get_file_info(f"{base.rstrip('/')}/{rel.strip('/')}").type
        != pafs.FileType.NotFound
    ]
