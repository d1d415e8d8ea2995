"""Build Elasticsearch documents from Delta frames: role rows (text, stems, vectors) and turns.

Documents are built in two steps so incremental syncs stay cheap: a `base` frame (what a doc's
content depends on, no stems or vectors) is diffed against the previous sync, then only the
changed rows are completed with stems and vectors and turned into bulk actions.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

import polars as pl
import snowballstemmer

from ctxdb.embedding.stage import OK, PENDING
from ctxdb.index.mappings import rows_mapping, turns_mapping
from ctxdb.index.routing import routing_key
from ctxdb.text import CONTROL_CHARS, STOPWORDS, words

ID = "_id"
FINGERPRINT = "_fingerprint"
VECTOR = "embedding"
_WORD = r"\w+"  # ctxdb.text.words' pattern; equal to Python's on ASCII text
_NON_ASCII = r"[^\x00-\x7F]"
STEMMED = ["text", "anchors_text", "context"]
"""The document fields whose words `stems` holds."""
ROW_FIELDS = [f for f in rows_mapping()["properties"] if f not in {"stems", "embedding"}]
TURN_FIELDS = list(turns_mapping()["properties"])
LATER_TURN_LOG_COLUMNS = ("status", "error_type", "project")
"""TurnLog columns added after tables were first written: null in a TurnLog derived before."""


def _clean(column: str) -> pl.Expr:
    """Control characters other than tab and newlines become spaces."""
    return pl.col(column).fill_null("").str.replace_all(CONTROL_CHARS, " ")


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
    missing = [c for c in ("context", "project") if c not in rows.columns]
    if missing:  # a table derived before the columns existed
        rows = rows.with_columns(pl.lit(None, pl.String).alias(c) for c in missing)
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
            _clean("context").alias("context"),
            pl.col("row_id").alias(ID),
        )
        .select(ID, *ROW_FIELDS)
    )


@lru_cache(maxsize=1)
def _stemmer() -> snowballstemmer.stemmer:
    return snowballstemmer.stemmer("english")


_STEM_CACHE: dict[str, str] = {}
_STEM_CACHE_MAX = 500_000


def _stem_map(distinct: list[str]) -> dict[str, str]:
    """Stem of each word, from a per-process cache; ASCII digit runs are their own stem."""
    todo = [w for w in distinct if w not in _STEM_CACHE and not (w.isascii() and w.isdigit())]
    if len(_STEM_CACHE) + len(todo) > _STEM_CACHE_MAX:
        _STEM_CACHE.clear()
    _STEM_CACHE.update(zip(todo, _stemmer().stemWords(todo), strict=True))
    return {w: _STEM_CACHE.get(w, w) for w in distinct}


def stems_column(texts: pl.Series) -> pl.Series:
    """`ctxdb.text.stems` of every text (stopwords dropped), stemming each distinct word once.

    ASCII texts are split by polars; others by `ctxdb.text.words` itself, since Python's and
    Rust's Unicode word classes differ at the edges (marks, newly assigned characters).
    """
    texts = texts.fill_null("")
    ascii_only = ~texts.str.contains(_NON_ASCII)
    fast = texts.str.extract_all(_WORD).list.eval(pl.element().str.to_lowercase())
    exact = pl.Series(
        [None if plain else words(text) for text, plain in zip(texts, ascii_only, strict=True)],
        dtype=pl.List(pl.String),
    )
    split = (
        pl.select(pl.when(ascii_only).then(fast).otherwise(exact))
        .to_series()
        .list.eval(pl.element().filter(~pl.element().is_in(sorted(STOPWORDS))))
    )
    stemmed = _stem_map(split.explode().drop_nulls().unique().to_list())
    return (
        split.list.eval(pl.element().replace_strict(stemmed, return_dtype=pl.String))
        .list.join(" ")
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
    """Add `stems` of text + anchors + context (done per bulk slice, overlapping earlier
    requests)."""
    return docs.with_columns(
        stems_column(docs.select(pl.concat_str(STEMMED, separator=" ")).to_series())
    )


def index_actions(
    frame: pl.DataFrame,
    index: str,
    chunk: int = 1000,
    json_columns: tuple[str, ...] = (),
    finish: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
    routed: bool = False,
) -> Iterator[dict[str, Any]]:
    """Bulk index actions (`_id` from the frame) whose `_source` is serialized by polars per
    slice (NDJSON: ISO dates, float32 vectors in their shortest form, nulls as null);
    `json_columns` hold JSON object text spliced in as objects; `finish` completes each slice;
    `routed`: each document routed by its `user_id` (`ctxdb.index.routing`)."""
    for part in frame.iter_slices(chunk):
        if finish is not None:
            part = finish(part)
        buffer = io.BytesIO()
        part.drop(ID, *json_columns).write_ndjson(buffer)
        extras = [part.get_column(column).to_list() for column in json_columns]
        users = part.get_column("user_id").to_list() if routed else None
        lines = buffer.getvalue().splitlines()
        for i, (doc_id, line) in enumerate(zip(part.get_column(ID), lines, strict=True)):
            for column, values in zip(json_columns, extras, strict=True):
                line = splice_object(line, column, values[i])
            action = {"_index": index, "_id": doc_id, "_source": line}
            if users is not None:
                action["routing"] = routing_key(users[i])
            yield action


def splice_object(source: bytes, column: str, text: str | None) -> bytes:
    """Add `column` to a serialized JSON object, its value the JSON object `text` (or null)."""
    if text is not None:
        payload_object(text)  # a clear error for anything but a JSON object
    value = b"null" if text is None else text.encode()
    field = json.dumps(column).encode() + b":" + value
    return b"{" + field + b"}" if source == b"{}" else source[:-1] + b"," + field + b"}"


def turn_base(
    turn_logs: pl.DataFrame, catalog: pl.DataFrame, timelines: pl.DataFrame
) -> pl.DataFrame:
    """One document per TurnLog: its accounting and payload, catalog order and texts, and the
    title (catalog, else TurnLog, else conversation timeline). Turns without a TurnLog are left
    out (they are not findable, as in the reference)."""
    identity = ["tenant", "app", "agent", "user_id", "conversation_id"]
    missing = [c for c in LATER_TURN_LOG_COLUMNS if c not in turn_logs.columns]
    turn_logs = turn_logs.with_columns(pl.lit(None, pl.String).alias(c) for c in missing)
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


def delete_actions(
    ids: pl.Series, index: str, routing: Mapping[str, str | None] | None = None
) -> Iterator[dict[str, Any]]:
    """Deletes of `ids`; with `routing` (id -> the routing it was indexed with, see
    `ctxdb.index.routing.stored_routing`) only the ids it holds, each on its shard."""
    for doc_id in ids:
        if routing is None:
            yield {"_op_type": "delete", "_index": index, "_id": doc_id}
        elif doc_id in routing:
            action = {"_op_type": "delete", "_index": index, "_id": doc_id}
            if routing[doc_id] is not None:
                action["routing"] = routing[doc_id]
            yield action


def payload_object(payload: str | None) -> dict[str, Any] | None:
    """The parsed TurnLog JSON object (None when missing)."""
    if payload is None:
        return None
    value = json.loads(payload)
    if not isinstance(value, dict):
        raise ValueError(f"TurnLog payload is not a JSON object: {payload[:80]!r}")
    return value
