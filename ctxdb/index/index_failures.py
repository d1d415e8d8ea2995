"""Poison isolation for indexing: a document Elasticsearch rejects as bad is recorded in
`index_failures` and the sync goes on; any other failure still fails it.

Elasticsearch answers a bad document (a date it cannot read, a vector of the wrong size, a value
its mapping refuses) with status 400 for that item alone: resending it cannot help, so it is
recorded and the sync advances. Anything else (429 after the bulk retries, 5xx, a missing index)
may pass on a rerun, so the sync fails and its state stays where it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl

from ctxdb.index.bulk import BulkReport, BulkWriteFailed
from ctxdb.index.documents import ID
from ctxdb.storage.delta import DeltaStore, sql_in
from ctxdb.storage.tables import INDEX_FAILURES, INDEX_FAILURES_SCHEMA

log = logging.getLogger(__name__)

REJECTED = frozenset({400})
"""Item statuses of a document that is itself bad."""
OWNER = ["tenant", "app", "user_id", "conversation_id"]
ERROR_CHARS = 2_000


def rejected_documents(report: BulkReport) -> list[dict[str, Any]]:
    """The failed items of `report` that are bad documents; raises `BulkWriteFailed` with the
    others when there are any (they may pass on a rerun)."""
    rejected = [f for f in report.failures if f["op"] != "delete" and f["status"] in REJECTED]
    others = [f for f in report.failures if f not in rejected]
    if others:
        raise BulkWriteFailed(others, report)
    return rejected


def settle(
    store: DeltaStore,
    kind: str,
    index: str,
    report: BulkReport,
    docs: pl.DataFrame,
    gone: pl.Series,
    now: datetime | None = None,
) -> int:
    """Record the documents of `docs` Elasticsearch rejected and clear the entries of the ones
    it now took (written, or deleted as `gone`); returns how many were rejected."""
    rejected = rejected_documents(report)
    rejected_ids = [f["id"] for f in rejected]
    done = pl.concat([docs.get_column(ID), gone.alias(ID)])
    done = done.filter(~done.is_in(pl.Series(rejected_ids, dtype=pl.String).implode()))
    _clear(store, kind, done)
    if rejected:
        _record(store, kind, index, rejected, docs, now or datetime.now(UTC))
    return len(rejected)


def _record(
    store: DeltaStore,
    kind: str,
    index: str,
    rejected: Sequence[dict[str, Any]],
    docs: pl.DataFrame,
    now: datetime,
) -> None:
    owners = docs.select(ID, *[c for c in OWNER if c in docs.columns])
    rows = (
        pl.DataFrame(
            {
                ID: [f["id"] for f in rejected],
                "status": [f["status"] for f in rejected],
                "error": [" ".join(str(f["reason"]).split())[:ERROR_CHARS] for f in rejected],
            },
            schema={ID: pl.String, "status": pl.Int32, "error": pl.String},
        )
        .join(owners, on=ID, how="left")
        .with_columns(
            pl.lit(kind).alias("kind"),
            pl.col(ID).alias("doc_id"),
            pl.lit(index).alias("index_name"),
            *[pl.lit(None, dtype=pl.String).alias(c) for c in OWNER if c not in docs.columns],
            pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("failed_at"),
        )
        .select(INDEX_FAILURES_SCHEMA.names)
    )
    store.upsert(INDEX_FAILURES, rows, ["kind", "doc_id"], INDEX_FAILURES_SCHEMA)
    log.warning(
        "%s: %d documents rejected by Elasticsearch, recorded in %s (first: %s: %s)",
        index,
        rows.height,
        INDEX_FAILURES,
        rows["doc_id"][0],
        rows["error"][0],
    )


def _clear(store: DeltaStore, kind: str, ids: pl.Series) -> int:
    if ids.is_empty() or not store.exists(INDEX_FAILURES):
        return 0
    present = store.read(INDEX_FAILURES, INDEX_FAILURES_SCHEMA, columns=["kind", "doc_id"])
    fixed = present.filter((pl.col("kind") == kind) & pl.col("doc_id").is_in(ids.implode()))
    if fixed.is_empty():
        return 0
    return store.delete(INDEX_FAILURES, f"kind = '{kind}' AND {sql_in('doc_id', fixed['doc_id'])}")


def failures_report(store: DeltaStore, sample: int = 20) -> dict[str, Any]:
    """Rejected documents now recorded: the count, per index kind, and a sample (id: error)."""
    failures = store.read(INDEX_FAILURES, INDEX_FAILURES_SCHEMA).sort("kind", "doc_id")
    return {
        "count": failures.height,
        "by_kind": {kind: int(n) for kind, n in failures.group_by("kind").len().iter_rows()},
        "offenders": [
            f"{kind}/{doc_id}: {error}"
            for kind, doc_id, error in failures.select("kind", "doc_id", "error")
            .head(sample)
            .rows()
        ],
    }
