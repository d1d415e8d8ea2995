"""Issue 17 item 4, partitions that fan out: the shard assignment, two shards materialized at
once by two Dagster processes (`shards_job` through `execute_job`, multiprocess executor) against
one unpartitioned run, reruns of a shard, and the per-shard writer lease. Real Delta tables, the
real node and the real model."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest_index import role_rows, turn_tables, write_rows
from dagster import materialize
from elasticsearch import Elasticsearch, helpers

from assets.embeddings import role_row_embeddings
from assets.search_index import search_index
from assets.shards import all_shards_tags, shard_count
from ctxdb.cli.ops import job_tags
from ctxdb.coordination.lease import LeaseHeld, shard_lease_name, writer_lease
from ctxdb.embedding.backends import memory_embedder
from ctxdb.embedding.stage import covered_mark, embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.settings import Settings
from ctxdb.storage.changes import watermark
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.shards import Shard, all_shards, shard_expr
from ctxdb.storage.tables import INDEX_STATE, ROLE_ROWS, ROW_EMBEDDINGS
from pipelines.fanout import shard_requests
from pipelines.resources import build_resources

ROOT = Path(__file__).resolve().parents[1]
CONVERSATIONS = [f"conv-{i}" for i in range(8)]
STATUS_COLUMNS = ["row_id", "model_id", "text_hash", "embedding_status"]


def test_shard_assignment_is_stable_and_total() -> None:
    ids = [f"c{i}" for i in range(300)] + ["", "ünïcode ✓", "it's"]
    frame = pl.DataFrame({"conversation_id": ids})
    for count in (1, 2, 3, 4, 8):
        got = frame.select(shard_expr(count)).to_series().to_list()
        # the documented rule, recomputed without polars: SHA-256, first 15 hex digits, modulo
        expected = [int(hashlib.sha256(i.encode()).hexdigest()[:15], 16) % count for i in ids]
        assert got == expected
        held = [frame.filter(s.expr()).height for s in all_shards(count)]
        assert sum(held) == len(ids)  # every conversation in exactly one shard
        assert count == 1 or min(held) > 0
    # fixed values: a change of hash function or digits would move every conversation
    assert pl.DataFrame({"conversation_id": ["conv-1", "conv-2"]}).select(
        shard_expr(4)
    ).to_series().to_list() == [
        int(hashlib.sha256(b"conv-1").hexdigest()[:15], 16) % 4,
        int(hashlib.sha256(b"conv-2").hexdigest()[:15], 16) % 4,
    ]
    assert Shard.parse(Shard(2, 4).name) == Shard(2, 4)
    with pytest.raises(ValueError):
        Shard(4, 4)


def build_records(store: DeltaStore) -> None:
    """Role rows and turns of 8 conversations; one text shared by all (one cached vector) and
    one blank text per conversation (skipped)."""
    for i, conversation in enumerate(CONVERSATIONS):
        texts = [f"{conversation}: the answer about topic {i}, part {j}" for j in range(3)]
        write_rows(
            store, role_rows([*texts, "the same text everywhere", "  "], conversation=conversation)
        )
        turn_tables(store, 2, conversation=conversation)


def scoped(settings: Settings, name: str) -> Settings:
    """Another home and index prefix (under the test's prefix, so the fixture cleans them)."""
    return settings.replace(
        home=settings.home / name,
        elasticsearch={"index_prefix": f"{settings.elasticsearch.index_prefix}-{name}"},
    )


def documents(es: Elasticsearch, alias: str) -> dict[str, dict]:
    return {
        hit["_id"]: hit["_source"]
        for hit in helpers.scan(es, index=alias, query={"query": {"match_all": {}}})
    }


def assert_same_documents(left: dict[str, dict], right: dict[str, dict]) -> None:
    assert left.keys() == right.keys()
    for doc_id, doc in left.items():
        other = dict(right[doc_id])
        vector, other_vector = doc.get("embedding"), other.pop("embedding", None)
        assert {k: v for k, v in doc.items() if k != "embedding"} == other, doc_id
        assert (vector is None) == (other_vector is None), doc_id
        if vector is not None:  # batches of other sizes may move the last float bits
            np.testing.assert_allclose(vector, other_vector, atol=1e-5)


def dagster_home(tmp_path: Path, key: str) -> Path:
    """One Dagster instance per process: the runs are independent, and two processes writing one
    SQLite run storage at once can fail a run on a locked database, which is not under test."""
    home = tmp_path / f"dagster_home_{key}"
    home.mkdir()
    return home


def shard_env(settings: Settings) -> dict[str, str]:
    """The environment of a process that runs shard steps: 2 shards of `settings`' memory."""
    return {
        **os.environ,
        "CTXDB_HOME": str(settings.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_SHARDS": "2",
        "CTXDB_EMBEDDING_THREADS": "1",
        "CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S": "0",  # the shards must not wait for each other
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def start_two_shard_processes(
    settings: Settings, tmp_path: Path, *, flags: tuple[str, ...] = (), env: dict | None = None
) -> list[subprocess.Popen]:
    """`shards_job` for partition 0 and partition 1 of 2, in two processes released at once
    (`flags` go to tests/run_shards.py, `env` adds to `shard_env`); collect with `shard_runs`."""
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "run_shards.py"), str(go), *flags, key],
            cwd=ROOT,
            env={
                **shard_env(settings),
                **(env or {}),
                "DAGSTER_HOME": str(dagster_home(tmp_path, key)),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key in ("0", "1")
    ]
    for process in processes:
        assert process.stdout.readline().strip() == "ready", process.stderr.read()[-3000:]
    go.touch()
    return processes


def shard_runs(processes: list[subprocess.Popen]) -> list[dict]:
    """What each shard process reported once it exited 0 (tests/run_shards.py's JSON lines)."""
    outputs = [process.communicate(timeout=900) for process in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err[-3000:]
    return [json.loads(line) for out, _ in outputs for line in out.splitlines() if line]


def run_two_shard_processes(
    settings: Settings, tmp_path: Path, *, flags: tuple[str, ...] = (), env: dict | None = None
) -> list[dict]:
    """Both shard processes of `start_two_shard_processes`, run to the end."""
    return shard_runs(start_two_shard_processes(settings, tmp_path, flags=flags, env=env))


def one_run_and_fanned(settings: Settings) -> tuple[Settings, Settings]:
    """Two memories of the same records: `one` built by one unpartitioned run over every shard
    (what memory_job's embed and index steps do), `fanned` left for the shard runs."""
    one, fanned = scoped(settings, "one"), scoped(settings, "fan")
    build_records(DeltaStore.from_settings(one))
    shutil.copytree(one.delta_uri, fanned.delta_uri)  # the same records, byte for byte
    resources = build_resources(one.replace(embedding={"batch_size": 8}))
    assert materialize(
        [role_row_embeddings, search_index], resources=resources, tags=all_shards_tags()
    ).success
    return one, fanned


def assert_ran_at_once(runs: list[dict]) -> None:
    """The runs overlapped in time: each started before any other ended, by the start and end
    times each process's Dagster instance recorded for its run (one machine's clock)."""
    assert all(r["start"] is not None and r["end"] is not None for r in runs), runs
    assert max(r["start"] for r in runs) < min(r["end"] for r in runs), [
        (r["partition"], r["start"], r["end"]) for r in runs
    ]


def assert_shard_runs_equal_one_run(
    runs: list[dict], one: Settings, fanned: Settings, es: Elasticsearch
) -> None:
    """The two shard runs succeeded, each embedded its own rows, and together they left the same
    statuses and documents as the unpartitioned run."""
    assert [r["partition"] for r in runs] == ["0", "1"]
    assert all(r["success"] for r in runs), [r["errors"] for r in runs]
    embedded = [r["assets"]["role_row_embeddings"] for r in runs]
    assert [e["shard"] for e in embedded] == ["shard-0-of-2", "shard-1-of-2"]
    # each shard embedded only its own rows: together every non-blank row once
    one_store, fan_store = DeltaStore.from_settings(one), DeltaStore.from_settings(fanned)
    rows = one_store.read(ROLE_ROWS)
    nonblank = rows.filter(pl.col("text").str.strip_chars() != "")
    assert sum(e["to_process"] for e in embedded) == rows.height
    assert sum(e["skipped"] for e in embedded) == rows.height - nonblank.height

    one_status = one_store.read(ROW_EMBEDDINGS).select(STATUS_COLUMNS).sort("row_id")
    fan_status = fan_store.read(ROW_EMBEDDINGS).select(STATUS_COLUMNS).sort("row_id")
    assert fan_status.equals(one_status)
    assert one_status.height == rows.height

    for kind in (ROWS, TURNS):
        one_docs = documents(es, alias_name(one.elasticsearch.index_prefix, kind))
        fan_docs = documents(es, alias_name(fanned.elasticsearch.index_prefix, kind))
        assert len(one_docs) == (rows.height if kind == ROWS else 2 * len(CONVERSATIONS))
        assert_same_documents(one_docs, fan_docs)


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_two_shards_in_parallel_processes_equal_one_run(
    es_settings: Settings, tmp_path: Path
) -> None:
    one, fanned = one_run_and_fanned(es_settings)
    es = make_client(es_settings)
    runs = run_two_shard_processes(fanned, tmp_path)
    assert_ran_at_once(runs)  # side by side: the shard leases did not keep one waiting
    assert_shard_runs_equal_one_run(runs, one, fanned, es)
    fan_store = DeltaStore.from_settings(fanned)
    embedder = memory_embedder(fanned.embedding, fan_store, batch_size=8)  # the runs' backend

    # per-shard watermarks and index states, nothing global
    model_id = embedder.model_id
    version = fan_store.version(ROLE_ROWS)
    for shard in all_shards(2):
        assert watermark(fan_store, ROW_EMBEDDINGS, covered_mark(model_id, shard)) == version
    assert watermark(fan_store, ROW_EMBEDDINGS, covered_mark(model_id)) is None
    states = sorted(fan_store.read(INDEX_STATE).get_column("index_name").to_list())
    assert [s.rsplit("/", 1)[-1] for s in states] == ["shard-0-of-2", "shard-1-of-2"] * 2

    # a rerun of a shard is idempotent: nothing to embed, nothing to index
    shard = Shard(0, 2)
    again = embed_role_rows(fan_store, embedder, shard=shard)
    assert (again.to_process, again.embedded) == (0, 0)
    reports = sync_live(fan_store, es, fanned, model_id=model_id, shard=shard)
    assert all(r.skipped and r.indexed == 0 and r.deleted == 0 for r in reports)

    # a change in one conversation is the business of its shard only
    changed = CONVERSATIONS[0]
    owner = Shard(pl.DataFrame({"conversation_id": [changed]}).select(shard_expr(2)).item(), 2)
    other = Shard(1 - owner.index, 2)
    write_rows(fan_store, role_rows(["a brand new answer"], conversation=changed, start=10))
    assert embed_role_rows(fan_store, embedder, shard=other).to_process == 0
    assert embed_role_rows(fan_store, embedder, shard=owner).embedded == 1
    synced = sync_live(fan_store, es, fanned, model_id=model_id, shard=owner)
    assert {r.kind: r.indexed for r in synced}[ROWS] == 1


@pytest.mark.es
def test_shard_leases_run_side_by_side_and_exclude_the_global_lease(
    es_settings: Settings,
) -> None:
    prefix = es_settings.elasticsearch.index_prefix
    first, second = make_client(es_settings), make_client(es_settings)  # two holders
    zero, one = (shard_lease_name(s.name) for s in all_shards(2))

    def hold(es: Elasticsearch, operation: str, name: str = "writer"):
        return writer_lease(es, prefix, operation, ttl_s=30, name=name)

    with hold(first, "shard 0", zero), hold(second, "shard 1", one):
        with pytest.raises(LeaseHeld), hold(second, "shard 0 again", zero):
            pass
        with pytest.raises(LeaseHeld, match="excludes the writer lease"), hold(second, "reindex"):
            pass
    with hold(first, "reindex"):
        with pytest.raises(LeaseHeld, match="excludes the writer-shard-0-of-2 lease"):
            with hold(second, "shard 0", zero):
                pass
    with hold(second, "shard 0", zero), hold(first, "shard 1", one):
        pass  # both free again: the refused attempts left nothing behind
    with hold(first, "reindex"):
        pass


def test_cli_job_runs_cover_the_whole_range_or_one_shard() -> None:
    assert job_tags("memory_job", None, 4) == {
        "dagster/asset_partition_range_start": "0",
        "dagster/asset_partition_range_end": "3",
    }
    assert job_tags("shards_job", "2", 4) == {"dagster/partition": "2"}
    assert job_tags("retention_job", None, 4) == {}


def test_a_records_run_fans_out_to_one_run_per_shard() -> None:
    requests = shard_requests("run-1")
    assert [r.partition_key for r in requests] == [str(i) for i in range(shard_count())]
    assert len({r.run_key for r in requests}) == shard_count()
    assert all(r.tags["ctxdb/after_run"] == "run-1" for r in requests)
