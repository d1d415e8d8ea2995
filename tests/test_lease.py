"""The writer lease on the real node: one index writer at a time, across clients (each client here
stands for another process or machine), renewal, takeover of an expired lease, re-entrancy, and
fencing (issue 25: a landing or derivation that lost its lease stops before its next commit)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest_index import role_rows, turn_tables, write_rows
from conftest_ports import free_port_pair
from conftest_turn_record import NOW, Turn, write_jsonl

from ctxdb.coordination.lease import (
    LeaseHeld,
    LeaseLost,
    LeaseUnavailable,
    acquire,
    lease_index,
    owner_id,
    release,
    writer_lease,
    writer_lease_for,
)
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target, versions
from ctxdb.landing import run as landing_run
from ctxdb.landing.run import land
from ctxdb.lifecycle.reindex import reindex
from ctxdb.lifecycle.retention import sweep
from ctxdb.record import run as record_run
from ctxdb.record.run import derive, last_derived_version
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, RAW_TURN_EVENTS, ROLE_ROWS, TURN_LOGS

pytestmark = pytest.mark.es

MODEL = "all-MiniLM-L6-v2"


def holder(es, prefix: str) -> dict | None:
    found = es.options(ignore_status=404).get(index=lease_index(prefix), id="writer")
    return found["_source"] if found.get("found") else None


def test_a_second_holder_is_refused_until_the_first_releases(es, settings) -> None:
    other = make_client(settings)
    with writer_lease(es, settings.elasticsearch.index_prefix, "reindex", ttl_s=30) as lease:
        assert holder(es, settings.elasticsearch.index_prefix)["owner"] == owner_id()
        with pytest.raises(LeaseHeld, match="reindex .* holds the writer lease") as refused:
            acquire(other, settings.elasticsearch.index_prefix, "retention", ttl_s=30)
        # finding 15 of issue 41: the refusal says when a killed holder's lease frees itself
        left = int(re.search(r"frees itself in (\d+) s", str(refused.value)).group(1))
        assert 0 < left <= 30
        with writer_lease(es, settings.elasticsearch.index_prefix, "index sync", ttl_s=30) as inner:
            assert inner is lease  # re-entrant within one holder
        assert holder(es, settings.elasticsearch.index_prefix) is not None  # the inner exit kept it
    assert holder(es, settings.elasticsearch.index_prefix) is None
    release(acquire(other, settings.elasticsearch.index_prefix, "retention", ttl_s=30))


def test_a_waiting_writer_gets_the_lease_when_the_holder_finishes(es, settings) -> None:
    other = make_client(settings)
    busy = acquire(other, settings.elasticsearch.index_prefix, "reindex", ttl_s=30)
    released = threading.Event()

    def finish() -> None:
        release(busy)
        released.set()

    threading.Timer(1.0, finish).start()
    with writer_lease(
        es, settings.elasticsearch.index_prefix, "retention", ttl_s=30, wait_s=60
    ) as lease:
        assert lease.operation == "retention"
        assert released.is_set()  # it waited for the holder instead of taking the lease over
    busy = acquire(other, settings.elasticsearch.index_prefix, "reindex", ttl_s=30)
    with pytest.raises(LeaseHeld):
        with writer_lease(
            es, settings.elasticsearch.index_prefix, "retention", ttl_s=30, wait_s=0.5
        ):
            pass
    release(busy)


def expiry(es, prefix: str) -> datetime:
    return datetime.fromisoformat(holder(es, prefix)["expires_at"])


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Poll `condition` until it holds (a bound only against a hang, never a timing claim)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def test_the_heartbeat_keeps_a_lease_alive_past_its_ttl(es, settings) -> None:
    """The clock passes the lease's first expiry; renewals have moved the document's expiry
    ahead (waited for: however late a heartbeat comes under load, the check is made when the
    document shows a renewal with a second to spare), and another holder is still refused."""
    prefix = settings.elasticsearch.index_prefix
    other = make_client(settings)
    with writer_lease(es, prefix, "reindex", ttl_s=3) as lease:
        first = expiry(es, prefix)
        wait_until(lambda: datetime.now(UTC) > first, "past the first expiry")
        wait_until(
            lambda: expiry(es, prefix) - datetime.now(UTC) > timedelta(seconds=1),
            "renewed ahead of the clock",
        )
        with pytest.raises(LeaseHeld):
            acquire(other, prefix, "retention", ttl_s=30)
        lease.check()  # still this holder's


def test_an_expired_lease_is_taken_over_and_its_holder_notices(es, settings) -> None:
    prefix = settings.elasticsearch.index_prefix
    crashed = acquire(es, prefix, "reindex", ttl_s=1)  # never renewed
    expires = expiry(es, prefix)
    wait_until(lambda: datetime.now(UTC) > expires, "past the expiry")
    other = make_client(settings)
    taker = acquire(other, settings.elasticsearch.index_prefix, "retention", ttl_s=30)
    assert holder(es, settings.elasticsearch.index_prefix)["operation"] == "retention"
    crashed.renew()
    with pytest.raises(LeaseLost):
        crashed.check()
    release(crashed)  # not ours any more: left alone
    assert holder(es, settings.elasticsearch.index_prefix)["operation"] == "retention"
    release(taker)
    assert holder(es, settings.elasticsearch.index_prefix) is None


@pytest.fixture
def live(delta_store, embedder, settings, es) -> str:
    """One indexed row and turn; the live rows index name."""
    write_rows(delta_store, role_rows(["an answer about spreadsheets"]))
    turn_tables(delta_store, 1)
    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, settings, model_id=MODEL)
    return alias_target(es, alias_name(settings.elasticsearch.index_prefix, ROWS))


@pytest.mark.model
def test_writers_elsewhere_block_reindex_sync_and_sweep(
    delta_store, embedder, settings, es, live
) -> None:
    other = make_client(settings)
    elsewhere = acquire(other, settings.elasticsearch.index_prefix, "erase", ttl_s=30)
    with pytest.raises(LeaseHeld, match="erase"):
        reindex(delta_store, es, settings, embedder)
    with pytest.raises(LeaseHeld):
        sync_live(delta_store, es, settings, model_id=MODEL)
    with pytest.raises(LeaseHeld):
        sweep(delta_store, es, settings)
    assert alias_target(es, alias_name(settings.elasticsearch.index_prefix, ROWS)) == live
    assert sorted(versions(es, settings.elasticsearch.index_prefix, ROWS)) == [1]
    release(elsewhere)
    assert reindex(delta_store, es, settings, embedder).swaps


@pytest.mark.model
def test_a_reindex_that_lost_its_lease_stops_before_the_swap(
    delta_store, embedder, settings, es, live
) -> None:
    other = make_client(settings)

    def take_over(_builds: dict[str, str]) -> None:
        steal(other, settings.elasticsearch.index_prefix)  # no renewal needed to notice

    with pytest.raises(LeaseLost):
        reindex(delta_store, es, settings, embedder, before_swap=take_over)
    assert alias_target(es, alias_name(settings.elasticsearch.index_prefix, ROWS)) == live
    assert sorted(versions(es, settings.elasticsearch.index_prefix, ROWS)) == [1]
    assert holder(es, settings.elasticsearch.index_prefix)["owner"] == "elsewhere:1"


def test_the_cli_names_the_holder_and_exits_2(es, settings, tmp_path) -> None:
    elsewhere = acquire(
        make_client(settings), settings.elasticsearch.index_prefix, "reindex", ttl_s=30
    )
    env = {
        **os.environ,
        "CTXDB_HOME": str(tmp_path),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ctxdb"), "retention", "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    release(elsewhere)
    assert done.returncode == 2, done.stderr
    assert "error: reindex (" in done.stderr
    assert "holds the writer lease" in done.stderr
    assert "Traceback" not in done.stderr


def test_releasing_when_elasticsearch_is_gone_leaves_the_lease_to_expire(es, settings) -> None:
    lease = acquire(es, settings.elasticsearch.index_prefix, "retention", ttl_s=30)
    gone = settings.replace(elasticsearch={"url": f"http://127.0.0.1:{free_port_pair()}"})
    lease.es = make_client(gone)
    release(lease)  # logs a warning instead of failing the operation it ends
    assert holder(es, settings.elasticsearch.index_prefix)["operation"] == "retention"
    lease.es = es
    release(lease)
    assert holder(es, settings.elasticsearch.index_prefix) is None


def steal(es, prefix: str) -> None:
    """Another writer takes the lease over (as after this holder's lease expired)."""
    es.index(
        index=lease_index(prefix),
        id="writer",
        document={
            "owner": "elsewhere:1",
            "operation": "retention",
            "acquired_at": "2026-12-02T00:00:00+00:00",
            "expires_at": "2099-01-01T00:00:00+00:00",
        },
        refresh=True,
    )


def lose_the_lease_after(
    monkeypatch: pytest.MonkeyPatch, module: object, name: str, es, settings: Settings
) -> None:
    """Every call of `module.name` runs, then hands the lease to another holder (a takeover
    between two writes)."""
    real = getattr(module, name)

    def then_lose_the_lease(*args, **kwargs):
        done = real(*args, **kwargs)
        steal(es, settings.elasticsearch.index_prefix)
        return done

    monkeypatch.setattr(module, name, then_lose_the_lease)


def test_issue_25_a_landing_that_lost_its_lease_stops_before_its_next_commit(
    es, settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is taken over right after the first wave's commits (a hook between two writes);
    the landing stops with `LeaseLost` before the second wave's first commit, without waiting
    for a renewal (the check reads the lease document)."""
    for name in ("a", "b"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", Turn(f"c-{name}", "t1").basic().events)
    monkeypatch.setattr("ctxdb.landing.run.WAVE_ROWS", 1)  # one file per wave
    lose_the_lease_after(monkeypatch, landing_run, "commit", es, settings)
    store = DeltaStore(settings.delta_uri)
    with pytest.raises(LeaseLost, match="stopping before the next commit"):
        land(store, str(tmp_path / "in"), now=NOW, writer=writer_lease_for(es, settings, "landing"))
    assert set(store.read(RAW_TURN_EVENTS)["conversation_id"]) == {"c-a"}
    assert store.read(LANDED_FILES)["source_file"].str.ends_with("a.jsonl").all()
    assert holder(es, settings.elasticsearch.index_prefix)["owner"] == "elsewhere:1"


def test_issue_25_a_derivation_that_lost_its_lease_does_not_advance_its_state(
    es, settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is taken over after the first derived table is written: the derivation stops
    before its next commit and `derive_state` stays behind, so the next run redoes the work."""
    write_jsonl(tmp_path / "in" / "a.jsonl", Turn("c1", "t1").basic().events)
    store = DeltaStore(settings.delta_uri)
    land(store, str(tmp_path / "in"), now=NOW)
    lose_the_lease_after(monkeypatch, record_run, "write_table", es, settings)
    with pytest.raises(LeaseLost):
        derive(store, settings, now=NOW, writer=writer_lease_for(es, settings, "derivation"))
    assert store.read(TURN_LOGS).height == 1
    assert not store.exists(ROLE_ROWS)  # the next table's commit never ran
    assert last_derived_version(store) == -1


def test_issue_41_a_writer_that_loses_elasticsearch_names_the_outage_not_a_takeover(
    es, settings
) -> None:
    """Finding 12: when the lease document cannot be read mid-run (Elasticsearch stopped
    answering), the check says so (exit 1, the outage's code) instead of `LeaseLost`'s
    "taken over" (exit 2, "another writer holds the lease"); nobody took the lease over."""
    from elasticsearch import Elasticsearch

    from ctxdb.cli.errors import LEASE_EXIT, exit_status

    lease = acquire(es, settings.elasticsearch.index_prefix, "landing", ttl_s=30)
    try:
        lease.es = Elasticsearch(f"http://127.0.0.1:{free_port_pair()}", request_timeout=2)
        with pytest.raises(LeaseUnavailable, match="lost Elasticsearch mid-run") as caught:
            lease.check()
        assert "ConnectionError" in str(caught.value) and "taken over" not in str(caught.value)
        assert exit_status(caught.value) == 1 != LEASE_EXIT
        with pytest.raises(LeaseUnavailable):  # and it stays lost
            lease.check()
    finally:
        lease.es = es
        release(lease)
