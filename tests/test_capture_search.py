"""End to end for the recorder SDK and the LangGraph adapter: turns a host captured are landed,
derived, embedded (the real all-MiniLM-L6-v2), indexed into the real Elasticsearch node and found
by `SearchService.search` as their user, never as another user; a re-sent spool lands nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest_search import embed_and_sync
from langgraph.checkpoint.memory import InMemorySaver
from test_capture_langgraph import build

from ctxdb.capture import Recorder
from ctxdb.capture.langgraph import RecordedGraph
from ctxdb.contract.identity import Principal
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.search import SearchRequest, SearchService
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import TURN_LOGS, TURN_LOGS_SCHEMA

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]

ALICE = Principal(user_id="alice", tenant="acme")
BOB = Principal(user_id="bob", tenant="acme")


def build_memory(settings: Settings, query_embedder) -> tuple[DeltaStore, SearchService]:
    """land -> derive -> embed -> index, as the pipeline runs them."""
    store = DeltaStore(settings.delta_uri)
    landed = land(store, settings.landing_uri)
    assert landed.landed > 0 and landed.quarantined == 0
    derive(store, settings)
    client = embed_and_sync(store, settings, query_embedder)
    return store, SearchService(settings, client, query_embedder)


def resend_spool(landing: Path) -> int:
    """Copy every published spool file under a new name, as a host re-sending its spool would."""
    files = [p for p in landing.rglob("*.jsonl") if "capture" in p.parts]
    for path in files:
        shutil.copy(path, path.with_name(f"resent-{path.name}"))
    return len(files)


def assert_replay_lands_nothing(store: DeltaStore, settings: Settings) -> None:
    turns = store.read(TURN_LOGS, TURN_LOGS_SCHEMA).height
    assert resend_spool(Path(settings.landing_uri)) > 0
    again = land(store, settings.landing_uri)
    assert again.landed == 0 and again.quarantined == 0 and again.duplicates > 0
    derive(store, settings)
    assert store.read(TURN_LOGS, TURN_LOGS_SCHEMA).height == turns


def test_recorded_turns_are_found_by_their_user_only(settings: Settings, query_embedder) -> None:
    rec = Recorder.from_settings(
        settings, tenant="acme", app="chat", agent="helper", adapter="react"
    )
    with rec.turn(user_id="alice", conversation_id="c-alice", turn_id="t1") as turn:
        turn.submission("My script crashes: openpyxl does not support the old .xls file format")
        turn.step("s1", tool="code_exec", title="Converting sales_2019.xls")
        turn.completion("openpyxl only reads .xlsx; convert the workbook with LibreOffice first.")
        turn.summary("Converted an old Excel .xls workbook so openpyxl can load it.")
        turn.anchors(["InvalidFileException"], ["openpyxl"])
        turn.notes("User is on Windows <private>and her password is hunter2</private>.")
    with rec.turn(user_id="bob", conversation_id="c-bob", turn_id="t1") as turn:
        turn.submission("which tomato varieties resist blight in a wet summer?")
        turn.completion("Try 'Mountain Magic' or 'Defiant PhR'; both resist late blight.")
    rec.close()

    store, service = build_memory(settings, query_embedder)
    query = "openpyxl cannot open my old xls spreadsheet"
    hits = service.search(ALICE, SearchRequest(query=query, top_k=5)).hits
    assert (hits[0].conversation_id, hits[0].turn_id) == ("c-alice", "t1")
    bob_hits = service.search(BOB, SearchRequest(query=query, top_k=50)).hits
    assert "c-alice" not in {h.conversation_id for h in bob_hits}
    tomatoes = service.search(BOB, SearchRequest(query="blight resistant tomatoes", top_k=5)).hits
    assert tomatoes[0].conversation_id == "c-bob"
    view = service.turn(ALICE, "c-alice", "t1")
    assert "hunter2" not in " ".join(m.text or "" for m in view.messages)

    assert_replay_lands_nothing(store, settings)


def test_langgraph_turns_are_found_by_their_user_only(settings: Settings, query_embedder) -> None:
    rec = Recorder.from_settings(
        settings, tenant="acme", app="sheets", agent="lg", adapter="langgraph"
    )
    graph = build(InMemorySaver())
    alice = RecordedGraph(graph, rec, user_id="alice")
    bob = RecordedGraph(graph, rec, user_id="bob")
    alice.invoke(
        {"messages": [("user", "my quarterly sales .xls workbook will not load in openpyxl")]},
        {"configurable": {"thread_id": "g-alice"}},
    )
    alice_turn = alice.last_call
    list(
        bob.stream(
            {"messages": [("user", "how do I prune tomato plants in July?")]},
            {"configurable": {"thread_id": "g-bob"}},
        )
    )
    rec.close()
    assert alice_turn is not None and alice_turn.hosted_refs

    store, service = build_memory(settings, query_embedder)
    query = "sales xls workbook does not load in openpyxl"
    hits = service.search(ALICE, SearchRequest(query=query, top_k=5)).hits
    assert (hits[0].conversation_id, hits[0].turn_id) == ("g-alice", alice_turn.turn_id)
    bob_hits = service.search(BOB, SearchRequest(query=query, top_k=50)).hits
    assert "g-alice" not in {h.conversation_id for h in bob_hits}
    pruning = service.search(BOB, SearchRequest(query="pruning tomato plants", top_k=5)).hits
    assert pruning[0].conversation_id == "g-bob"

    assert_replay_lands_nothing(store, settings)
