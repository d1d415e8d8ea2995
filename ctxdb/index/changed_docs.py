"""Base frames of just the documents whose source rows changed between two synced versions.

A source declares its `scope`: columns every one of its tables carries such that a document
depends only on rows sharing its scope value (a row id for row documents, the conversation for
turn documents). The scope values to rebuild are those of rows that changed in any source table
(`ctxdb.storage.changes`: its change data feed, or the files the Delta log added and removed).
Each table's rows with those values at the newer version are its changed rows plus the unchanged
rows looked up by key; at the older version, the same unchanged rows plus the older versions of
the changed ones. Where a table holds one row per scope value (`unique_scope`), a value found
among the changed rows is not looked up again, so new rows cost no read of other files at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ctxdb.storage.arrow import frame_of
from ctxdb.storage.changes import comparable_columns, keys_frame, table_changes
from ctxdb.storage.delta import DeltaStore

if TYPE_CHECKING:
    from ctxdb.index.sources import Source, Versions


def changed_bases(
    store: DeltaStore, source: Source, old: Versions, new: Versions, model_id: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(base at `new`, base at `old`) of the documents in scope of a change between the two
    versions; raises `ChangesUnavailable` when the older version is gone (log cleaned up, a file
    vacuumed) or lacks a column the newer one holds (a contract upgrade), and `ChangesUnreadable`
    when reading kept failing (every read is retried: `ctxdb.storage.changes.read_retried`)."""
    changes = {}
    for table in source.tables:
        schema = source.schemas[table]
        since, until = old.get(table), new[table]
        held = comparable_columns(store, table, since, until, schema.names)
        changes[table] = table_changes(store, table, since, until, schema=schema, columns=held)
    deltas = {table: change.changed() for table, change in changes.items()}
    scope = list(source.scope)
    scopes = keys_frame([frame for pair in deltas.values() for frame in pair], scope)
    frames_new, frames_old = {}, {}
    for table, change in changes.items():
        empty = frame_of(source.schemas[table].empty_table())
        if scopes.is_empty():
            frames_new[table] = frames_old[table] = empty
            continue
        new_rows, old_rows = (f.join(scopes, on=scope, how="semi") for f in deltas[table])
        if source.unique_scope:  # a changed row is its value's only row: look up the others
            seen = pl.concat([new_rows.select(scope), old_rows.select(scope)])
            current = _stack(
                empty, new_rows, change.current(scopes.join(seen, on=scope, how="anti"))
            )
        else:
            current = _stack(empty, change.current(scopes))
        unchanged = current.filter(~current.hash_rows(seed=0).is_in(_hashes(new_rows, empty)))
        frames_new[table] = current
        frames_old[table] = _stack(empty, unchanged, old_rows)
    return source.base(frames_new, model_id), source.base(frames_old, model_id)


def _hashes(rows: pl.DataFrame, empty: pl.DataFrame) -> pl.Series:
    return _stack(empty, rows).hash_rows(seed=0).implode()


def _stack(empty: pl.DataFrame, *frames: pl.DataFrame) -> pl.DataFrame:
    """`frames` under `empty`'s columns; a column a frame lacks (absent from the table version
    it was read at) is null."""
    parts = [f for f in frames if not f.is_empty()]
    if not parts:
        return empty
    return pl.concat([empty, *parts], how="diagonal_relaxed").select(empty.columns)
