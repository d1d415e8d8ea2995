"""Derived Delta tables from landed events: adapters, incrementality, late events, crashes."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from conftest_turn_record import (
    LANDED,
    NOW,
    T0,
    Turn,
    build_sample,
    comparable,
    land_and_derive,
    settings_for,
    write_jsonl,
)

import ctxdb.storage.tables as tables
from ctxdb.contract.refs import parse_ref
from ctxdb.landing.run import land
from ctxdb.record import checks, run
from ctxdb.record.run import TARGETS, derive, last_derived_version, write_table
from ctxdb.record.turns import parse_turn_log
from ctxdb.settings import RetentionRule
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    RAW_TURN_EVENTS,
    REPLAY_ARTIFACTS,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    TURN_CATALOG,
    TURN_LOGS,
)
from ctxdb.text import text_hash, trigrams

KEYS = {t.table: list(t.keys) for t in TARGETS}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory):
    """The generated sample, landed and derived once for this module."""
    return build_sample(tmp_path_factory.mktemp("sample"))


def test_every_check_passes_on_the_generated_sample(sample) -> None:
    _, store, _ = sample
    for check in (
        checks.closed_turns_have_one_turn_log,
        checks.turn_logs_have_user_and_final_rows,
        checks.role_rows_have_turn_log,
    ):
        outcome = check(store)
        assert outcome.passed, (check.__name__, outcome.offenders)
    assert checks.quarantine_report(store).count > 0


def test_turn_logs_match_the_generated_facts(sample) -> None:
    generated, store, _ = sample
    logs = store.read(TURN_LOGS)
    assert logs.height == len(generated.facts)
    assert logs.select("conversation_id", "turn_id").is_unique().all()
    errors = {f.turn_id for f in generated.facts if f.error}
    assert set(logs.filter(pl.col("error"))["turn_id"]) == errors
    assert set(logs["adapter"]) == {"minimal", "langgraph", "claude_code", "react"}
    kinds = dict(logs.group_by("adapter").agg(pl.col("recording_kind").unique()).iter_rows())
    assert kinds["react"] == ["rich"]
    assert all(kinds[a] == ["minimal"] for a in ("minimal", "langgraph", "claude_code"))
    for payload in logs["payload"]:
        log = parse_turn_log(payload)
        assert log.blocks[-1].type == "assistant.completion"
        assert log.blocks_count == len(log.blocks)


def test_each_adapter_projects_its_role_rows(sample) -> None:
    generated, store, _ = sample
    rows = store.read(ROLE_ROWS)
    by_adapter = rows.join(
        store.read(TURN_LOGS).select("conversation_id", "turn_id", "adapter"),
        on=["conversation_id", "turn_id"],
    )
    targets = dict(by_adapter.group_by("adapter").agg(pl.col("target").unique().sort()).iter_rows())
    for adapter in ("minimal", "langgraph", "claude_code"):
        assert targets[adapter] == ["assistant", "session", "user"]
    assert {"assistant", "user", "summary", "notes"} <= set(targets["react"])
    submissions = sum(1 + f.followups for f in generated.facts)
    assert rows.filter(pl.col("target") == "user").height == submissions
    notes = rows.filter(pl.col("target") == "notes")
    assert set(notes["visibility"]) == {"internal"} and set(notes["role"]) == {"artifact"}
    summaries = rows.filter(pl.col("target") == "summary")
    assert (summaries["anchors_text"].str.len_chars() > 0).all()


def test_langgraph_keeps_hosted_files_and_every_folded_submission(sample) -> None:
    generated, store, _ = sample
    hosted = [f for f in generated.facts if f.adapter == "langgraph" and f.hosted_ref]
    assert hosted, "the sample should host files from LangGraph turns"
    logs = store.read(TURN_LOGS).filter(pl.col("adapter") == "langgraph")
    payloads = {t: parse_turn_log(p) for t, p in logs.select("turn_id", "payload").iter_rows()}
    for fact in hosted:
        blocks = payloads[fact.turn_id].blocks
        files = [b.meta["artifact_path"] for b in blocks if b.type == "react.tool.result"]
        assert [f.split(".", 1)[1] for f in files] == [parse_ref(fact.hosted_ref).path]
        users = [b for b in blocks if b.type == "user.prompt"]
        assert len(users) == 1 + fact.followups


def test_role_rows_follow_the_contract(sample) -> None:
    _, store, _ = sample
    rows = store.read(ROLE_ROWS)
    assert rows.schema == pl.from_arrow(ROLE_ROWS_SCHEMA.empty_table()).schema
    assert rows["row_id"].is_unique().all()
    assert rows["row_id"].str.starts_with("turn-transcript-").all()
    sessions = rows.filter(pl.col("role") == "session")
    assert (sessions["trigrams"] == "").all()  # no text arm reads session rows (session_rows.py)
    for row in rows.filter(pl.col("role") != "session").head(40).iter_rows(named=True):
        grammed = " ".join([row["text"], row["anchors_text"], row["context"]])
        assert row["trigrams"] == trigrams(grammed)
        embedded = f"{row['context']}\n{row['text']}" if row["context"] else row["text"]
        assert row["text_hash"] == text_hash(embedded)
        ref = parse_ref(row["ref"])
        assert (ref.conversation_id, ref.turn_id) == (row["conversation_id"], row["turn_id"])
        assert f"turn:{row['turn_id']}" in row["tags"]
        assert row["expires_at"] == row["ts"] + timedelta(days=365)
    users = rows.filter(pl.col("target") == "user")
    assert users["text"].str.starts_with("[user.message]\n").all()
    assert users["tags"].list.contains("chat:user").all()
    assert set(users["event_type"]) <= {
        "event.user.prompt",
        "event.user.followup",
        "event.user.steer",
    }


def test_timelines_catalog_and_replay(sample) -> None:
    generated, store, _ = sample
    timelines = store.read(CONVERSATION_TIMELINES)
    assert timelines.height == len({f.conversation_id for f in generated.facts})
    assert timelines["title"].is_not_null().all()
    minimal = timelines.filter(pl.col("recording_kind") == "minimal")
    assert (minimal["blocks"] == "[]").all()
    rich = timelines.filter(pl.col("recording_kind") == "rich")
    assert all(json.loads(b) for b in rich["blocks"])
    catalog = store.read(TURN_CATALOG).sort("conversation_id", "ordinal")
    per_conv = catalog.group_by("conversation_id").agg("ordinal", "started_at")
    for ordinals, starts in per_conv.select("ordinal", "started_at").iter_rows():
        assert ordinals == list(range(1, len(ordinals) + 1))
        assert starts == sorted(starts)
    replay = store.read(REPLAY_ARTIFACTS)
    rich_turns = store.read(TURN_LOGS).filter(pl.col("recording_kind") == "rich")["turn_id"]
    on_rich = replay.filter(pl.col("turn_id").is_in(rich_turns.implode()))
    assert set(on_rich["name"]) <= {"accounting.usage", "chat.turn.summary"}
    stream = replay.filter(pl.col("artifact") == "conv.artifacts.stream")
    assert stream.height > 0
    assert all(
        "chunks" not in json.loads(d) and json.loads(d)["chunks_num"] >= 2 for d in stream["data"]
    )


def test_rerunning_is_idempotent(sample) -> None:
    _, store, settings = sample
    before = {t: store.read(t) for t in KEYS}
    assert derive(store, settings, now=NOW).conversations == 0  # nothing new
    full = derive(store, settings, now=NOW, full=True)
    assert all(w["inserted"] == 0 and w["deleted"] == 0 for w in full.written.values())
    for table, keys in KEYS.items():
        assert comparable(store.read(table), keys).equals(comparable(before[table], keys)), table


def _two_conversations(tmp_path: Path) -> tuple[DeltaStore, Turn, Turn]:
    store = DeltaStore(str(tmp_path / "delta"))
    a = Turn("ca", "t1").basic()
    b = Turn("cb", "t1", start=T0 + timedelta(hours=1)).basic()
    write_jsonl(tmp_path / "in" / "1.jsonl", [*a.events, *b.events])
    land_and_derive(store, tmp_path / "in", settings_for(tmp_path))
    return store, a, b


def test_late_events_merge_into_the_closed_turn(tmp_path: Path) -> None:
    store, a, _ = _two_conversations(tmp_path)
    resent = dict(a.events[1], event_id="resent-prompt")  # same submission, new id
    a.add(
        "file.hosted",
        {"path": "fix.py", "mime": "text/x-python", "size": 1, "sha256": "c" * 64},
        at=T0 + timedelta(hours=3),
    )
    a.add("feedback", {"reaction": "up"}, at=T0 + timedelta(hours=4))
    write_jsonl(tmp_path / "in" / "2.jsonl", [resent, *a.events[-2:]])
    stats = land(store, str(tmp_path / "in"), now=NOW)
    assert stats.landed == 3
    result = derive(store, settings_for(tmp_path), now=NOW)
    assert result.conversations == 1
    logs = store.read(TURN_LOGS).filter(pl.col("conversation_id") == "ca")
    assert logs.height == 1
    log = parse_turn_log(logs["payload"][0])
    assert [b.type for b in log.blocks] == [
        "user.prompt",
        "react.tool.result",
        "assistant.completion",
    ]
    assert log.feedback.count == 1
    assert json.loads(logs["feedback_summary"][0])["last_reaction"] == "up"
    assert store.read(ROLE_ROWS).filter(pl.col("conversation_id") == "ca").height == 3  # + session
    assert logs["last_event_at"][0] == T0 + timedelta(hours=4)


def test_only_touched_conversations_are_recomputed(tmp_path: Path) -> None:
    store, _, b = _two_conversations(tmp_path)
    untouched = store.read(TURN_LOGS).filter(pl.col("conversation_id") == "ca")
    second = Turn("cb", "t2", start=T0 + timedelta(days=1)).basic("and pandas?", "Use merge.")
    write_jsonl(tmp_path / "in" / "2.jsonl", second.events)
    land(store, str(tmp_path / "in"), now=NOW + timedelta(hours=1))
    stats = derive(store, settings_for(tmp_path), now=NOW + timedelta(hours=1))
    # raw_turn_events: version 0 creates the table, 1 and 2 are the two landings
    assert (stats.conversations, stats.turns, stats.from_version, stats.to_version) == (1, 2, 1, 2)
    assert last_derived_version(store) == 2
    after = store.read(TURN_LOGS)
    assert after.filter(pl.col("conversation_id") == "ca").equals(untouched)
    catalog = store.read(TURN_CATALOG).filter(pl.col("conversation_id") == "cb").sort("ordinal")
    assert catalog["turn_id"].to_list() == ["t1", "t2"]
    timeline = store.read(CONVERSATION_TIMELINES).filter(pl.col("conversation_id") == "cb")
    assert timeline["turn_ids"].to_list() == [["t1", "t2"]]


def test_recording_state_only_moves_up(tmp_path: Path) -> None:
    store, a, _ = _two_conversations(tmp_path)
    settings = settings_for(tmp_path)
    # A late ReAct contribution upgrades the minimal record to rich ...
    a.add(
        "react.summary",
        {"text": "Explained the openpyxl error"},
        adapter="react",
        at=T0 + timedelta(hours=2),
    )
    write_jsonl(tmp_path / "in" / "2.jsonl", a.events[-1:])
    land_and_derive(store, tmp_path / "in", settings)
    rich = store.read(TURN_LOGS).filter(pl.col("conversation_id") == "ca")
    assert rich["recording_kind"].to_list() == ["rich"]
    assert "summary" in store.read(ROLE_ROWS).filter(pl.col("conversation_id") == "ca")["target"]
    # ... and a minimal rewrite of the same turn never downgrades it.
    downgrade = rich.with_columns(
        pl.lit("minimal").alias("recording_kind"),
        pl.lit(1, dtype=pl.Int32).alias("recording_state"),
        pl.lit("{}").alias("payload"),
    )
    target = next(t for t in TARGETS if t.table == TURN_LOGS)
    result = write_table(store, target, downgrade, ["ca"])
    assert result["updated"] == 0
    kept = store.read(TURN_LOGS).filter(pl.col("conversation_id") == "ca")
    assert kept["recording_kind"].to_list() == ["rich"] and kept["payload"].equals(rich["payload"])
    # A rewrite at the same state replaces the record whole (it is recomputed from all the
    # turn's events; nothing of the old record is merged in).
    rewrite = rich.with_columns(pl.lit("{}").alias("payload"))
    assert write_table(store, target, rewrite, ["ca"])["updated"] == 1
    assert store.read(TURN_LOGS).filter(pl.col("conversation_id") == "ca")["payload"].to_list() == [
        "{}"
    ]


def test_rows_a_recompute_no_longer_produces_are_deleted(tmp_path: Path) -> None:
    store, _, _ = _two_conversations(tmp_path)
    target = next(t for t in TARGETS if t.table == ROLE_ROWS)
    rows = store.read(ROLE_ROWS)
    only_assistant = rows.filter(
        (pl.col("conversation_id") == "ca") & (pl.col("target") == "assistant")
    )
    result = write_table(store, target, only_assistant, ["ca"])
    assert result["deleted"] == 2  # the user row and the session row
    after = store.read(ROLE_ROWS)
    assert after.filter(pl.col("conversation_id") == "ca")["target"].to_list() == ["assistant"]
    assert after.filter(pl.col("conversation_id") == "cb").height == 3


def test_retention_rules_set_expires_at(tmp_path: Path) -> None:
    store = DeltaStore(str(tmp_path / "delta"))
    write_jsonl(tmp_path / "in" / "1.jsonl", Turn("ca", "t1").basic().events)
    settings = settings_for(tmp_path).replace(
        retention={
            "rules": [
                RetentionRule(tenant="acme", days=30),
                RetentionRule(tenant="acme", role="user", days=7),
            ]
        }
    )
    land_and_derive(store, tmp_path / "in", settings)
    rows = store.read(ROLE_ROWS).sort("role")
    ttl = (rows["expires_at"] - rows["ts"]).dt.total_days().to_list()
    # the session row expires with the user row it sums up
    assert dict(zip(rows["role"], ttl, strict=True)) == {"assistant": 30, "session": 7, "user": 7}


def test_an_interrupted_derivation_converges_on_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [
        *Turn("ca", "t1", adapter="react").basic().events,
        *Turn("cb", "t1", adapter="langgraph").basic().events,
    ]
    reference = DeltaStore(str(tmp_path / "reference"))
    write_jsonl(tmp_path / "in" / "1.jsonl", events)
    land_and_derive(reference, tmp_path / "in", settings_for(tmp_path))

    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(tmp_path / "in"), now=LANDED)
    real_write = run.write_table
    written: list[str] = []

    def crash_after_two_tables(store_, target, data, conversations):
        # Stands in for the process dying between two Delta commits of one derivation run.
        if len(written) == 2:
            raise RuntimeError("simulated crash")
        written.append(target.table)
        return real_write(store_, target, data, conversations)

    monkeypatch.setattr(run, "write_table", crash_after_two_tables)
    with pytest.raises(RuntimeError, match="simulated crash"):
        derive(store, settings_for(tmp_path), now=NOW)
    monkeypatch.undo()
    assert written == [TURN_LOGS, CONVERSATION_TIMELINES]
    assert store.exists(TURN_LOGS) and not store.exists(ROLE_ROWS)
    assert last_derived_version(store) == -1  # the state did not advance
    derive(store, settings_for(tmp_path), now=NOW)
    for table, keys in KEYS.items():
        assert comparable(store.read(table), keys).equals(
            comparable(reference.read(table), keys)
        ), table


def test_tables_doc_lists_every_column() -> None:
    """docs/tables.md documents every schema in ctxdb.storage.tables with exactly its columns."""
    doc = (Path(__file__).parent.parent / "docs" / "tables.md").read_text()
    sections = dict(re.findall(r"<!-- schema:(\w+) -->\n\n(.*?)(?:\n\n|\Z)", doc, flags=re.S))
    schemas = {name: value for name, value in vars(tables).items() if name.endswith("_SCHEMA")}
    assert set(schemas) <= set(sections)
    for name, schema in schemas.items():
        documented = re.findall(r"^\| `(\w+)` \|", sections[name], flags=re.M)
        assert documented == schema.names, name


def test_a_full_rebuild_drops_rows_whose_events_are_gone(tmp_path: Path) -> None:
    store, _, _ = _two_conversations(tmp_path)
    store.delete(RAW_TURN_EVENTS, "conversation_id = 'ca'")
    stats = derive(store, settings_for(tmp_path), now=NOW, full=True)
    assert stats.conversations == 1
    for table in KEYS:
        assert "ca" not in set(store.read(table)["conversation_id"]), table
    assert set(store.read(TURN_LOGS)["conversation_id"]) == {"cb"}
