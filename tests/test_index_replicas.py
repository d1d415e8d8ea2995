"""Replicas on the real node: the sync creates every index (and the lease index) with
`auto_expand_replicas` 0-1 and the single node stays green; an explicit count is applied in place
and kept by a reindex; `ctxdb index status` shows the live value and health.

A fixed count above 0 is not set on the node: the session's single node would turn yellow for
every concurrently running test that checks cluster health."""

from __future__ import annotations

import json

import pytest
from conftest_index import role_rows, turn_tables, write_rows
from pydantic import ValidationError
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.coordination.lease import lease_index
from ctxdb.elastic.replicas import replica_state
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target
from ctxdb.lifecycle.reindex import reindex
from ctxdb.settings import Settings

MODEL = "all-MiniLM-L6-v2"
AUTO = {"number_of_replicas": "0", "auto_expand_replicas": "0-1"}
FIXED = {"number_of_replicas": "0", "auto_expand_replicas": None}


def live(es, settings: Settings) -> dict[str, str]:
    """The concrete index behind each alias."""
    prefix = settings.elasticsearch.index_prefix
    return {kind: alias_target(es, alias_name(prefix, kind)) for kind in (ROWS, TURNS)}


def status_lines(settings: Settings, monkeypatch, *args: str) -> str:
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", settings.elasticsearch.index_prefix)
    monkeypatch.setenv("ELASTICSEARCH_URL", settings.elasticsearch.url)
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_REPLICAS", settings.elasticsearch.replicas)
    _register_all()
    result = CliRunner().invoke(app, ["index", "status", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_replicas_setting_reads_a_count_or_a_range() -> None:
    assert index_body(ROWS)["settings"]["auto_expand_replicas"] == "0-1"
    fixed = index_body(TURNS, replicas="2")["settings"]
    assert (fixed["number_of_replicas"], fixed["auto_expand_replicas"]) == (2, "false")
    assert Settings(elasticsearch={"replicas": "0-all"}).elasticsearch.replicas == "0-all"
    with pytest.raises(ValidationError, match="give a replica count"):
        Settings(elasticsearch={"replicas": "two"})


@pytest.mark.es
def test_the_sync_creates_auto_expanding_replicas_and_the_node_stays_green(
    delta_store, es, es_settings, monkeypatch
) -> None:
    write_rows(delta_store, role_rows(["an answer about spreadsheets"]))
    turn_tables(delta_store, 1)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    lease = lease_index(es_settings.elasticsearch.index_prefix)
    for name in [*live(es, es_settings).values(), lease]:
        assert replica_state(es, name) == AUTO, name
        assert es.cluster.health(index=name)["status"] == "green", name

    shown = {
        row["kind"]: row
        for row in map(json.loads, status_lines(es_settings, monkeypatch, "--json").splitlines())
    }
    for kind in (ROWS, TURNS):
        assert (shown[kind]["number_of_replicas"], shown[kind]["auto_expand_replicas"]) == (
            0,
            "0-1",
        )
        assert shown[kind]["health"] == "green"
    table = status_lines(es_settings, monkeypatch).splitlines()
    assert "replicas" in table[0] and "health" in table[0]
    assert all("0 (0-1) green" in line for line in table[1:3]), table


@pytest.mark.es
@pytest.mark.model
def test_an_explicit_count_is_applied_in_place_and_kept_by_a_reindex(
    delta_store, es, es_settings, embedder, monkeypatch
) -> None:
    write_rows(delta_store, role_rows(["first answer", "second answer"]))
    turn_tables(delta_store, 2)
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, es_settings, model_id=MODEL)
    first = live(es, es_settings)
    assert {kind: replica_state(es, name) for kind, name in first.items()} == {
        ROWS: AUTO,
        TURNS: AUTO,
    }

    fixed = es_settings.replace(elasticsearch={"replicas": "0"})
    sync_live(delta_store, es, fixed, model_id=MODEL)  # same indices, replicas changed in place
    assert live(es, fixed) == first
    assert {kind: replica_state(es, name) for kind, name in first.items()} == {
        ROWS: FIXED,
        TURNS: FIXED,
    }

    report = reindex(delta_store, es, fixed, embedder)
    second = live(es, fixed)
    assert (
        sorted(swap.new for swap in report.swaps)
        == sorted(second.values())
        != sorted(first.values())
    )
    assert {kind: replica_state(es, name) for kind, name in second.items()} == {
        ROWS: FIXED,
        TURNS: FIXED,
    }
    rows = json.loads(status_lines(fixed, monkeypatch, "--json").splitlines()[0])
    assert (rows["number_of_replicas"], rows["auto_expand_replicas"], rows["health"]) == (
        0,
        None,
        "green",
    )
    assert " 0 green" in status_lines(fixed, monkeypatch).splitlines()[1]

    sync_live(delta_store, es, es_settings, model_id=MODEL)  # back to the default range
    assert replica_state(es, second[ROWS]) == AUTO
