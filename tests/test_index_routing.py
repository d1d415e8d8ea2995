"""Routing by user on a multi-shard index, on the real node: every document of a user sits on one
shard, every write, read and delete path passes the routing, and the identity filter still bounds
what a search sees."""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from conftest_ops import es_ids, run_pipeline
from elasticsearch import BadRequestError
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.contract.identity import Principal
from ctxdb.index.incremental import current_versions, sync_index
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.routing import index_layout, layout_mismatches, routing_key, settings_layout
from ctxdb.index.sources import SOURCES
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target, create_index, ensure_index
from ctxdb.lifecycle import erase as erasure
from ctxdb.lifecycle import retention
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import SearchService
from ctxdb.serve.resolve import Resolver
from ctxdb.storage.tables import INDEX_STATE, ROLE_ROWS, TURN_LOGS

pytestmark = pytest.mark.es

SHARDS = 3


@pytest.fixture
def routed(ops_settings):
    return ops_settings.replace(elasticsearch={"shards": SHARDS, "routing": "user"})


def shards_of_users(es, alias: str) -> dict[str, set[int]]:
    """user_id -> the shards holding any of its documents (each shard searched alone)."""
    es.indices.refresh(index=alias)
    found: dict[str, set[int]] = {}
    for shard in range(SHARDS):
        response = es.search(
            index=alias,
            preference=f"_shards:{shard}",
            size=0,
            aggs={"users": {"terms": {"field": "user_id", "size": 100}}},
        )
        for bucket in response["aggregations"]["users"]["buckets"]:
            found.setdefault(bucket["key"], set()).add(shard)
    return found


def routed_shard(es, alias: str, user: str) -> int:
    """The shard `_search_shards` names for the user's routing key."""
    groups = es.search_shards(index=alias, routing=routing_key(user))["shards"]
    assert len(groups) == 1
    return groups[0][0]["shard"]


def test_routing_key_is_stable_and_a_single_routing_value():
    assert routing_key("alice") == routing_key("alice") != routing_key("bob")
    assert "," not in routing_key("a,b") and len(routing_key("a,b")) == 16


def test_layout_mismatches_name_each_difference():
    index = {"routing": "none", "vector_index": "hnsw", "shards": 1}
    wanted = {"routing": "user", "vector_index": "hnsw", "shards": 1}
    assert layout_mismatches(index, wanted) == ["routing: index has 'none', settings say 'user'"]
    assert layout_mismatches(index, index) == []


def test_an_index_without_a_sort_in_its_meta_reads_as_unsorted_and_differs(es, routed):
    prefix = routed.elasticsearch.index_prefix
    name = create_index(es, prefix, TURNS, 1, dims=384, model_id="m")
    es.indices.put_mapping(index=name, meta={"kind": TURNS, "version": 1, "routing": "none"})
    assert index_layout(es, name)["sort"] == "none"
    assert "sort" not in es.indices.get_settings(index=name)[name]["settings"]["index"]
    assert layout_mismatches(index_layout(es, name), settings_layout(routed)) == [
        "routing: index has 'none', settings say 'user'",
        "sort: index has 'none', settings say 'user'",
    ]


def test_a_routed_multi_shard_index_refuses_a_write_without_routing(es, routed):
    prefix = routed.elasticsearch.index_prefix
    layout = {"routing": "user", "vector_index": "int8_hnsw", "shards": SHARDS, "sort": "user"}
    name = create_index(es, prefix, ROWS, 1, dims=384, model_id="m", layout=layout)
    assert index_layout(es, name) == layout
    settings = es.indices.get_settings(index=name)[name]["settings"]["index"]
    assert settings["number_of_shards"] == str(SHARDS)
    assert settings["sort"] == {
        "field": ["tenant", "user_id", "conversation_id"],
        "order": ["asc", "asc", "asc"],
    }
    mapping = es.indices.get_mapping(index=name)[name]["mappings"]
    assert mapping["_routing"] == {"required": True}
    assert mapping["properties"]["embedding"]["index_options"]["type"] == "int8_hnsw"
    with pytest.raises(BadRequestError, match="routing_missing"):
        es.index(index=name, id="x", document={"row_id": "x", "user_id": "u1"})
    es.index(index=name, id="x", document={"row_id": "x", "user_id": "u1"}, routing="k")
    assert es.get(index=name, id="x", routing="k")["found"]


def test_an_existing_index_keeps_its_layout_and_the_difference_is_logged(es, routed, caplog):
    prefix = routed.elasticsearch.index_prefix
    first = ensure_index(es, prefix, TURNS, dims=384, model_id="m", layout=settings_layout(routed))
    unrouted = {**settings_layout(routed), "routing": "none"}
    with caplog.at_level(logging.WARNING, logger="ctxdb.index.versions"):
        again = ensure_index(es, prefix, TURNS, dims=384, model_id="m", layout=unrouted)
    assert again == first and index_layout(es, first)["routing"] == "user"
    assert "routing: index has 'user', settings say 'none'" in caplog.text


def test_writers_that_create_the_first_index_at_once_share_one(es, routed):
    """Shard runs on several workers may all find no index: each round releases 6 threads at
    once into `ensure_index`; every one gets the same index, and only one version exists."""
    prefix = routed.elasticsearch.index_prefix
    layout = settings_layout(routed)
    for round_ in range(4):
        round_prefix = f"{prefix}-race{round_}"
        start = threading.Barrier(6)

        def create(_: int, round_prefix: str = round_prefix, start=start) -> str:
            start.wait()
            return ensure_index(es, round_prefix, ROWS, dims=384, model_id="m", layout=layout)

        with ThreadPoolExecutor(6) as pool:
            names = set(pool.map(create, range(6)))
        assert names == {f"{round_prefix}-rows-v1"}
        assert alias_target(es, alias_name(round_prefix, ROWS)) == f"{round_prefix}-rows-v1"
        assert list(es.indices.get(index=f"{round_prefix}-rows-v*")) == [f"{round_prefix}-rows-v1"]


def test_every_user_on_one_shard_and_every_read_finds_their_documents(store, es, routed):
    now = datetime.now(UTC)
    run_pipeline(store, es, routed, {"a": (1, now), "b": (7, now)})
    rows = store.read(ROLE_ROWS)
    users = sorted(rows["user_id"].unique())
    assert len(users) == 2
    prefix = routed.elasticsearch.index_prefix
    for kind in (ROWS, TURNS):
        alias = alias_name(prefix, kind)
        placed = shards_of_users(es, alias)
        assert set(placed) == set(users)
        for user in users:
            assert placed[user] == {routed_shard(es, alias, user)}, (kind, user)

    service = SearchService(routed, es)
    resolver = Resolver(routed, es)
    for user in users:
        mine = rows.filter(pl.col("user_id") == user)
        tenant = mine["tenant"][0]
        principal = Principal(user_id=user, tenant=tenant)
        row = mine.sort("ts").row(-1, named=True)
        response = service.search(principal, SearchRequest(query=row["text"][:120], days=3650))
        assert row["turn_id"] in {h.turn_id for h in response.hits}
        listed = {c.conversation_id for c in service.conversations(principal).conversations}
        assert listed == set(mine["conversation_id"])
        assert service.turn(principal, row["conversation_id"], row["turn_id"]).turn_id
        nth = service.search(
            principal, SearchRequest(query="", conversation_id=row["conversation_id"], ordinal=1)
        )
        assert len(nth.hits) == 1
    refs = (
        store.read(TURN_LOGS)
        .filter(pl.col("payload").str.contains("conv:fi:"))
        .select("user_id", "tenant", "conversation_id", "turn_id", "payload")
    )
    assert refs.height > 0
    ref_row = refs.row(0, named=True)
    ref = "conv:fi:" + ref_row["payload"].split("conv:fi:")[1].split('"')[0]
    owner = Principal(user_id=ref_row["user_id"], tenant=ref_row["tenant"])
    assert resolver.pull(owner, ref, ref_row["conversation_id"]).data


def test_routing_never_lets_a_user_see_another_users_rows(store, es, routed):
    now = datetime.now(UTC)
    run_pipeline(store, es, routed, {"a": (1, now), "b": (7, now)})
    rows = store.read(ROLE_ROWS)
    first, second = sorted(rows["user_id"].unique())
    theirs = rows.filter(pl.col("user_id") == second)
    service = SearchService(routed, es)
    for text in theirs["text"].head(5):
        hits = service.search(Principal(user_id=first), SearchRequest(query=text[:120])).hits
        assert not {h.conversation_id for h in hits} & set(theirs["conversation_id"])
    # Same user id in another tenant: same routing key, so the same shard; the tenant filter
    # alone keeps the rows out.
    stranger = Principal(user_id=second, tenant="someone-else")
    text = theirs["text"][0][:120]
    assert service.search(stranger, SearchRequest(query=text, days=3650)).hits == []
    assert service.conversations(stranger).conversations == []


def test_deletes_by_sync_retention_and_erasure_reach_the_routed_shard(store, es, routed):
    now = datetime.now(UTC)
    batches = {"old": (1, now - timedelta(days=400)), "new": (7, now)}
    run_pipeline(store, es, routed, batches)
    prefix = routed.elasticsearch.index_prefix
    expired = set(store.read(ROLE_ROWS).filter(pl.col("expires_at") <= now)["row_id"])
    assert expired
    before = current_versions(store, SOURCES[ROWS].tables)

    report = retention.sweep(store, es, routed, vacuum_hours=168)
    assert report.es_deleted[ROWS] == len(expired)
    live = set(store.read(ROLE_ROWS)["row_id"])
    assert es_ids(es, prefix, ROWS) == live

    # an indexer that read Delta before the sweep writes the expired rows back (routed);
    # the next sync deletes them again as gone, each on its shard
    store.delete(INDEX_STATE, "kind = 'rows'")
    index = alias_target(es, alias_name(prefix, ROWS))
    sync_index(store, es, SOURCES[ROWS], index, model_id=routed.embedding.model, versions=before)
    assert expired <= es_ids(es, prefix, ROWS)
    sync_live(store, es, routed, model_id=routed.embedding.model)
    assert es_ids(es, prefix, ROWS) == live

    rows = store.read(ROLE_ROWS)
    user = rows["user_id"][0]
    erased = erasure.erase(store, es, routed, erasure.Scope("user_id", user))
    assert erased.verified, erased.message
    left = rows.filter(pl.col("user_id") != user)
    assert es_ids(es, prefix, ROWS) == set(left["row_id"])
    assert user not in shards_of_users(es, alias_name(prefix, TURNS))


def test_index_status_shows_the_layout_and_what_a_reindex_would_change(es, routed, monkeypatch):
    prefix = routed.elasticsearch.index_prefix
    for kind in (ROWS, TURNS):
        ensure_index(es, prefix, kind, dims=384, model_id="m", layout=settings_layout(routed))
    _register_all()
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", prefix)
    monkeypatch.setenv("ELASTICSEARCH_URL", routed.elasticsearch.url)
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_SHARDS", str(SHARDS))
    runner = CliRunner()

    same = runner.invoke(app, ["index", "status"])
    assert same.exit_code == 0, same.output
    assert "reindex" not in same.output
    rows = json.loads(runner.invoke(app, ["index", "status", "--json"]).output.splitlines()[0])
    assert rows["layout"] == {
        "routing": "user",
        "vector_index": "int8_hnsw",
        "shards": SHARDS,
        "sort": "user",
    }

    monkeypatch.setenv("CTXDB_ELASTICSEARCH_ROUTING", "none")
    changed = runner.invoke(app, ["index", "status"])
    assert (
        f"{alias_name(prefix, ROWS)}: routing: index has 'user', settings say 'none'; "
        "`ctxdb index reindex` applies the settings" in changed.output
    )
