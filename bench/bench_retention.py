"""Benchmark the retention sweep: N role rows (10% expired) in Delta, their documents in ES.

    ELASTICSEARCH_URL=http://127.0.0.1:9299 .venv/bin/python bench/bench_retention.py \
        --rows 1000000 --expired 0.1 --es-live 100000

Every expired row and `--es-live` live rows are indexed (minimal documents, no vectors); the
sweep deletes the expired ones from Delta (role_rows, turn_logs) and Elasticsearch. Prints one
JSON object: setup and sweep seconds, rows/s, and the sweep report.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from elasticsearch import Elasticsearch
from elasticsearch.helpers import parallel_bulk

from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body, index_name
from ctxdb.lifecycle.retention import sweep
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA, TURN_LOGS, TURN_LOGS_SCHEMA


def role_rows(n: int, expired_share: float, now: datetime) -> pl.DataFrame:
    """`n` role rows over n/4 turns; rows of the first `expired_share` of turns are expired."""
    expired_turns = int(n / 4 * expired_share)
    i = pl.int_range(0, n, eager=True)
    turn = i // 4
    frame = pl.DataFrame({"i": i, "turn": turn}).with_columns(
        row_id=pl.format("row-{}", pl.col("i")),
        conversation_id=pl.format("c{}", pl.col("turn") // 5),
        turn_id=pl.format("t{}", pl.col("turn")),
        user_id=pl.format("u{}", pl.col("turn") // 500),
        text=pl.format("answer {} about the spreadsheet timezone fix", pl.col("i")),
        expired=pl.col("turn") < expired_turns,
    )
    return frame.with_columns(
        tenant=pl.lit("acme"),
        app=pl.lit("press"),
        agent=pl.lit("react"),
        role=pl.lit("assistant"),
        target=pl.lit("assistant"),
        tags=pl.lit(["chat:assistant"]),
        event_type=pl.lit(None, pl.String),
        batch_id=pl.lit(None, pl.String),
        ts=pl.when("expired")
        .then(pl.lit(now - timedelta(days=400)))
        .otherwise(pl.lit(now - timedelta(days=1))),
        anchors_text=pl.lit(""),
        trigrams=pl.lit(""),
        text_hash=pl.format("h{}", pl.col("i")),
        ref=pl.format("conv:ar:{}.assistant.completion", pl.col("turn_id")),
        path=pl.lit("conv:ar:assistant.completion"),
        ordinal=pl.lit(0, pl.Int32),
        visibility=pl.lit("public"),
        expires_at=pl.when("expired")
        .then(pl.lit(now - timedelta(days=35)))
        .otherwise(pl.lit(now + timedelta(days=364))),
        derived_at=pl.lit(now),
    ).with_columns(pl.col("ts", "expires_at", "derived_at").dt.cast_time_unit("us"))


def turn_logs(rows: pl.DataFrame, now: datetime) -> pl.DataFrame:
    turns = rows.group_by("tenant", "app", "agent", "user_id", "conversation_id", "turn_id").agg(
        pl.col("ts").min().alias("started_at"), pl.col("expires_at").max()
    )
    return turns.with_columns(
        adapter=pl.lit("minimal"),
        recording_kind=pl.lit("minimal"),
        recording_state=pl.lit(1, pl.Int32),
        ended_at=pl.col("started_at"),
        last_event_at=pl.col("started_at"),
        error=pl.lit(False),
        payload=pl.lit("{}"),
        block_count=pl.lit(2, pl.Int32),
        source_event_ids=pl.lit(["e"]),
        tokens_in=pl.lit(None, pl.Int64),
        tokens_out=pl.lit(None, pl.Int64),
        feedback_summary=pl.lit(None, pl.String),
        title=pl.lit(None, pl.String),
        updated_at=pl.lit(now).dt.cast_time_unit("us"),
    ).select(TURN_LOGS_SCHEMA.names)


def index_docs(es: Elasticsearch, prefix: str, rows: pl.DataFrame, turns: pl.DataFrame) -> None:
    for kind in (ROWS, TURNS):
        name = index_name(prefix, kind, 1)
        body = index_body(kind)
        body["settings"] = {**body["settings"], "refresh_interval": "-1"}
        es.indices.create(index=name, **body)
        es.indices.put_alias(index=name, name=alias_name(prefix, kind))
    row_docs = (
        {
            "_index": alias_name(prefix, ROWS),
            "_id": r["row_id"],
            "_source": {
                "row_id": r["row_id"],
                "user_id": r["user_id"],
                "conversation_id": r["conversation_id"],
                "turn_id": r["turn_id"],
                "text": r["text"],
                "expires_at": r["expires_at"].isoformat(),
            },
        }
        for r in rows.select(
            "row_id", "user_id", "conversation_id", "turn_id", "text", "expires_at"
        ).iter_rows(named=True)
    )
    turn_docs = (
        {
            "_index": alias_name(prefix, TURNS),
            "_id": f"{r['conversation_id']}:{r['turn_id']}",
            "_source": {
                "conversation_id": r["conversation_id"],
                "turn_id": r["turn_id"],
                "user_id": r["user_id"],
                "expires_at": r["expires_at"].isoformat(),
            },
        }
        for r in turns.select("conversation_id", "turn_id", "user_id", "expires_at").iter_rows(
            named=True
        )
    )
    for docs in (row_docs, turn_docs):
        for ok, item in parallel_bulk(es, docs, chunk_size=2000, thread_count=2):
            if not ok:
                raise RuntimeError(item)
    for kind in (ROWS, TURNS):
        es.indices.put_settings(index=alias_name(prefix, kind), settings={"refresh_interval": "1s"})
        es.indices.refresh(index=alias_name(prefix, kind))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--expired", type=float, default=0.1)
    parser.add_argument(
        "--es-live",
        type=int,
        default=100_000,
        help="Live rows also indexed (all expired rows always are).",
    )
    parser.add_argument("--home", type=Path, default=None)
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="bench-retention-"))
    prefix = f"bench-ret-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        home=home, elasticsearch={"index_prefix": prefix}, retention={"vacuum_hours": 0}
    )
    store = DeltaStore(settings.delta_uri)
    es = make_client(settings)
    now = datetime.now(UTC)

    started = time.perf_counter()
    rows = role_rows(args.rows, args.expired, now)
    turns = turn_logs(rows, now)
    store.append(ROLE_ROWS, rows.drop("i", "turn", "expired"), ROLE_ROWS_SCHEMA)
    store.append(TURN_LOGS, turns, TURN_LOGS_SCHEMA)
    expired = rows.filter("expired")
    indexed = pl.concat([expired, rows.filter(~pl.col("expired")).head(args.es_live)])
    index_docs(es, prefix, indexed, turn_logs(indexed, now))
    setup_s = time.perf_counter() - started

    try:
        report = sweep(store, es, settings)
    finally:
        for name in es.indices.get(index=f"{prefix}-*").body:
            es.indices.delete(index=name)
    deleted = report.deleted_rows.get(ROLE_ROWS, 0)
    print(  # noqa: T201 (benchmark output)
        json.dumps(
            {
                "role_rows": args.rows,
                "expired_rows": expired.height,
                "es_docs_rows": indexed.height,
                "setup_s": round(setup_s, 1),
                "sweep_s": round(report.duration_s, 2),
                "role_rows_deleted_per_s": round(deleted / report.duration_s),
                "report": report.as_metadata(),
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
