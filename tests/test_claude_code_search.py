"""Claude Code turns captured by the real hook process, landed, derived, embedded and indexed,
are found by `SearchService.search` as their user (and per project), never as another user; an
import of the same session afterwards adds no turn."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from claude_code_sessions import Session, coding_session, final_answers, installed_command, play
from conftest_search import embed_and_sync

from ctxdb.capture.claude_code.importer import find_transcripts, import_transcripts
from ctxdb.capture.claude_code.install import hook_config
from ctxdb.capture.claude_code.turns import agent_for_project
from ctxdb.contract.identity import Principal
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.search import SearchRequest, SearchService
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import TURN_LOGS, TURN_LOGS_SCHEMA

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]

QUERY = "upload retries test fails with ConnectionResetError"


def test_hook_captured_turns_are_searchable_by_their_user_only(
    settings: Settings, query_embedder, tmp_path: Path
) -> None:
    transcripts = tmp_path / "claude" / "projects"
    ann = settings.replace(claude_code={"user_id": "ann", "projects": str(transcripts)})
    bob = settings.replace(
        home=tmp_path / "bob-home",
        storage_root=settings.storage,
        claude_code={"user_id": "bob", "projects": str(transcripts)},
    )
    shop, garden = tmp_path / "src" / "shop", tmp_path / "src" / "garden"
    ann_session, ann_turns = coding_session(transcripts / "-shop" / "a.jsonl", str(shop))
    play(ann_session, installed_command(ann, shop), final_answers(ann_session))
    bob_session = Session(transcripts / "-garden" / "b.jsonl", str(garden))
    bob_turn = bob_session.prompt("which tomato varieties resist blight in a wet summer?")
    bob_session.text("Try 'Mountain Magic' or 'Defiant PhR'; both resist late blight.")
    play(bob_session, installed_command(bob, garden), final_answers(bob_session))

    store = DeltaStore(settings.delta_uri)
    landed = land(store, settings.landing_uri)
    assert landed.quarantined == 0
    derive(store, settings)
    client = embed_and_sync(store, settings, query_embedder)
    service = SearchService(settings, client, query_embedder)
    as_ann = Principal(user_id="ann", tenant="local")
    as_bob = Principal(user_id="bob", tenant="local")

    hits = service.search(as_ann, SearchRequest(query=QUERY, top_k=5)).hits
    assert (hits[0].conversation_id, hits[0].turn_id) == (ann_session.session_id, ann_turns[0])
    project = agent_for_project(str(shop))
    scoped = service.search(as_ann, SearchRequest(query=QUERY, agent=project, top_k=5)).hits
    assert scoped and scoped[0].turn_id == ann_turns[0]
    elsewhere = service.search(
        as_ann, SearchRequest(query=QUERY, agent=agent_for_project(str(garden)), top_k=5)
    ).hits
    assert elsewhere == []
    view = service.turn(as_ann, ann_session.session_id, ann_turns[0])
    assert view.messages[0].text.startswith("the flaky test_upload_retries fails")
    assert view.messages[-1].text.startswith("The retry loop reuses a closed connection")

    bob_hits = service.search(as_bob, SearchRequest(query=QUERY, top_k=50)).hits
    assert ann_session.session_id not in {h.conversation_id for h in bob_hits}
    tomato = service.search(as_bob, SearchRequest(query="blight resistant tomatoes", top_k=5))
    assert tomato.hits[0].turn_id == bob_turn

    before = store.read(TURN_LOGS, TURN_LOGS_SCHEMA)
    turns_before = before.height
    config = hook_config(ann)
    spool_dir = Path(config.spool).parent
    imported = import_transcripts(
        find_transcripts(transcripts / "-shop"), spool_dir, config.identity, settle_s=0
    )
    assert imported.turns == 2
    again = land(store, settings.landing_uri)
    # only the import's provisional close and answer of the last turn, which the hook's supersede
    assert (again.landed, again.quarantined) == (2, 0)
    derive(store, settings)
    logs = store.read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert logs.height == turns_before == 3
    said = ["turn_id", "status", "ended_at", "payload"]
    assert logs.select(said).sort("turn_id").equals(before.select(said).sort("turn_id"))
    assert logs.filter(pl.col("conversation_id") == ann_session.session_id).height == 2
