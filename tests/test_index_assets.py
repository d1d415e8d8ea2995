"""The `role_row_embeddings` and `search_index` assets, their checks, `reindex_job` and the
`ctxdb index` CLI, run through Dagster and Typer against real Delta tables, the real node and
the real model."""

from __future__ import annotations

import json

import pytest
from conftest_index import role_rows, turn_tables, write_rows
from dagster import materialize
from typer.testing import CliRunner

from assets.embeddings import role_row_embeddings
from assets.search_index import (
    doc_count_matches_delta,
    embedding_coverage,
    no_expired_documents,
    search_index,
)
from assets.shards import all_shards_tags
from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.storage.tables import ROLE_ROWS
from pipelines.reindex import reindex_job
from pipelines.resources import build_resources

pytestmark = [pytest.mark.es, pytest.mark.model]

ASSETS = [
    role_row_embeddings,
    search_index,
    doc_count_matches_delta,
    embedding_coverage,
    no_expired_documents,
]


@pytest.fixture
def env(es_settings, monkeypatch):
    """Point the settings object (read by resources and the CLI) at the test node and prefix."""
    monkeypatch.setenv("ELASTICSEARCH_URL", es_settings.elasticsearch.url)
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", es_settings.elasticsearch.index_prefix)
    monkeypatch.setenv("CTXDB_HOME", str(es_settings.home))
    return es_settings


def resources(settings, model_name: str | None = None) -> dict:
    embedding = {"batch_size": 8} | ({"model": model_name} if model_name else {})
    return build_resources(settings.replace(embedding=embedding))


def checks(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def test_assets_embed_index_and_pass_checks_then_do_nothing(env, delta_store):
    write_rows(delta_store, role_rows(["openpyxl timezone fix", "tabular data", "   "]))
    turn_tables(delta_store, 2)
    first = materialize(ASSETS, resources=resources(env), tags=all_shards_tags())
    assert first.success
    assert checks(first) == {
        "doc_count_matches_delta": True,
        "embedding_coverage": True,
        "no_expired_documents": True,
    }
    embed_meta = first.asset_materializations_for_node("role_row_embeddings")[0].metadata
    assert (embed_meta["embedded"].value, embed_meta["skipped"].value) == (2, 1)
    index_meta = first.asset_materializations_for_node("search_index")[0].metadata
    assert (index_meta["rows_indexed"].value, index_meta["turns_indexed"].value) == (3, 2)

    second = materialize(ASSETS, resources=resources(env), tags=all_shards_tags())
    embed_meta = second.asset_materializations_for_node("role_row_embeddings")[0].metadata
    index_meta = second.asset_materializations_for_node("search_index")[0].metadata
    assert embed_meta["embedded"].value == 0
    assert index_meta["rows_skipped"].value and index_meta["turns_skipped"].value


def test_count_check_names_missing_documents(env, delta_store):
    write_rows(delta_store, role_rows(["one", "two"]))
    materialize(ASSETS, resources=resources(env), tags=all_shards_tags())
    es = make_client(env)
    es.delete(index=alias_name(env.elasticsearch.index_prefix, ROWS), id="c1-r1", refresh=True)
    result = materialize(
        [search_index, doc_count_matches_delta], resources=resources(env), tags=all_shards_tags()
    )
    evaluation = result.get_asset_check_evaluations()[0]
    assert not evaluation.passed
    assert evaluation.metadata["rows_missing_ids"].value == "c1-r1"


def test_broken_model_assets_still_index_rows_for_bm25(env, delta_store, tmp_path):
    write_rows(delta_store, role_rows(["KeyError: 'sheet_name' in read_excel"]))
    result = materialize(
        ASSETS, resources=resources(env, model_name=str(tmp_path / "gone")), tags=all_shards_tags()
    )
    assert result.success
    meta = result.asset_materializations_for_node("role_row_embeddings")[0].metadata
    assert meta["pending"].value == 1
    assert checks(result)["embedding_coverage"] is False
    hits = make_client(env).search(
        index=alias_name(env.elasticsearch.index_prefix, ROWS),
        query={"match": {"text": "sheet_name"}},
    )["hits"]["hits"]
    assert [h["_id"] for h in hits] == ["c1-r0"]


def test_reindex_job_and_index_cli(env, delta_store):
    write_rows(delta_store, role_rows(["alpha answer", "beta answer", "gamma answer"]))
    turn_tables(delta_store, 1)
    materialize(ASSETS, resources=resources(env), tags=all_shards_tags())
    run = reindex_job.execute_in_process(
        run_config={
            "ops": {
                "build_verify_swap": {"config": {"min_coverage_pct": 100}},
                "drop_retired_indices": {"config": {"grace_period_s": 0}},
            }
        },
        resources=resources(env),
    )
    assert run.success
    assert run.output_for_node("drop_retired_indices") == [
        f"{env.elasticsearch.index_prefix}-rows-v1",
        f"{env.elasticsearch.index_prefix}-turns-v1",
    ]

    _register_all()
    runner = CliRunner()
    out = runner.invoke(app, ["index", "status", "--json"])
    assert out.exit_code == 0, out.output
    status = {s["kind"]: s for s in map(json.loads, out.output.strip().splitlines())}
    assert (status["rows"]["version"], status["rows"]["docs"]) == (2, 3)
    assert status["rows"]["coverage_pct"] == 100.0 and status["turns"]["docs"] == 1
    table = runner.invoke(app, ["index", "status"])
    assert (
        f"{env.elasticsearch.index_prefix}-rows-v2" in table.output and "3/3 100.0%" in table.output
    )

    delta_store.delete(ROLE_ROWS, "row_id = 'c1-r0'")
    out = runner.invoke(app, ["index", "reindex", "--grace", "0"])
    assert out.exit_code == 0, out.output
    assert (
        f"{env.elasticsearch.index_prefix}-rows-v2 -> {env.elasticsearch.index_prefix}-rows-v3"
        in out.output
    )
    assert (
        make_client(env).count(index=alias_name(env.elasticsearch.index_prefix, ROWS))["count"] == 2
    )
