"""The embedding stage: role rows -> vectors in the cache and a status per row and model.

What the model reads of a row is its `context` and `text` (`ctxdb.record.role_rows.
embedded_text_expr`), keyed by `text_hash`. Identical texts are embedded once per model; a failed
batch is retried row by row; rows whose embedding failed (or whose model could not load) keep a
status and are retried on a later run, while their text stays indexable lexically. Empty texts are
never sent to the model.

Each run reads only what changed: the `role_rows` version it covered and the number of rows it
left to retry are committed per model as watermarks in `role_row_embeddings`' Delta log. The next
run reads the role rows changed since (`ctxdb.storage.changes`: the change data feed, or the files
the log added and removed), plus the rows left to retry, and the statuses of just those rows; a
run with nothing new reads no rows at all. Without a watermark (first run, another model), when
the statuses also carry another model id (a switch back to a model or backend used before, whose
old watermark no longer covers every row), or when the older changes can no longer be read, it
reads every role row: part by part (`FULL_PART_ROWS` rows each, by a stable hash of `row_id`),
each part with its statuses read by a streaming scan, embedded and MERGEd before the next, so a
full pass holds one part in memory, not the table.

Given a `Shard`, a run covers only the role rows of that shard's conversations
(`ctxdb.storage.shards`) and keeps its own watermarks, so the shards of one count run in parallel
processes; their status MERGEs touch disjoint rows and are rerun when another shard commits first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl
import pyarrow as pa

from ctxdb.embedding.cache import cached_hashes, embed_texts
from ctxdb.embedding.ids import BACKENDS, backend_model_id
from ctxdb.embedding.model import Embedder, EmbedderUnavailable
from ctxdb.record.role_rows import embedded_text_expr
from ctxdb.storage.arrow import frame_of
from ctxdb.storage.changes import (
    ChangesUnavailable,
    comparable_columns,
    row_count,
    set_watermarks,
    table_changes,
    watermark,
)
from ctxdb.storage.delta import DeltaStore, sql_in
from ctxdb.storage.shards import Shard, in_shard
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA, ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA

log = logging.getLogger(__name__)

OK = "ok"
FAILED = "failed"
PENDING = "pending"
SKIPPED = "skipped"  # empty or whitespace-only text: never sent to the model, indexed lexically
ROW_COLUMNS = ["row_id", "text", "text_hash", "conversation_id", "context", "expires_at"]
BLANK = pl.col("text").str.strip_chars().str.len_chars() == 0
"""A row whose embedded text is empty or whitespace: `skipped`, never sent to the model."""


def stored_model_ids(store: DeltaStore, model_names: Collection[str] = ()) -> set[str]:
    """Model ids the memory's embedding statuses carry, from the min and max statistics the Delta
    log keeps per file (no data read); the column itself is read only when the table has rows
    but its statistics name none of the ids `model_names` would have (absent or truncated)."""
    dt = store.table(ROW_EMBEDDINGS)
    if dt is None:
        return set()
    files = pl.DataFrame(dt.get_add_actions(flatten=True))
    if files.is_empty():
        return set()
    bounds = [c for c in ("min.model_id", "max.model_id") if c in files.columns]
    ids = set(pl.concat([files.get_column(c) for c in bounds]).drop_nulls()) if bounds else set()
    wanted = {backend_model_id(name, b) for name in model_names for b in BACKENDS}
    if wanted and not ids & wanted:
        column = store.scan(ROW_EMBEDDINGS).select("model_id").unique().collect()
        ids = set(column.get_column("model_id").drop_nulls())
    return ids


def _scoped(mark: str, shard: Shard | None) -> str:
    return mark if shard is None else f"{mark}/{shard.name}"


def covered_mark(model_id: str, shard: Shard | None = None) -> str:
    """Watermark id: the `role_rows` version whose rows (of `shard`, when given) all have a
    status for `model_id`."""
    return _scoped(f"ctxdb.embedding/{model_id}", shard)


def retry_mark(model_id: str, shard: Shard | None = None) -> str:
    """Watermark id: how many rows (of `shard`) the last run for `model_id` left pending or
    failed."""
    return _scoped(f"ctxdb.embedding.retry/{model_id}", shard)


@dataclass
class EmbedReport:
    """What one embedding run did."""

    total_rows: int = 0
    to_process: int = 0
    cache_hits: int = 0
    embedded: int = 0
    failed: int = 0
    skipped: int = 0
    pending: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def rows_per_s(self) -> float:
        return self.embedded / self.seconds if self.seconds > 0 else 0.0

    def as_metadata(self) -> dict[str, float | int | str]:
        data: dict[str, float | int | str] = {
            k: v for k, v in self.__dict__.items() if v is not None
        }
        data["rows_per_s"] = round(self.rows_per_s, 1)
        return data


def rows_needing_embedding(
    rows: pl.DataFrame, statuses: pl.DataFrame, model_id: str
) -> pl.DataFrame:
    """Rows without a final status for (model, text hash): new, changed, pending or failed."""
    done = statuses.filter(
        pl.col("embedding_status").is_in([OK, SKIPPED]) & (pl.col("model_id") == model_id)
    ).select("row_id", "text_hash")
    return rows.join(done, on=["row_id", "text_hash"], how="anti")


def rows_to_embed(rows: pl.DataFrame, statuses: pl.DataFrame, model_id: str) -> pl.DataFrame:
    """The rows of a part that need a status for `model_id`, with `text` replaced by what the
    model reads (context and text) and their past `attempts`."""
    return (
        rows_needing_embedding(rows, statuses, model_id)
        .with_columns([] if "context" in rows.columns else pl.lit(None, pl.String).alias("context"))
        .with_columns(embedded_text_expr().alias("text"))
        .join(statuses.select("row_id", "attempts"), on="row_id", how="left")
        .with_columns(pl.col("attempts").fill_null(0))
    )


def status_frame(
    row_ids: pl.DataFrame, model_id: str, status: str, error: str | None, now: datetime
) -> pl.DataFrame:
    """`role_row_embeddings` rows for `row_ids` (row_id, text_hash, attempts, expires_at): one
    status each, carrying its row's expiry (the retention sweep's bound)."""
    return row_ids.select(
        "row_id",
        pl.lit(model_id).alias("model_id"),
        "text_hash",
        pl.lit(status).alias("embedding_status"),
        pl.lit(error, dtype=pl.String).alias("error"),
        (pl.col("attempts") + (0 if status in (OK, SKIPPED) else 1)).cast(pl.Int32),
        pl.lit(now).alias("updated_at"),
        pl.col("expires_at").cast(pl.Datetime("us", "UTC")),
    )


def embed_role_rows(
    store: DeltaStore,
    embedder: Embedder,
    *,
    batch_size: int = 64,
    progress_every_s: float = 10.0,
    progress: Callable[[str], None] = log.info,
    shard: Shard | None = None,
) -> EmbedReport:
    """Bring `role_row_embeddings` up to date with `role_rows` for `embedder.model_id` (the rows
    of `shard` only, when given).

    Cache hits cost nothing; empty texts are `skipped`; rows whose batch and single retry failed
    are `failed`; if the model cannot load, every row still to embed is `pending`. Status rows of
    role rows that no longer exist are deleted.
    """
    started = time.monotonic()
    report = EmbedReport(total_rows=row_count(store, ROLE_ROWS))
    bounds = pass_bounds(store, embedder.model_id, shard)
    if bounds is not None:
        for rows, statuses in candidate_parts(store, embedder.model_id, bounds, shard):
            _embed_part(
                store, embedder, rows, statuses, report, batch_size, progress_every_s, progress
            )
        _commit_marks(store, embedder.model_id, bounds.version, report, shard)
    report.seconds = time.monotonic() - started
    return report


@dataclass(frozen=True)
class PassBounds:
    """What a run reads: `role_rows` up to `version`, changed since `since` (None: every row),
    plus the rows left to retry when `retry` > 0."""

    version: int
    since: int | None
    retry: int


def pass_bounds(store: DeltaStore, model_id: str, shard: Shard | None) -> PassBounds | None:
    """The bounds of the next run for `model_id` (of `shard`), from its watermarks; None when
    it has nothing to do (no role rows, or every row covered and none left to retry)."""
    version = store.version(ROLE_ROWS)
    since = watermark(store, ROW_EMBEDDINGS, covered_mark(model_id, shard))
    retry = watermark(store, ROW_EMBEDDINGS, retry_mark(model_id, shard)) or 0
    others = stored_model_ids(store) - {model_id} if since is not None else set()
    if others:  # another model or backend ran since this one's watermark: statuses to take back
        log.info("statuses of %s: a full pass for %s", sorted(others), model_id)
        since = None
    if version is None or (since == version and retry == 0):
        return None
    return PassBounds(version, since, retry)


def _embed_part(
    store: DeltaStore,
    embedder: Embedder,
    rows: pl.DataFrame,
    statuses: pl.DataFrame,
    report: EmbedReport,
    batch_size: int,
    progress_every_s: float,
    progress: Callable[[str], None],
) -> None:
    """Embed the rows of one part that need it and MERGE their statuses, adding into `report`;
    once the model failed to load, the misses of later parts go `pending` without a new try."""
    todo = rows_to_embed(rows, statuses, embedder.model_id)
    report.to_process += todo.height
    if todo.is_empty():
        return
    now = datetime.now(UTC)
    empty, todo = todo.filter(BLANK), todo.filter(~BLANK)
    frames = [status_frame(empty, embedder.model_id, SKIPPED, "empty text", now)]
    report.skipped += empty.height

    hits = cached_hashes(store, embedder.model_id, todo.get_column("text_hash").unique())
    is_hit = pl.col("text_hash").is_in(hits.implode())
    frames.append(status_frame(todo.filter(is_hit), embedder.model_id, OK, None, now))
    report.cache_hits += todo.filter(is_hit).height
    misses = todo.filter(~is_hit)
    if not misses.is_empty():
        frames += _embed_misses(
            store, embedder, misses, report, now, batch_size, progress_every_s, progress
        )
    store.upsert(
        ROW_EMBEDDINGS, pl.concat(frames), ["row_id"], schema=ROW_EMBEDDINGS_SCHEMA, evolve=True
    )


def _embed_misses(
    store: DeltaStore,
    embedder: Embedder,
    misses: pl.DataFrame,
    report: EmbedReport,
    now: datetime,
    batch_size: int,
    progress_every_s: float,
    progress: Callable[[str], None],
) -> list[pl.DataFrame]:
    """The statuses of the rows no cache holds, adding into `report`: each distinct text embedded
    once (`ok`, or `failed` after its single retry), or every row `pending` when the model cannot
    load (or failed to load for an earlier part)."""
    try:
        if report.error:
            raise EmbedderUnavailable(report.error)
        embedder.load()
    except EmbedderUnavailable as exc:
        report.error = str(exc)
        report.pending += misses.height
        log.error("embedding model unavailable, %d rows stay pending: %s", misses.height, exc)
        return [status_frame(misses, embedder.model_id, PENDING, str(exc), now)]
    unique = misses.unique("text_hash", keep="first").select("text_hash", "text")
    failures = embed_texts(
        store,
        embedder,
        unique,
        batch_size=batch_size,
        progress_every_s=progress_every_s,
        progress=progress,
    )
    errors = pl.DataFrame(
        {"text_hash": list(failures), "error": list(failures.values())},
        schema={"text_hash": pl.String, "error": pl.String},
    )
    failed = misses.join(errors, on="text_hash", how="inner")
    done = misses.join(errors, on="text_hash", how="anti")
    report.embedded += unique.height - len(failures)
    report.failed += failed.height
    return [
        status_frame(done, embedder.model_id, OK, None, now),
        status_frame(failed, embedder.model_id, FAILED, None, now).with_columns(
            error=failed.get_column("error")
        ),
    ]


FULL_PART_ROWS = 200_000
"""Role rows per part of a full pass: each part is read, embedded and MERGEd on its own, so the
pass's memory is bounded by a part, not by `role_rows`."""


def candidate_parts(
    store: DeltaStore,
    model_id: str,
    bounds: PassBounds,
    shard: Shard | None,
    *,
    drop_gone: bool = True,
) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
    """(role rows of `shard` that may need embedding, their statuses): the rows changed since the
    covered version plus, when the last run left some, the rows without a final status; every row,
    part by part, when there is no watermark or the covered version is gone
    (`ChangesUnavailable`; any other failure to read the changes is raised). With `drop_gone`,
    the statuses of deleted rows are dropped (the stage does; the prefill only reads)."""
    columns = _row_columns(store)
    since, version, retry = bounds.since, bounds.version, bounds.retry
    if since is not None:
        try:
            changes = table_changes(store, ROLE_ROWS, since, version, columns=columns)
        except ChangesUnavailable as exc:
            log.warning("full pass over role_rows: version %d is gone (%s)", since, exc)
        else:
            new, old = (in_shard(frame, shard) for frame in changes.changed())
            if drop_gone:
                _drop_statuses(store, old.join(new, on="row_id", how="anti"))
            if retry:
                unfinished = in_shard(_unfinished(store, model_id, columns), shard)
                new = pl.concat([new, unfinished]).unique("row_id")
            yield new, _statuses_of(store, new.get_column("row_id"))
            return
    count = max(1, -(-row_count(store, ROLE_ROWS) // FULL_PART_ROWS))
    for number in range(count):
        rows = _read_part(store, ROLE_ROWS, ROLE_ROWS_SCHEMA, Shard(number, count), columns)
        statuses = _read_part(store, ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA, Shard(number, count))
        if drop_gone:
            _drop_statuses(store, statuses.join(rows.select("row_id"), on="row_id", how="anti"))
        rows = in_shard(rows, shard)
        yield rows, statuses.join(rows.select("row_id"), on="row_id", how="semi")


def _row_columns(store: DeltaStore) -> list[str]:
    """The ROW_COLUMNS `role_rows` holds: a table derived before `context` existed lacks it
    until derivation writes to it again (its rows then have no context)."""
    return comparable_columns(store, ROLE_ROWS, None, store.version(ROLE_ROWS), ROW_COLUMNS)


def _read_part(
    store: DeltaStore, table: str, schema: pa.Schema, part: Shard, columns: list[str] | None = None
) -> pl.DataFrame:
    """The rows of `table` whose `row_id` hashes into `part`, by a streaming scan."""
    if part.count == 1 or not store.exists(table):
        return store.read(table, schema, columns=columns)
    scan = store.scan(table).filter(part.expr("row_id"))
    return scan.select(columns or schema.names).collect(engine="streaming")


def _unfinished(store: DeltaStore, model_id: str, columns: list[str]) -> pl.DataFrame:
    """Role rows whose status for `model_id` is not final (pending or failed)."""
    if not store.exists(ROW_EMBEDDINGS):
        return frame_of(ROLE_ROWS_SCHEMA.empty_table()).select(columns)
    ids = (
        store.scan(ROW_EMBEDDINGS)
        .filter((pl.col("model_id") == model_id) & ~pl.col("embedding_status").is_in([OK, SKIPPED]))
        .select("row_id")
        .collect()
        .get_column("row_id")
    )
    return (
        store.scan(ROLE_ROWS)
        .filter(pl.col("row_id").is_in(ids.implode()))
        .select(columns)
        .collect()
    )


def _statuses_of(store: DeltaStore, row_ids: pl.Series) -> pl.DataFrame:
    if row_ids.is_empty() or not store.exists(ROW_EMBEDDINGS):
        return frame_of(ROW_EMBEDDINGS_SCHEMA.empty_table())
    return store.scan(ROW_EMBEDDINGS).filter(pl.col("row_id").is_in(row_ids.implode())).collect()


def _commit_marks(
    store: DeltaStore, model_id: str, version: int, report: EmbedReport, shard: Shard | None
) -> None:
    """Record that every row (of `shard`) of `role_rows` at `version` has a status for
    `model_id`, and how many of them the next run must retry."""
    marks = {
        covered_mark(model_id, shard): version,
        retry_mark(model_id, shard): report.failed + report.pending,
    }
    set_watermarks(store, ROW_EMBEDDINGS, marks, ROW_EMBEDDINGS_SCHEMA)


def _drop_statuses(store: DeltaStore, rows: pl.DataFrame) -> None:
    """Delete the statuses of `rows` (role rows that no longer exist)."""
    gone = rows.get_column("row_id").unique()
    for start in range(0, gone.len(), 1000):
        store.delete(ROW_EMBEDDINGS, sql_in("row_id", gone.slice(start, 1000).to_list()))
