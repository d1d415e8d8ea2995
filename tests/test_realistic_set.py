"""The realistic labeled query set in bench/data/realistic: built deterministically from its
hand-written source, every event valid under the landing contract, every question well formed."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from ctxdb.contract.events import parse_event

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import build_realistic_set as builder  # noqa: E402


@pytest.fixture(scope="module")
def built() -> tuple[list[dict], list[dict], dict]:
    return builder.build(builder.DATA / "source", seed=15)


def test_committed_files_are_the_build_of_the_source(built) -> None:
    events, questions, manifest = built
    assert (builder.DATA / "events.jsonl").read_text() == builder._jsonl(events)
    assert (builder.DATA / "questions.jsonl").read_text() == builder._jsonl(questions)
    assert json.loads((builder.DATA / "manifest.json").read_text()) == manifest


def test_every_event_lands_under_the_contract(built) -> None:
    events, _, _ = built
    for event in events:
        parse_event(json.dumps(event))
    assert len({e["event_id"] for e in events}) == len(events)


def test_size_kinds_and_evidence(built) -> None:
    events, questions, manifest = built
    turns = {(e["conversation_id"], e["turn_id"]) for e in events}
    assert len(turns) == manifest["turns"] >= 1000
    assert len(questions) >= 300 and len(manifest["users"]) >= 5
    kinds = Counter(q["kind"] for q in questions)
    assert set(kinds) == set(builder.KINDS) and min(kinds.values()) >= 50
    for q in questions:
        evidence = {(e["conversation_id"], e["turn_id"]) for e in q["evidence"]}
        assert evidence and evidence <= turns
        assert all(e["conversation_id"].startswith(q["user_id"] + "-") for e in q["evidence"])
    multi = [q for q in questions if q["kind"] == "multi"]
    assert all(len(q["evidence"]) >= 2 for q in multi)


def test_checks_refuse_a_paraphrase_sharing_words_and_an_exact_without_literal() -> None:
    evidence = ["we adopted a greyhound called Pickle\nPickle is a brilliant name."]
    with pytest.raises(ValueError, match="shares"):
        builder.check_question(
            builder.Question("paraphrase", ["x"], "what is our greyhound called?", ""),
            evidence,
            "q",
        )
    with pytest.raises(ValueError, match="literal"):
        builder.check_question(
            builder.Question("exact", ["x"], "booking QX-1234", ""), evidence, "q"
        )
    builder.check_question(builder.Question("exact", ["x"], "Pickle", ""), evidence, "q")
