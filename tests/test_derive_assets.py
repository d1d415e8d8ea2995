"""The landing and derived assets and their checks, materialized through Dagster."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_turn_record import NOW
from dagster import AssetKey, materialize

from assets.checks_derived import (
    one_turn_log_per_closed_turn,
    quarantine_count,
    role_rows_have_turn_log,
    user_and_final_assistant_rows,
)
from assets.derived import turn_record
from assets.landing import raw_turn_events
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, TURN_LOGS
from pipelines.resources import build_resources

ASSETS = [
    raw_turn_events,
    turn_record,
    one_turn_log_per_closed_turn,
    quarantine_count,
    role_rows_have_turn_log,
    user_and_final_assistant_rows,
]


def _run(tmp_path: Path, landing: Path, settings: Settings):
    return materialize(
        ASSETS,
        resources=build_resources(settings.replace(home=tmp_path)),
        run_config={"ops": {"raw_turn_events": {"config": {"path": str(landing)}}}},
    )


def _metadata(result, key: str) -> dict:
    events = result.asset_materializations_for_node(
        "turn_record" if key != "raw_turn_events" else key
    )
    return next(e.metadata for e in events if e.asset_key == AssetKey(key))


def test_materializing_lands_derives_and_passes_every_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    generated = generate_events(users=2, conversations=8, seed=3, now=NOW, malformed_ratio=0.02)
    write_sample(generated, tmp_path / "landing")
    result = _run(tmp_path, tmp_path / "landing", settings)
    assert result.success
    landing = _metadata(result, "raw_turn_events")
    assert landing["landed"].value == len({e["event_id"] for e in generated.events})
    assert landing["quarantined"].value == len(generated.malformed)
    checks = result.get_asset_check_evaluations()
    assert len(checks) == 4 and all(c.passed for c in checks)
    store = DeltaStore(str(tmp_path / "delta"))
    assert _metadata(result, "turn_logs")["rows"].value == store.read(TURN_LOGS).height
    assert _metadata(result, "role_rows")["rows"].value == store.read(ROLE_ROWS).height
    assert store.read(TURN_LOGS).height == len(generated.facts)

    again = _run(tmp_path, tmp_path / "landing", settings)
    assert _metadata(again, "raw_turn_events")["landed"].value == 0
    assert _metadata(again, "role_rows")["conversations"].value == 0
    assert store.read(TURN_LOGS).height == len(generated.facts)
