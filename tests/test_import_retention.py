"""History older than the retention period, imported through the real CLI, is kept that period
from when ctxdb landed it (docs/operations.md, "Retention"): import, land and derive each say how
many turns are that old; search finds the conversation and `conversations` lists it; a retention
run leaves it whole; a year after landing it expires like anything else.

The fixture is a real Gemini CLI session of 1 December 2025 (tests/data/gemini/SOURCE.md),
already more than a year old on the machine's clock; the test says so before it relies on it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import delete_prefix_indices
from typer.testing import CliRunner, Result

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.client import make_client
from ctxdb.landing.run import land
from ctxdb.lifecycle import retention
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_TURN_EVENTS, ROLE_ROWS, TURN_LOGS

pytestmark = [pytest.mark.es]

_register_all()
runner = CliRunner()

SESSION = Path(__file__).parent / "data" / "gemini" / "session-2025-12-01T21-45-5b959dae.json"
STARTED = datetime(2025, 12, 1, 21, 45, tzinfo=UTC)
USER = "ann"
LATE = "older than the 365-day retention period"


@pytest.fixture
def home(tmp_path: Path, es_base_settings: Settings) -> Iterator[dict[str, str]]:
    prefix = f"t-import-ret-{uuid.uuid4().hex[:10]}"
    environ = {
        "CTXDB_HOME": str(tmp_path / "home"),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": prefix,
        "ELASTICSEARCH_URL": es_base_settings.elasticsearch.url,
        "CTXDB_CLAUDE_CODE_USER_ID": USER,
    }
    yield environ
    with make_client(es_base_settings) as client:
        delete_prefix_indices(client, prefix)


def ctxdb(environ: dict[str, str], *args: str) -> Result:
    result = runner.invoke(app, list(args), env=environ)
    assert result.exit_code == 0, result.output
    return result


def stats(output: str) -> dict:
    """The one-line JSON a data command prints (beside its log lines)."""
    return json.loads(next(line for line in output.splitlines() if line.startswith("{")))


def settings_of(environ: dict[str, str], es_base_settings: Settings) -> Settings:
    return es_base_settings.replace(
        home=Path(environ["CTXDB_HOME"]),
        elasticsearch={"index_prefix": environ["CTXDB_ELASTICSEARCH_INDEX_PREFIX"]},
    )


def test_imported_history_older_than_retention_is_kept_from_landing(
    home: dict[str, str], es_base_settings: Settings
) -> None:
    assert datetime.now(UTC) - STARTED > timedelta(days=365), "the fixture is no longer old"
    imported = ctxdb(home, "capture", "gemini", "import", str(SESSION), "--settle-s", "0")
    assert "3 turns" in imported.output
    assert f"3 of 3 turns imported are {LATE} (oldest 2025-12-01)" in imported.output
    landed = ctxdb(home, "land")
    assert f"3 of 3 turns landed are {LATE}" in landed.output
    derived = ctxdb(home, "derive")
    assert f"3 of 3 turns derived are {LATE}" in derived.output
    assert stats(derived.output)["late_turns"] == 3
    ctxdb(home, "index", "sync", "--no-embed")
    token = ctxdb(home, "tokens", "issue", "--user", USER, "--tenant", "local").output.strip()
    home = {**home, "CTXDB_TOKEN": token.splitlines()[-1]}

    def visible() -> tuple[set[str], set[str]]:
        found = ctxdb(
            home, "search", "Explain what this is", "--knob", "weight_semantic=0", "--json"
        )
        listed = ctxdb(home, "conversations", "--json")
        return (
            {h["conversation_id"] for h in json.loads(found.output)["hits"]},
            {c["conversation_id"] for c in json.loads(listed.output)["conversations"]},
        )

    found, listed = visible()
    assert len(found) == 1 and found == listed  # searchable and listed alike

    settings = settings_of(home, es_base_settings)
    store = DeltaStore.from_settings(settings)
    before = {t: store.read(t).height for t in (RAW_TURN_EVENTS, ROLE_ROWS, TURN_LOGS)}
    landing = sorted(Path(settings.landing_uri).rglob("*.jsonl"))
    lines = [p.read_bytes() for p in landing]
    swept = ctxdb(home, "retention", "run").output
    report = json.loads(swept[swept.index("{\n") :])
    assert report["status"] == "ok"
    assert {t: store.read(t).height for t in before} == before
    assert [p.read_bytes() for p in landing] == lines
    assert visible() == (found, listed)

    # the clock runs from landing: a year and a day later the history goes like any other
    with make_client(settings) as client:
        later = retention.sweep(store, client, settings, now=datetime.now(UTC) + timedelta(366))
    assert later.deleted_rows[RAW_TURN_EVENTS] == before[RAW_TURN_EVENTS]
    assert store.read(ROLE_ROWS).height == 0
    assert visible() == (set(), set())


def test_history_landed_as_it_happened_keeps_its_own_clock(
    home: dict[str, str], es_base_settings: Settings
) -> None:
    """A turn landed when it happened (as live capture lands it) warns of nothing, and its rows
    expire a retention period after it happened."""
    settings = settings_of(home, es_base_settings)
    landing = Path(settings.landing_uri)
    landing.mkdir(parents=True)
    ended = datetime.now(UTC) - timedelta(days=10)
    events = [
        {
            "event_id": f"e{n}",
            "schema_version": 1,
            "type": kind,
            "occurred_at": (ended - timedelta(seconds=3 - n)).isoformat(),
            "tenant": "local",
            "app": "press",
            "agent": "helper",
            "adapter": "minimal",
            "user_id": USER,
            "conversation_id": "c-live",
            "turn_id": "t1",
            "payload": payload,
        }
        for n, (kind, payload) in enumerate(
            [
                ("turn.started", {}),
                ("user.submission", {"text": "how do herons nest"}),
                ("assistant.completion", {"text": "In reeds, in colonies."}),
                ("turn.closed", {}),
            ]
        )
    ]
    (landing / "live.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri, now=ended + timedelta(minutes=1))  # landed as it happened
    derived = ctxdb(home, "derive")
    assert LATE not in derived.output and stats(derived.output)["late_turns"] == 0
    rows = store.read(ROLE_ROWS)
    expected = ended + timedelta(days=365)
    assert rows.height and all(
        timedelta(0) <= e - expected <= timedelta(minutes=1) for e in rows["expires_at"]
    )
