"""The sample generator: deterministic, realistic, every adapter, and a ground-truth API."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from conftest_turn_record import NOW
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.contract.events import EventError, parse_event
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.sample.topics import TOPICS

MALFORMED_REASONS = {
    "malformed_json",
    "unknown_type",
    "missing_field",
    "naive_timestamp",
    "unsafe_id",
    "invalid_field",
    "oversize",
}
"""The rejection reasons of the generator's malformed lines: each is injected at least once."""


@pytest.fixture(scope="module")
def generated():
    return generate_events(users=4, conversations=40, seed=9, now=NOW, malformed_ratio=0.01)


def test_same_seed_same_lines_other_seed_other_lines() -> None:
    a = generate_events(users=2, conversations=6, seed=1, now=NOW).lines()
    assert a == generate_events(users=2, conversations=6, seed=1, now=NOW).lines()
    assert a != generate_events(users=2, conversations=6, seed=2, now=NOW).lines()


def test_every_valid_event_passes_the_contract(generated) -> None:
    for event in generated.events:
        parse_event(json.dumps(event))
    reasons = set()
    for line in generated.malformed:
        with pytest.raises(EventError) as info:
            parse_event(line)
        reasons.add(info.value.reason)
    assert reasons == MALFORMED_REASONS


def test_sample_covers_adapters_topics_and_features(generated) -> None:
    events = generated.events
    assert {e["adapter"] for e in events} == {"minimal", "langgraph", "claude_code", "react"}
    types = Counter(e["type"] for e in events)
    for required in (
        "user.attachment",
        "file.hosted",
        "react.summary",
        "react.anchors",
        "react.note",
        "react.block",
        "stream.aggregate",
        "communicator.event",
        "feedback",
        "conversation.title",
        "chat.step",
        "user.context",
    ):
        assert types[required] > 0, required
    kinds = Counter(
        e["payload"].get("event_type") for e in events if e["type"] == "user.submission"
    )
    assert kinds["prompt"] and kinds["followup"] and kinds["steer"]
    assert any(e["payload"].get("error") for e in events if e["type"] == "assistant.completion")
    assert len({f.topic for f in generated.facts}) >= 8
    times = sorted(e["occurred_at"] for e in events)
    assert times[-1] <= NOW.isoformat().replace("+00:00", "Z")
    assert times[0] < (NOW - timedelta(days=14)).isoformat()


def test_facts_describe_the_generated_turns(generated) -> None:
    turns = {
        (e["conversation_id"], e["turn_id"]) for e in generated.events if e["type"] == "turn.closed"
    }
    assert {(f.conversation_id, f.turn_id) for f in generated.facts} == turns
    topics = {t.key: t for t in TOPICS}
    prompts = {
        (e["turn_id"], e["payload"]["text"])
        for e in generated.events
        if e["type"] == "user.submission"
    }
    for fact in generated.facts:
        assert (fact.turn_id, fact.prompt) in prompts
        assert fact.prompt in topics[fact.topic].prompts


def test_openpyxl_error_string_is_in_the_sample() -> None:
    exact = (
        "openpyxl.utils.exceptions.InvalidFileException: openpyxl does not support the old "
        ".xls file format"
    )
    generated = generate_events(users=2, conversations=60, seed=4, now=NOW)
    assert any(exact in f.prompt for f in generated.facts if f.topic == "openpyxl_xls")


def test_write_sample_writes_parts_and_file_bytes(tmp_path: Path, generated) -> None:
    parts = write_sample(generated, tmp_path / "out", tmp_path / "files", per_file=500)
    lines = []
    for part in parts:
        data = part.read_bytes()
        lines += (gzip.decompress(data) if part.suffix == ".gz" else data).decode().splitlines()
    assert lines == generated.lines()
    hosted = [e for e in generated.events if e["type"] == "file.hosted"]
    for event in hosted:
        matches = list(
            (tmp_path / "files").rglob(f"turn_{event['turn_id']}/files/{event['payload']['path']}")
        )
        assert len(matches) == 1
        assert hashlib.sha256(matches[0].read_bytes()).hexdigest() == event["payload"]["sha256"]


def test_cli_generate_land_derive_and_tables(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path))
    _register_all()
    runner = CliRunner()
    out = tmp_path / "landing"
    result = runner.invoke(
        app,
        [
            "generate",
            "--users",
            "2",
            "--conversations",
            "5",
            "--seed",
            "1",
            "--out",
            str(out),
            "--now",
            "2026-12-01T00:00:00+00:00",
            "--facts",
            str(tmp_path / "facts.jsonl"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "facts.jsonl").read_text().count("\n") >= 5
    assert runner.invoke(app, ["land"]).exit_code == 0
    derived = runner.invoke(app, ["derive"])
    assert json.loads(derived.stdout)["conversations"] == 5
    tables = runner.invoke(app, ["tables"])
    assert tables.exit_code == 0
    assert "turn_logs" in tables.output and "role_rows" in tables.output
    bad = runner.invoke(app, ["generate", "--out", str(out), "--now", "2026-12-01T00:00:00"])
    assert bad.exit_code != 0
