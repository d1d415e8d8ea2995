"""Builders and fixtures for the retention, erasure and compaction tests (real Delta, real ES).

The fixtures are registered through `pytest_plugins` in tests/conftest.py; builders are imported.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from elasticsearch import Elasticsearch
from elasticsearch.helpers import bulk

from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body, index_name, turn_doc_id
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage import delta as delta_module
from ctxdb.storage.conversation_files import turn_file_path
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    EMBEDDINGS,
    EMBEDDINGS_SCHEMA,
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
    REPLAY_ARTIFACTS,
    REPLAY_SCHEMA,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
    SCHEMAS,
    TIMELINES_SCHEMA,
    TURN_CATALOG,
    TURN_CATALOG_SCHEMA,
    TURN_LOGS,
    TURN_LOGS_SCHEMA,
)
from ctxdb.text import text_hash, trigrams
from pipelines.resources import build_resources

TURN_IDENTITY = ["tenant", "app", "agent", "user_id", "conversation_id", "turn_id"]
"""The columns that name a turn and whose it is."""


@pytest.fixture
def ops_settings(settings: Settings) -> Settings:
    """The shared per-test settings (tmp home, unique index prefix) with an immediate VACUUM."""
    return settings.replace(retention={"vacuum_hours": 0})


@pytest.fixture
def store(delta_store: DeltaStore) -> DeltaStore:
    return delta_store


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
            "tenant": "acme",
            "app": "press",
            "agent": "react",
            "user_id": user,
            "conversation_id": conversation,
            "turn_id": turns,
            "role": "assistant",
            "target": "assistant",
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
            "context": "",
            "project": pl.Series([None] * n, dtype=pl.String),
        }
    ).with_columns(pl.col("ts", "expires_at", "derived_at").dt.cast_time_unit("us"))


def conform(frame: pl.DataFrame, schema: pa.Schema) -> pl.DataFrame:
    """`frame` with every column of `schema` (missing ones get a plain default), in order."""
    now = datetime.now(UTC)
    defaults = {
        pa.types.is_string: "",
        pa.types.is_integer: 0,
        pa.types.is_boolean: False,
        pa.types.is_timestamp: now,
        pa.types.is_list: [],
    }
    missing = {}
    for f in schema:
        if f.name in frame.columns:
            continue
        value = next(v for test, v in defaults.items() if test(f.type))
        missing[f.name] = pl.Series(f.name, [value] * frame.height)
    table = frame.with_columns(**missing).select(schema.names).to_arrow()
    return pl.from_arrow(table.cast(schema))


def _per_turn(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.group_by(TURN_IDENTITY).agg(
        pl.col("ts").min().alias("started_at"), pl.col("expires_at").max()
    )


def turn_logs(rows: pl.DataFrame) -> pl.DataFrame:
    """One TurnLog per turn of `rows`, expiring with the turn's role row."""
    turns = _per_turn(rows).with_columns(
        ended_at=pl.col("started_at"),
        last_event_at=pl.col("started_at"),
        payload=pl.lit('{"blocks": []}'),
        adapter=pl.lit("minimal"),
        recording_kind=pl.lit("minimal"),
        recording_state=pl.lit(1),
    )
    return conform(turns, TURN_LOGS_SCHEMA)


def derived(rows: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """TurnLogs, catalog, timelines, replay artifacts and raw events matching `rows`."""
    turns = _per_turn(rows)
    catalog = turns.with_columns(
        ended_at=pl.col("started_at"),
        last_activity_at=pl.col("started_at"),
        ordinal=pl.int_range(1, pl.len() + 1).over("conversation_id"),
        first_user_text=pl.lit("question"),
        recording_kind=pl.lit("minimal"),
    )
    timelines = (
        turns.group_by("tenant", "app", "agent", "user_id", "conversation_id")
        .agg(
            pl.col("started_at").min(),
            pl.col("expires_at").max(),
            pl.col("turn_id").alias("turn_ids"),
        )
        .with_columns(
            last_activity_at=pl.col("started_at"),
            version=pl.lit(1),
            blocks=pl.lit("[]"),
            sources_pool=pl.lit("[]"),
            recording_kind=pl.lit("minimal"),
        )
    )
    replay = turns.with_columns(
        ts=pl.col("started_at"),
        artifact=pl.lit("conv.artifacts.events"),
        name=pl.lit("chat.step"),
        event_id=pl.col("turn_id") + "-step",
        data=pl.lit("{}"),
    )
    raw = rows.select(
        *TURN_IDENTITY,
        event_id=pl.col("row_id") + "-ev",
        occurred_at=pl.col("ts"),
        type=pl.lit("assistant.completion"),
        schema_version=pl.lit(1),
        adapter=pl.lit("minimal"),
        payload=pl.col("text").map_elements(
            lambda t: json.dumps({"text": t}), return_dtype=pl.String
        ),
        source_file=pl.lit("events.jsonl"),
        line_number=pl.int_range(1, pl.len() + 1),
        ingested_at=pl.col("ts"),  # landed as it happened
    )
    return {
        TURN_LOGS: turn_logs(rows),
        TURN_CATALOG: conform(catalog, TURN_CATALOG_SCHEMA),
        CONVERSATION_TIMELINES: conform(timelines, TIMELINES_SCHEMA),
        REPLAY_ARTIFACTS: conform(replay, REPLAY_SCHEMA),
        RAW_TURN_EVENTS: conform(raw, RAW_EVENTS_SCHEMA),
    }


def write_rows(store: DeltaStore, rows: pl.DataFrame) -> None:
    store.upsert(ROLE_ROWS, rows, keys=["row_id"], schema=ROLE_ROWS_SCHEMA)


def write_embeddings(
    store: DeltaStore, rows: pl.DataFrame, extra_hashes: tuple[str, ...] = ()
) -> None:
    """Cached vectors for the rows' texts (plus `extra_hashes`, vectors no row uses) and an ok
    embedding status per row, created five minutes ago."""
    now = datetime.now(UTC) - timedelta(minutes=5)
    hashes = rows["text_hash"].unique(maintain_order=True).to_list() + list(extra_hashes)
    store.append(
        EMBEDDINGS,
        pl.DataFrame(
            {
                "model_id": "all-MiniLM-L6-v2",
                "text_hash": hashes,
                "vector": [[0.1, 0.2]] * len(hashes),
                "created_at": now,
            }
        ),
        schema=EMBEDDINGS_SCHEMA,
    )
    store.append(
        ROW_EMBEDDINGS,
        pl.DataFrame(
            {
                "row_id": rows["row_id"],
                "model_id": "all-MiniLM-L6-v2",
                "text_hash": rows["text_hash"],
                "embedding_status": "ok",
                "error": None,
                "attempts": 1,
                "updated_at": now,
                "expires_at": rows["expires_at"],
            }
        ),
        schema=ROW_EMBEDDINGS_SCHEMA,
    )


def write_derived(store: DeltaStore, rows: pl.DataFrame) -> None:
    """Role rows plus every table derived alongside them (appended)."""
    write_rows(store, rows)
    for table, frame in derived(rows).items():
        store.append(table, frame)


def ensure_indices(es: Elasticsearch, prefix: str) -> None:
    for kind in (ROWS, TURNS):
        name = index_name(prefix, kind, 1)
        if not es.indices.exists(index=name):
            es.indices.create(index=name, **index_body(kind, 384))
            es.indices.put_alias(index=name, name=alias_name(prefix, kind))


def index_rows(es: Elasticsearch, prefix: str, rows: pl.DataFrame) -> None:
    """Index role rows and their turns the way the indexer does (_id = row_id / conv:turn)."""
    ensure_indices(es, prefix)
    fields = [
        "row_id",
        *TURN_IDENTITY,
        "role",
        "target",
        "text",
        "ts",
        "expires_at",
        "text_hash",
    ]
    docs = [
        {
            "_index": alias_name(prefix, ROWS),
            "_id": r["row_id"],
            "_source": {k: _json(r[k]) for k in fields},
        }
        for r in rows.iter_rows(named=True)
    ]
    turn_fields = [*TURN_IDENTITY, "expires_at"]
    docs += [
        {
            "_index": alias_name(prefix, TURNS),
            "_id": turn_doc_id(r["conversation_id"], r["turn_id"]),
            "_source": {k: _json(r[k]) for k in turn_fields},
        }
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


def run_pipeline(
    store: DeltaStore,
    es: Elasticsearch,
    settings: Settings,
    batches: dict[str, tuple[int, datetime]],
) -> None:
    """Generate (seed, end time) batches of events with their files, land, derive (TTL from
    `settings`) and index them with the real pipeline code."""
    for name, (seed, end) in batches.items():
        generated = generate_events(users=2, conversations=3, seed=seed, now=end, days=5)
        landing = Path(settings.landing_uri) / name
        write_sample(generated, landing, files_root=Path(settings.files), per_file=60)
        # landed as the events happened: retention counts from their own times
        land(store, str(landing), now=end - timedelta(days=6))
    derive(store, settings)
    sync_live(store, es, settings, model_id=settings.embedding.model)


def es_ids(es: Elasticsearch, prefix: str, kind: str) -> set[str]:
    es.indices.refresh(index=alias_name(prefix, kind))
    hits = es.search(
        index=alias_name(prefix, kind), size=1000, query={"match_all": {}}, source=False
    )
    return {h["_id"] for h in hits["hits"]["hits"]}


def _json(value: object) -> object:
    return value.isoformat() if isinstance(value, datetime) else value


def sensor_resources(delta_root: str) -> dict:
    """The resources a landing sensor takes (`settings`, `delta`) over the Delta tables at
    `delta_root`: the code location's, without the client Dagster would open around a tick."""
    built = build_resources(Settings(home=Path(delta_root).parent))
    return {key: built[key] for key in ("settings", "delta")}


@pytest.fixture
def resources(ops_settings, monkeypatch):
    """The code location's resources over the test's settings (`build_resources`)."""
    monkeypatch.setenv("CTXDB_HOME", str(ops_settings.home))
    monkeypatch.setenv("ELASTICSEARCH_URL", ops_settings.elasticsearch.url)
    return build_resources(ops_settings)


class SimulatedCrash(RuntimeError):
    """Stands in for the process being killed right after a commit."""


def crash_after_commit(monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    """Raise SimulatedCrash the first time the process passes the commit point `point` (e.g.
    `delta:role_rows`, see ctxdb.storage.faults): the commit is done and nothing after it runs,
    a deterministic, in-process stand-in for a SIGKILL right after that commit."""

    fired: list[str] = []

    def reached(name: str) -> None:
        if name == point and not fired:
            fired.append(name)
            raise SimulatedCrash(f"simulated crash right after {point}")

    monkeypatch.setattr(delta_module, "reached", reached)


def run_killed_at(
    monkeypatch: pytest.MonkeyPatch, module: object, step: str, run: Callable[[], object]
) -> None:
    """Run `run` with `module.step` raising, a stand-in for the process being killed when it gets
    there, and check that it died; `module.step` is restored afterwards."""

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"simulated crash at {step}")

    with monkeypatch.context() as patch:
        patch.setattr(module, step, crash)
        with pytest.raises(RuntimeError):
            run()


def table_rows(store: DeltaStore, table: str, volatile: set[str]) -> list[str]:
    """The rows of `table` as sorted canonical JSON, without the `volatile` columns."""
    frame = store.read(table, SCHEMAS.get(table))
    frame = frame.drop([c for c in frame.columns if c in volatile])
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in frame.to_dicts())


def assert_same_tables(
    store: DeltaStore, clean: DeltaStore, skip: set[str], volatile: set[str]
) -> None:
    """Every table but `skip` holds the same rows in `store` as in `clean`."""
    for table in sorted(set(SCHEMAS) - skip):
        assert table_rows(store, table, volatile) == table_rows(clean, table, volatile), table
