"""Builders and the model fixture for the embedding and index tests. The fixture is registered
for every test module through `pytest_plugins` in tests/conftest.py; the builders are imported by
name. The Elasticsearch settings (`es_settings`, unique index prefix) and `delta_store` come from
tests/conftest.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    TIMELINES_SCHEMA,
    TURN_CATALOG,
    TURN_CATALOG_SCHEMA,
    TURN_LOGS,
    TURN_LOGS_SCHEMA,
)
from ctxdb.text import text_hash, trigrams


def role_rows(
    texts: list[str],
    *,
    conversation: str = "c1",
    user: str = "u1",
    anchors: list[str] | None = None,
    start: int = 0,
    expires_in_days: float = 365,
) -> pl.DataFrame:
    """A role_rows frame (ROLE_ROWS_SCHEMA) with one assistant row per text, turn i per row."""
    now = datetime.now(UTC)
    n = len(texts)
    anchors = anchors or [""] * n
    ids = [f"{conversation}-r{start + i}" for i in range(n)]
    frame = pl.DataFrame(
        {
            "row_id": ids,
            "tenant": ["t1"] * n,
            "app": ["app1"] * n,
            "agent": ["agent1"] * n,
            "user_id": [user] * n,
            "conversation_id": [conversation] * n,
            "turn_id": [f"turn{start + i}" for i in range(n)],
            "role": ["assistant"] * n,
            "target": ["assistant"] * n,
            "tags": [["chat:assistant", f"turn:turn{start + i}"] for i in range(n)],
            "event_type": [None] * n,
            "batch_id": [None] * n,
            "ts": [now - timedelta(minutes=n - i) for i in range(n)],
            "text": texts,
            "anchors_text": anchors,
            "trigrams": [trigrams(t + " " + a) for t, a in zip(texts, anchors, strict=True)],
            "text_hash": [text_hash(t) for t in texts],
            "ref": [f"conv:ar:turn{start + i}.assistant.completion" for i in range(n)],
            "path": [f"conv:ar:turn{start + i}.assistant.completion" for i in range(n)],
            "ordinal": [0] * n,
            "visibility": ["public"] * n,
            "expires_at": [now + timedelta(days=expires_in_days)] * n,
            "derived_at": [now] * n,
            "context": [""] * n,
            "project": [None] * n,
        },
        schema_overrides={"event_type": pl.String, "batch_id": pl.String, "project": pl.String},
    )
    return frame


def write_rows(store: DeltaStore, frame: pl.DataFrame) -> None:
    store.upsert(ROLE_ROWS, frame, keys=["row_id"], schema=ROLE_ROWS_SCHEMA)


@pytest.fixture(scope="session", name="embedder")
def embedder_fixture() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2, loaded once per process."""
    model = SentenceTransformerEmbedder(batch_size=16)
    model.load()
    return model


def turn_tables(store: DeltaStore, n: int, *, conversation: str = "c1", user: str = "u1") -> None:
    """Write n turns of one conversation into turn_logs, turn_catalog and conversation_timelines."""
    now = datetime.now(UTC)
    ident = {
        "tenant": "t1",
        "app": "app1",
        "agent": "agent1",
        "user_id": user,
        "conversation_id": conversation,
    }
    turns = [f"turn{i}" for i in range(n)]
    starts = [now - timedelta(minutes=n - i) for i in range(n)]
    expires = now + timedelta(days=365)
    logs = pl.DataFrame(
        [
            {
                **ident,
                "turn_id": t,
                "adapter": "langgraph",
                "recording_kind": "minimal",
                "recording_state": 1,
                "started_at": s,
                "ended_at": s + timedelta(seconds=5),
                "last_event_at": s + timedelta(seconds=5),
                "error": False,
                "payload": json.dumps(
                    {
                        "turn_id": t,
                        "ts": s.isoformat(),
                        "blocks": [
                            {"type": "user.prompt", "text": f"question {i}"},
                            {"type": "assistant.completion", "text": f"answer {i}"},
                        ],
                    }
                ),
                "block_count": 2,
                "source_event_ids": [f"e{i}"],
                "tokens_in": 10,
                "tokens_out": 20,
                "feedback_summary": None,
                "title": None,
                "status": "ok",
                "error_type": None,
                "model": None,
                "project": None,
                "expires_at": expires,
                "updated_at": now,
            }
            for i, (t, s) in enumerate(zip(turns, starts, strict=True))
        ]
    )
    catalog = pl.DataFrame(
        [
            {
                **ident,
                "turn_id": t,
                "ordinal": i + 1,
                "started_at": s,
                "ended_at": s + timedelta(seconds=5),
                "first_user_text": f"question {i}",
                "last_assistant_text": f"answer {i}",
                "title": "Spreadsheet trouble",
                "last_activity_at": s + timedelta(seconds=5),
                "error": False,
                "recording_kind": "minimal",
                "expires_at": expires,
                "updated_at": now,
            }
            for i, (t, s) in enumerate(zip(turns, starts, strict=True))
        ]
    )
    timeline = pl.DataFrame(
        [
            {
                **ident,
                "version": 1,
                "title": "Spreadsheet trouble",
                "started_at": starts[0],
                "last_activity_at": starts[-1],
                "turn_ids": turns,
                "turn_count": n,
                "blocks": "[]",
                "sources_pool": "[]",
                "forked_from": None,
                "recording_kind": "minimal",
                "expires_at": expires,
                "updated_at": now,
            }
        ]
    )
    store.upsert(TURN_LOGS, logs, keys=["conversation_id", "turn_id"], schema=TURN_LOGS_SCHEMA)
    store.upsert(
        TURN_CATALOG, catalog, keys=["conversation_id", "turn_id"], schema=TURN_CATALOG_SCHEMA
    )
    store.upsert(
        CONVERSATION_TIMELINES, timeline, keys=["conversation_id"], schema=TIMELINES_SCHEMA
    )
