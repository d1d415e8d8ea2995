"""Document building and change planning (pure functions over polars frames)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest
from conftest_index import role_rows

from ctxdb.index.documents import (
    ID,
    complete_rows,
    index_actions,
    row_base,
    stems_column,
    with_stems,
)
from ctxdb.index.incremental import plan_changes
from ctxdb.storage.tables import ROW_EMBEDDINGS_SCHEMA
from ctxdb.text import stems

TEXTS = [
    "Running runners ran",
    "",
    "   ",
    "Ünïcödé İstanbul straße ÉCOLE naïve",
    "a_b c-d 3.14 x",
    "tab\tnew\nline",
    "日本語 テキスト",
    "running again",
    "case 12345 and ²³ and 3rd runs 0042",
    "cafe\u0301 decomposed, Ⅻ roman, ½ half, x\u200dy joiner",
]


def test_batch_stems_equal_query_time_stems():
    assert stems_column(pl.Series(TEXTS)).to_list() == [stems(t) for t in TEXTS]


def statuses(rows: pl.DataFrame, status: str, model: str = "m") -> pl.DataFrame:
    now = datetime.now(UTC)
    return pl.from_arrow(ROW_EMBEDDINGS_SCHEMA.empty_table()).vstack(
        rows.select(
            "row_id",
            pl.lit(model).alias("model_id"),
            "text_hash",
            pl.lit(status).alias("embedding_status"),
            pl.lit(None, pl.String).alias("error"),
            pl.lit(0, pl.Int32).alias("attempts"),
            pl.lit(now).alias("updated_at"),
            "expires_at",
        )
    )


def test_status_applies_only_to_the_same_model_and_text():
    rows = role_rows(["one", "two", "three"])
    status = statuses(rows, "ok").with_columns(
        pl.when(pl.col("row_id") == "c1-r1")
        .then(pl.lit("stale-hash"))
        .otherwise(pl.col("text_hash"))
        .alias("text_hash")
    )
    base = row_base(rows, status, "m")
    assert base.get_column("embedding_status").to_list() == ["ok", "pending", "ok"]
    assert set(row_base(rows, status, "other").get_column("embedding_status")) == {"pending"}


def test_vectors_attached_only_to_ok_rows_and_text_cleaned():
    rows = role_rows(["ok row", "failed row\x00"])
    status = statuses(rows, "ok").with_columns(
        pl.when(pl.col("row_id") == "c1-r1")
        .then(pl.lit("failed"))
        .otherwise(pl.lit("ok"))
        .alias("embedding_status")
    )
    vectors = rows.select("text_hash", pl.lit([1.0, 0.0]).cast(pl.List(pl.Float32)).alias("vector"))
    docs = with_stems(complete_rows(row_base(rows, status, "m"), vectors))
    assert docs.get_column("embedding").to_list() == [[1.0, 0.0], None]
    assert docs.get_column("text").to_list() == ["ok row", "failed row "]
    assert docs.get_column("stems").to_list() == ["ok row", "fail row"]


def test_plan_changes_indexes_changed_and_deletes_removed():
    rows = role_rows(["a", "b", "c"])
    old = row_base(rows, statuses(rows, "ok"), "m")
    changed_rows = pl.concat([rows.head(1), role_rows(["B!", "d"], start=1)])
    new = row_base(changed_rows, statuses(changed_rows, "ok"), "m")
    upserts, gone = plan_changes(new, old, None)
    assert sorted(upserts.get_column(ID)) == ["c1-r1", "c1-r2"]
    assert gone.to_list() == []
    upserts, gone = plan_changes(new.head(1), old, None)
    assert upserts.is_empty() and sorted(gone) == ["c1-r1", "c1-r2"]
    upserts, gone = plan_changes(new, None, pl.Series(ID, ["c1-r0", "zombie"]))
    assert upserts.height == 3 and gone.to_list() == ["zombie"]


def test_actions_serialize_float32_vectors_exactly_and_nulls_as_null():
    rows = role_rows(["with vector", "without"])
    frame = pl.DataFrame(
        {
            ID: ["a", "b", "c"],
            "text": ["x", None, "z"],
            "embedding": pl.Series([[0.123456789, -0.5], None, [0.25]], dtype=pl.List(pl.Float32)),
            "ts": rows.get_column("ts").head(1).extend(rows.get_column("ts")),
        }
    )
    actions = list(index_actions(frame, "idx", chunk=2))
    assert [a["_id"] for a in actions] == ["a", "b", "c"]
    sources = [json.loads(a["_source"]) for a in actions]
    assert sources[0]["embedding"] == [0.12345679, -0.5]  # shortest float32 form
    assert np.float32(sources[0]["embedding"][0]) == np.float32(0.123456789)
    assert sources[1]["embedding"] is None and sources[1]["text"] is None
    assert sources[2]["embedding"] == [0.25]
    assert datetime.fromisoformat(sources[0]["ts"]) == frame.get_column("ts")[0]


def test_payload_spliced_as_object_and_bad_payload_is_a_clear_error():
    frame = pl.DataFrame({ID: ["t1"], "title": ["T"], "payload": ['{"blocks": [1, 2]}']})
    (action,) = index_actions(frame, "idx", json_columns=("payload",))
    assert json.loads(action["_source"]) == {"title": "T", "payload": {"blocks": [1, 2]}}
    bad = frame.with_columns(payload=pl.lit("[1, 2]"))
    with pytest.raises(ValueError, match="not a JSON object"):
        list(index_actions(bad, "idx", json_columns=("payload",)))
