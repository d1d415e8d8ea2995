"""Build Elasticsearch documents from Delta frames: role rows (text, stems, vectors) and turns.

Documents are built in two steps so incremental syncs stay cheap: a `base` frame (what a doc's
content depends on, no stems or vectors) is diffed against the previous sync, then only the
changed rows are completed with stems and vectors and turned into bulk actions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np
import orjson
import polars as pl
import snowballstemmer

from ctxdb.embedding import OK, PENDING
from ctxdb.es.mappings import rows_mapping, turns_mapping

ID = "_id"
FINGERPRINT = "_fingerprint"
VECTOR = "embedding"
_CONTROL = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]"
_WORD = r"\w+"  # the word pattern of ctxdb.text.words
ROW_FIELDS = [f for f in rows_mapping()["properties"] if f not in {"stems", "embedding"}]
TURN_FIELDS = list(turns_mapping()["properties"])


def _clean(column: str) -> pl.Expr:
    """Control characters other than tab and newlines become spaces."""
    return pl.col(column).fill_null("").str.replace_all(_CONTROL, " ")


def with_fingerprint(frame: pl.DataFrame) -> pl.DataFrame:
    """Add a per-row content hash over every column but the id (for change detection)."""
    content = frame.drop(ID)
    return (
        frame.select(ID).with_columns(content.hash_rows(seed=0).alias(FINGERPRINT)).hstack(content)
    )


def row_base(rows: pl.DataFrame, statuses: pl.DataFrame, model_id: str) -> pl.DataFrame:
    """Role rows joined to their embedding status for `model_id` (pending when none applies)."""
    status = statuses.filter(pl.col("model_id") == model_id).select(
        "row_id", pl.col("text_hash").alias("_status_hash"), "embedding_status"
    )
    return with_fingerprint(
        rows.join(status, on="row_id", how="left")
        .with_columns(
            pl.when(pl.col("_status_hash") == pl.col("text_hash"))
            .then(pl.col("embedding_status"))
            .otherwise(pl.lit(PENDING))
            .alias("embedding_status"),
            pl.lit(model_id).alias("model_id"),
            _clean("text").alias("text"),
            _clean("anchors_text").alias("anchors_text"),
            pl.col("row_id").alias(ID),
        )
        .select(ID, *ROW_FIELDS)
    )


@lru_cache(maxsize=1)
def _stemmer() -> snowballstemmer.stemmer:
    return snowballstemmer.stemmer("english")


def stems_column(texts: pl.Series) -> pl.Series:
    """`ctxdb.text.stems` of every text, stemming each distinct word once (same output)."""
    rows = pl.DataFrame({"i": pl.int_range(texts.len(), eager=True), "w": texts})
    words = (
        rows.with_columns(pl.col("w").str.extract_all(_WORD))
        .explode("w")
        .drop_nulls("w")
        .with_columns(pl.col("w").str.to_lowercase())
    )
    distinct = words.get_column("w").unique().to_list()
    stemmed = dict(zip(distinct, _stemmer().stemWords(distinct), strict=True))
    joined = (
        words.with_columns(pl.col("w").replace_strict(stemmed, return_dtype=pl.String))
        .group_by("i", maintain_order=True)
        .agg(pl.col("w").str.join(" "))
    )
    return (
        rows.select("i")
        .join(joined, on="i", how="left", maintain_order="left")
        .get_column("w")
        .fill_null("")
        .alias("stems")
    )


def complete_rows(base: pl.DataFrame, vectors: pl.DataFrame) -> pl.DataFrame:
    """Add `embedding` (only where the status is ok); stems follow per slice in `with_stems`."""
    return (
        base.join(vectors, on="text_hash", how="left")
        .with_columns(
            pl.when(pl.col("embedding_status") == OK)
            .then(pl.col("vector"))
            .otherwise(None)
            .alias(VECTOR)
        )
        .drop("vector", FINGERPRINT)
    )


def with_stems(docs: pl.DataFrame) -> pl.DataFrame:
    """Add `stems` of text + anchors (done per bulk slice, overlapping earlier requests)."""
    return docs.with_columns(
        stems_column(docs.get_column("text") + " " + docs.get_column("anchors_text"))
    )


def vector_rows(vectors: pl.Series) -> list[np.ndarray | None]:
    """Each vector as a float32 numpy row (None where there is none), without Python floats."""
    out: list[np.ndarray | None] = [None] * vectors.len()
    present = vectors.is_not_null()
    positions = present.arg_true().to_list()
    if not positions:
        return out
    dense = vectors.filter(present)
    lengths = dense.list.len().to_numpy()
    flat = dense.explode().to_numpy().astype(np.float32, copy=False)
    if (lengths == lengths[0]).all():
        rows = list(flat.reshape(len(lengths), int(lengths[0])))
    else:
        rows = np.split(flat, np.cumsum(lengths)[:-1])
    for position, row in zip(positions, rows, strict=True):
        out[position] = row
    return out


def index_actions(
    frame: pl.DataFrame,
    index: str,
    chunk: int = 1000,
    json_columns: tuple[str, ...] = (),
    finish: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
) -> Iterator[dict[str, Any]]:
    """Bulk index actions (`_id` from the frame) whose `_source` is JSON serialized here by orjson
    (float32 vectors straight from numpy, in their shortest form); null fields are left out,
    `json_columns` hold JSON text that is sent as an object, and `finish` completes each slice."""
    for part in frame.iter_slices(chunk):
        if finish is not None:
            part = finish(part)
        vectors = (
            vector_rows(part.get_column(VECTOR)) if VECTOR in part.columns else [None] * part.height
        )
        for row, vector in zip(part.drop(VECTOR, strict=False).to_dicts(), vectors, strict=True):
            doc_id = row.pop(ID)
            for column in json_columns:
                row[column] = payload_object(row.get(column))
            source = {k: v for k, v in row.items() if v is not None}
            if vector is not None:
                source[VECTOR] = vector
            yield {"_index": index, "_id": doc_id, "_source": _dumps(source)}


def _dumps(source: dict[str, Any]) -> bytes:
    return orjson.dumps(source, option=orjson.OPT_SERIALIZE_NUMPY)


def turn_base(
    turn_logs: pl.DataFrame, catalog: pl.DataFrame, timelines: pl.DataFrame
) -> pl.DataFrame:
    """One document per TurnLog: its accounting and payload, catalog order and texts, and the
    title (catalog, else TurnLog, else conversation timeline). Turns without a TurnLog are left
    out (they are not findable, as in the reference)."""
    identity = ["tenant", "app", "agent", "user_id", "conversation_id"]
    logs = turn_logs.sort("updated_at").unique([*identity, "turn_id"], keep="last")
    cat = (
        catalog.sort("updated_at")
        .unique([*identity, "turn_id"], keep="last")
        .select(
            *identity,
            "turn_id",
            "ordinal",
            "first_user_text",
            "last_assistant_text",
            pl.col("title").alias("_catalog_title"),
            "last_activity_at",
        )
    )
    conv = (
        timelines.sort("updated_at")
        .unique(identity, keep="last")
        .select(*identity, pl.col("title").alias("_conversation_title"))
    )
    joined = logs.join(cat, on=[*identity, "turn_id"], how="left").join(
        conv, on=identity, how="left"
    )
    return with_fingerprint(
        joined.with_columns(
            pl.concat_str([pl.col("conversation_id"), pl.col("turn_id")], separator=":").alias(ID),
            pl.coalesce("_catalog_title", "title", "_conversation_title").alias("title"),
            pl.coalesce("last_activity_at", "ended_at").alias("last_activity_at"),
        ).select(ID, *TURN_FIELDS)
    )


def delete_actions(ids: pl.Series, index: str) -> Iterator[dict[str, Any]]:
    for doc_id in ids:
        yield {"_op_type": "delete", "_index": index, "_id": doc_id}


def payload_object(payload: str | None) -> dict[str, Any] | None:
    """The parsed TurnLog JSON object (None when missing)."""
    if payload is None:
        return None
    value = json.loads(payload)
    if not isinstance(value, dict):
        raise ValueError(f"TurnLog payload is not a JSON object: {payload[:80]!r}")
    return value
