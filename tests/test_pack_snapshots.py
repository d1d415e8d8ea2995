"""Pack snapshots (`ctxdb.pack.snapshot`, issue 45's cold SessionStart) over memories built by the
real pipeline (landing files, `land`, `derive`): a snapshot tells exactly the pack `build_pack`
builds, at any later time and budget; any commit to a table the pack reads, or the expiry of a
row it was made from, makes it unused until the main job's refresh rebuilds it; it is its owner's
only and never holds private text; an erasure removes the user's snapshots; the
`context_pack_snapshots` asset rebuilds the stale ones."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest_turn_record import NOW, Turn, land_and_derive, settings_for, write_jsonl
from dagster import materialize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_context_pack import ANN, BOB, GARDEN, SECRET, SHOP, build

from assets.context_packs import context_pack_snapshots
from ctxdb.contract.identity import Principal
from ctxdb.lifecycle import erase as erasure
from ctxdb.pack.build import build_pack
from ctxdb.pack.models import ContextRequest
from ctxdb.pack.refresh import IDLE, refresh, snapshot_project
from ctxdb.pack.snapshot import load, snapshot_path, told
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from resources.delta import DeltaResource
from resources.settings import SettingsResource


def memory(root: Path) -> tuple[Settings, DeltaStore]:
    store = build(root)
    return settings_for(root), store


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Settings, DeltaStore]:
    settings, store = memory(tmp_path_factory.mktemp("snapshots"))
    assert snapshot_project(settings, store, ANN, SHOP, NOW)
    return settings, store


def tell(settings: Settings, who: Principal, project: str, now: datetime, budget=1500, chars=None):
    assert settings.packs_path is not None
    owner = (who.tenant, who.user_id, project)
    return told(settings.packs_path, Path(settings.delta_uri), owner, budget, chars, now)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    later=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=200)),
    budget=st.integers(min_value=32, max_value=3000),
    chars=st.one_of(st.none(), st.integers(min_value=200, max_value=9500)),
)
def test_a_snapshot_tells_the_pack_build_pack_builds(built, later, budget, chars) -> None:
    """At any later time (ages told again) and budget, the same text as reading Delta."""
    settings, store = built
    now = NOW + later
    expected = build_pack(
        ANN, ContextRequest(project=SHOP, budget=budget, max_chars=chars), now, store
    )
    from_snapshot = tell(settings, ANN, SHOP, now, budget, chars)
    assert from_snapshot == (expected.text if any(i.ref for i in expected.items) else "")


def test_a_snapshot_is_its_owners_alone_and_never_holds_private_text(built) -> None:
    settings, _ = built
    assert tell(settings, BOB, SHOP, NOW) is None  # Bob has no snapshot of it: he is not told Ann's
    assert settings.packs_path is not None
    path = snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP)
    assert SECRET not in path.read_text() and "<private>" not in path.read_text()
    assert path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0
    # Ann's file put where Bob's would be is not told to Bob: each file names its owner
    bobs = snapshot_path(settings.packs_path, BOB.tenant, BOB.user_id, SHOP)
    bobs.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, bobs)
    try:
        assert tell(settings, BOB, SHOP, NOW) is None
    finally:
        shutil.rmtree(bobs.parent)


def test_a_snapshot_is_unused_once_a_row_it_was_made_from_expires(built) -> None:
    settings, _ = built
    assert settings.packs_path is not None
    data = load(snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP))
    assert data is not None and data["expires"] is not None
    expires = datetime.fromisoformat(data["expires"])
    assert tell(settings, ANN, SHOP, expires - timedelta(seconds=1))
    assert tell(settings, ANN, SHOP, expires) is None


def test_a_commit_makes_snapshots_stale_until_the_refresh_rebuilds_them(tmp_path: Path) -> None:
    """New turns of one project: every snapshot is unused (each read the tables that moved on),
    the refresh rebuilds both, and the shop's now names the new turn."""
    settings, store = memory(tmp_path)
    for project in (SHOP, GARDEN):
        assert snapshot_project(settings, store, ANN, project, NOW)
        assert tell(settings, ANN, project, NOW)
    assert refresh(settings, store, NOW).current == 2
    turn = Turn("shop-3", "n1", start=NOW - timedelta(hours=2), agent=SHOP, user_id="ann")
    events = turn.basic("Add a coupon field to the checkout form", "Added.").events
    write_jsonl(tmp_path / "more" / "events.jsonl", [{**e, "tenant": "acme"} for e in events])
    land_and_derive(store, tmp_path / "more", settings)
    assert tell(settings, ANN, SHOP, NOW) is None and tell(settings, ANN, GARDEN, NOW) is None
    stats = refresh(settings, store, NOW)
    assert (stats.rebuilt, stats.current, stats.failed) == (2, 0, 0)
    assert "coupon field" in (tell(settings, ANN, SHOP, NOW) or "")
    assert "coupon field" not in (tell(settings, ANN, GARDEN, NOW) or "-")


def test_a_broken_snapshot_is_never_told_and_is_removed_or_rebuilt(tmp_path: Path) -> None:
    settings, store = memory(tmp_path)
    assert snapshot_project(settings, store, ANN, SHOP, NOW)
    assert settings.packs_path is not None
    path = snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP)
    data = json.loads(path.read_text())
    for broken in ("{not json", json.dumps({**data, "versions": None})):
        path.write_text(broken)
        assert tell(settings, ANN, SHOP, NOW) is None
        assert refresh(settings, store, NOW).removed == 1 and not path.exists()
    # items that are not a snapshot's: never told, and rebuilt by the refresh
    path.write_text(json.dumps({**data, "candidates": [{"text": "x"}]}))
    assert tell(settings, ANN, SHOP, NOW) is None
    assert refresh(settings, store, NOW).current == 1  # its tables did not move: kept as it is
    stale = {**data["versions"], "turn_logs": -1}
    path.write_text(json.dumps({**data, "candidates": [{"text": "x"}], "versions": stale}))
    assert refresh(settings, store, NOW).rebuilt == 1 and tell(settings, ANN, SHOP, NOW)
    # a time without a zone, items whose order or priority are not integers: never told, and
    # the refresh goes on to rebuild them (they raised TypeError past both before)
    first = data["candidates"][0]
    odd = [
        {**data, "expires": "2099-01-01T00:00:00"},
        {**data, "candidates": [first, {**first, "priority": ["a", 1]}]},
        {**data, "candidates": [{**first, "order": [None]}, first]},
        {**data, "candidates": [{**first, "ts": "2026-11-30T10:00:00"}]},
    ]
    for broken_data in odd:
        path.write_text(json.dumps(broken_data))
        assert tell(settings, ANN, SHOP, NOW) is None
        path.write_text(json.dumps({**broken_data, "versions": stale}))
        assert refresh(settings, store, NOW).rebuilt == 1 and tell(settings, ANN, SHOP, NOW)


def test_the_refresh_lets_go_of_snapshots_nobody_used_for_a_month(tmp_path: Path) -> None:
    """A snapshot's modification time is when a hook last told or built it: a rebuild keeps
    it, telling moves it on, and one unused for IDLE is removed, not rebuilt."""
    settings, store = memory(tmp_path)
    assert snapshot_project(settings, store, ANN, SHOP, NOW)
    assert snapshot_project(settings, store, ANN, GARDEN, NOW)
    assert settings.packs_path is not None
    shop = snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP)
    garden = snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, GARDEN)
    now = datetime.fromtimestamp(shop.stat().st_mtime, UTC)
    month_ago = (now - IDLE - timedelta(hours=1)).timestamp()
    week_ago = (now - timedelta(days=7)).timestamp()
    os.utime(shop, (month_ago, month_ago))
    for path in (shop, garden):
        data = json.loads(path.read_text())
        stale = {**data["versions"], "turn_logs": -1}
        path.write_text(json.dumps({**data, "versions": stale}))
    os.utime(shop, (month_ago, month_ago))
    os.utime(garden, (week_ago, week_ago))
    stats = refresh(settings, store, now)
    assert (stats.removed, stats.rebuilt) == (1, 1) and not shop.exists()
    assert garden.stat().st_mtime == week_ago  # rebuilt: its last use kept
    assert tell(settings, ANN, GARDEN, now)
    assert garden.stat().st_mtime > week_ago  # told: used now


def test_erasure_removes_the_users_snapshots(tmp_path: Path) -> None:
    settings, store = memory(tmp_path)
    assert snapshot_project(settings, store, ANN, SHOP, NOW)
    assert snapshot_project(settings, store, BOB, SHOP, NOW)
    assert settings.packs_path is not None
    scope = erasure.Scope("conversation_id", "shop-2")
    assert (
        erasure.erase(store, None, settings, scope, dry_run=True).found_counts[erasure.PACKS] == 1
    )
    # a principal without a tenant (tenants optional) keeps its snapshots under no tenant
    untenanted = Principal(user_id=ANN.user_id, tenant=None)
    untenanted_path = snapshot_path(settings.packs_path, None, ANN.user_id, SHOP)
    shutil.copytree(
        snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP).parent,
        untenanted_path.parent,
    )
    assert untenanted != ANN and untenanted_path.exists()
    erasure.erase(store, None, settings, scope)
    assert not snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP).exists()
    assert not untenanted_path.exists()
    # another user's snapshot stays, unused until rebuilt (the erasure moved its tables on)
    assert snapshot_path(settings.packs_path, BOB.tenant, BOB.user_id, SHOP).exists()
    assert tell(settings, BOB, SHOP, NOW) is None
    assert refresh(settings, store, NOW).rebuilt == 1 and tell(settings, BOB, SHOP, NOW)
    assert snapshot_project(settings, store, ANN, SHOP, NOW)
    assert "Deploy" not in (tell(settings, ANN, SHOP, NOW) or "")


def test_the_asset_rebuilds_stale_snapshots(tmp_path: Path) -> None:
    settings, store = memory(tmp_path)
    assert snapshot_project(settings, store, ANN, SHOP, NOW)
    assert settings.packs_path is not None
    path = snapshot_path(settings.packs_path, ANN.tenant, ANN.user_id, SHOP)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "versions": {**data["versions"], "turn_logs": -1}}))
    pinned = SettingsResource.from_settings(settings)
    resources = {"settings": pinned, "delta": DeltaResource(settings=pinned)}
    result = materialize([context_pack_snapshots], resources=resources)
    assert result.success
    [event] = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert metadata["rebuilt"].value == 1 and metadata["failed"].value == 0
    assert tell(settings, ANN, SHOP, NOW)
