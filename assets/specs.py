"""Declarations shared by every ctxdb table asset: owner, kinds, column schema and row counts.

Each Delta table ctxdb writes is a Dagster asset whose definition carries the table's column
schema (from the Arrow schema in `ctxdb.storage.tables.SCHEMAS`) and whose materializations carry
`dagster/row_count` plus the rows the run added, updated and deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa
from dagster import AssetKey, AssetMaterialization, AssetSpec, TableColumn, TableSchema

from ctxdb.storage.changes import row_count
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import SCHEMAS

OWNERS = ["team:ctxdb"]
DELTA_KINDS = {"delta", "polars"}
WRITER_POOL = "ctxdb_writer"


def column_schema(schema: pa.Schema) -> TableSchema:
    """Dagster's column schema of an Arrow schema (type names as Arrow prints them)."""
    return TableSchema(
        columns=[
            TableColumn(
                name=f.name, type=str(f.type), description=None if f.nullable else "not null"
            )
            for f in schema
        ]
    )


def table_definition_metadata(table: str) -> dict[str, TableSchema | str]:
    return {"dagster/column_schema": column_schema(SCHEMAS[table]), "dagster/table_name": table}


def table_spec(
    table: str,
    description: str,
    *,
    group: str,
    deps: Iterable[str] = (),
    kinds: set[str] | None = None,
) -> AssetSpec:
    """The AssetSpec of one ctxdb Delta table."""
    return AssetSpec(
        key=AssetKey(table),
        deps=[AssetKey(d) for d in deps],
        description=description,
        group_name=group,
        owners=OWNERS,
        kinds=kinds or DELTA_KINDS,
        metadata=table_definition_metadata(table),
    )


def materialization_metadata(
    store: DeltaStore, table: str, written: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Row count of the table now, and what this run added, updated and deleted in it."""
    written = written or {}
    version = store.version(table)
    return {
        "dagster/row_count": row_count(store, table),
        "rows_added": int(written.get("inserted", written.get("added", 0))),
        "rows_updated": int(written.get("updated", 0)),
        "rows_deleted": int(written.get("deleted", 0)),
        "delta_version": -1 if version is None else version,
    }


def table_changes(
    store: DeltaStore, deleted: Mapping[str, int], written: Iterable[str], description: str
) -> list[AssetMaterialization]:
    """Materializations an op job reports for the tables it changed: rows it deleted per table,
    and the tables it appended to (its report and pending tables)."""
    changed = {table: {"deleted": int(n)} for table, n in deleted.items() if n and table in SCHEMAS}
    changed.update({table: {} for table in written if table in SCHEMAS and table not in changed})
    return [
        AssetMaterialization(
            asset_key=table,
            description=description,
            metadata=materialization_metadata(store, table, counts),
        )
        for table, counts in sorted(changed.items())
    ]
