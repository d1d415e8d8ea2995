"""Builders and fixtures for the retention, erasure and compaction tests (real Delta, real ES)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from elasticsearch import Elasticsearch
from elasticsearch.helpers import bulk

from ctxdb.delta import DeltaStore
from ctxdb.es.client import make_client
from ctxdb.es.mappings import ROWS, TURNS, alias_name, index_body, index_name, turn_doc_id
from ctxdb.retention import turn_file_path
from ctxdb.settings import Settings
from ctxdb.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA, TS
from ctxdb.text import text_hash, trigrams

TEST_ES_URL = "http://127.0.0.1:9299"

# TurnLog columns the sweep and erasure rely on (identity, turn id, ts, expires_at).
TURN_LOGS_TEST_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string()),
        pa.field("app", pa.string()),
        pa.field("agent", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("conversation_id", pa.string()),
        pa.field("turn_id", pa.string()),
        pa.field("ts", TS),
        pa.field("payload", pa.string()),
        pa.field("expires_at", TS),
    ]
)


@pytest.fixture
def ops_settings(tmp_path: Path) -> Iterator[Settings]:
    """Settings with a unique index prefix and tmp Delta/files roots; indices removed after."""
    prefix = f"ops-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        home=tmp_path, ELASTICSEARCH_URL=TEST_ES_URL, index_prefix=prefix,
        retention_vacuum_hours=0,
    )
    yield settings
    es = make_client(settings)
    for name in es.indices.get(index=f"{prefix}-*", allow_no_indices=True).body:
        es.options(ignore_status=404).indices.delete(index=name)


@pytest.fixture
def store(ops_settings: Settings) -> DeltaStore:
    return DeltaStore(ops_settings.delta_uri)


@pytest.fixture
def es(ops_settings: Settings) -> Elasticsearch:
    return make_client(ops_settings)


def role_rows(
    n: int, *, user: str = "u1", conversation: str = "c1", expired: int = 0, start: int = 0
) -> pl.DataFrame:
    """`n` role rows (one per turn); the first `expired` rows expired an hour ago."""
    now = datetime.now(UTC)
    texts = [f"{conversation} answer {start + i} about openpyxl timezone" for i in range(n)]
    turns = [f"t{start + i}" for i in range(n)]
    return pl.DataFrame(
        {
            "row_id": [f"{conversation}-{t}-assistant" for t in turns],
            "tenant": "acme", "app": "press", "agent": "react",
            "user_id": user, "conversation_id": conversation,
            "turn_id": turns,
            "role": "assistant", "target": "assistant",
            "tags": [["chat:assistant", f"turn:{t}"] for t in turns],
            "event_type": pl.Series([None] * n, dtype=pl.String),
            "batch_id": pl.Series([None] * n, dtype=pl.String),
            "ts": [now - timedelta(days=400 if i < expired else 1) for i in range(n)],
            "text": texts,
            "anchors_text": "",
            "trigrams": [trigrams(t) for t in texts],
            "text_hash": [text_hash(t) for t in texts],
            "ref": [f"conv:ar:conv_{conversation}.{t}.assistant.completion" for t in turns],
            "path": [f"conv:ar:{t}.assistant.completion" for t in turns],
            "ordinal": pl.Series([0] * n, dtype=pl.Int32),
            "visibility": "public",
            "expires_at": [
                now - timedelta(hours=1) if i < expired else now + timedelta(days=300)
                for i in range(n)
            ],
            "derived_at": now,
        }
    ).with_columns(pl.col("ts", "expires_at", "derived_at").dt.cast_time_unit("us"))


def turn_logs(rows: pl.DataFrame) -> pl.DataFrame:
    """One TurnLog per turn of `rows`, expiring with the turn's role row."""
    return (
        rows.group_by("tenant", "app", "agent", "user_id", "conversation_id", "turn_id")
        .agg(pl.col("ts").min(), pl.col("expires_at").max())
        .with_columns(payload=pl.lit('{"blocks": []}'))
        .select(TURN_LOGS_TEST_SCHEMA.names)
    )


def write_rows(store: DeltaStore, rows: pl.DataFrame) -> None:
    store.upsert(ROLE_ROWS, rows, keys=["row_id"], schema=ROLE_ROWS_SCHEMA)


def write_turns(store: DeltaStore, turns: pl.DataFrame) -> None:
    store.upsert("turn_logs", turns, keys=["conversation_id", "turn_id"],
                 schema=TURN_LOGS_TEST_SCHEMA)


def ensure_indices(es: Elasticsearch, prefix: str) -> None:
    for kind in (ROWS, TURNS):
        name = index_name(prefix, kind, 1)
        if not es.indices.exists(index=name):
            es.indices.create(index=name, **index_body(kind, 384))
            es.indices.put_alias(index=name, name=alias_name(prefix, kind))


def index_rows(es: Elasticsearch, prefix: str, rows: pl.DataFrame) -> None:
    """Index role rows and their turns the way the indexer does (_id = row_id / conv:turn)."""
    ensure_indices(es, prefix)
    fields = ["row_id", "tenant", "app", "agent", "user_id", "conversation_id", "turn_id",
              "role", "target", "text", "ts", "expires_at", "text_hash"]
    docs = [
        {"_index": alias_name(prefix, ROWS), "_id": r["row_id"],
         "_source": {k: _json(r[k]) for k in fields}}
        for r in rows.iter_rows(named=True)
    ]
    docs += [
        {"_index": alias_name(prefix, TURNS), "_id": turn_doc_id(r["conversation_id"], r["turn_id"]),
         "_source": {k: _json(r[k]) for k in ("tenant", "app", "agent", "user_id",
                                              "conversation_id", "turn_id", "expires_at")}}
        for r in rows.iter_rows(named=True)
    ]
    bulk(es, docs, refresh=True)


def write_turn_files(root: str, rows: pl.DataFrame) -> list[Path]:
    """A hosted file and an attachment for each turn of `rows` under the storage root."""
    paths = []
    for r in rows.iter_rows(named=True):
        base = Path(root) / turn_file_path(
            r["tenant"], r["app"], r["user_id"], r["conversation_id"], r["turn_id"]
        )
        for rel in ("files/report.txt", "user.attachments/notes.txt"):
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{r['turn_id']} {rel}")
            paths.append(path)
    return paths


def es_ids(es: Elasticsearch, prefix: str, kind: str) -> set[str]:
    es.indices.refresh(index=alias_name(prefix, kind))
    hits = es.search(index=alias_name(prefix, kind), size=1000, query={"match_all": {}},
                     source=False)
    return {h["_id"] for h in hits["hits"]["hits"]}


def _json(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value
