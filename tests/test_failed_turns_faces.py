"""How the faces show a turn that did not end with an answer, on real Gemini CLI sessions
(mischa-thisness/M-Gemini, CC0; tests/data/gemini/SOURCE.md) built into a memory with the real
pipeline: "model" answered only by the API's quota error, "ssh into my router" cut by "Request
cancelled.", and "run claude code" answered by an API error.

A search hit carries how its turn ended (`status`, `error_type`) and the text outputs of the CLI
and MCP mark it ("[error: api_error]"); in a turn's messages the error is labelled as the error,
not as the assistant's words ("assistant (error): ..."), in `ctxdb turn`, MCP `get_turn` and the
viewer (`event_type` "error"). Before, search showed an error message as an ordinary answer."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import delete_prefix_indices
from conftest_search import embed_and_sync

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.gemini.importer import session_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.cli.search import render_response, render_turn
from ctxdb.contract.identity import Principal
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.search import SearchRequest, SearchService
from ctxdb.search.models import ERROR_ANSWER, message_kind
from ctxdb.serve import mcp_output
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

DATA = Path(__file__).parent / "data" / "gemini"
SESSIONS = [
    DATA / "session-2025-12-08T17-47-2fd368e7.json",
    DATA / "session-2025-12-06T07-22-e0f194ce.json",
]
ANN = Identity("local", "gemini-cli", "ann")
OWNER = Principal(user_id="ann", tenant="local")
QUOTA = "[API Error: You have exhausted your daily quota on this model.]"


@pytest.fixture(scope="module")
def service(es_base_settings: Settings, tmp_path_factory: pytest.TempPathFactory, query_embedder):
    home = tmp_path_factory.mktemp("failed-turns")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    settings = es_base_settings.replace(home=home, elasticsearch={"index_prefix": prefix})
    import_sessions(SESSIONS, Path(settings.landing_uri) / "gemini", ANN, session_events, 0)
    store = DeltaStore(settings.delta_uri)
    assert land(store, settings.landing_uri).quarantined == 0
    derive(store, settings)
    client = embed_and_sync(store, settings, query_embedder)
    yield SearchService(settings, client, query_embedder)
    delete_prefix_indices(client, prefix)


def test_a_hit_says_its_turn_failed_and_the_text_outputs_mark_it(service: SearchService) -> None:
    response = service.search(OWNER, SearchRequest(query="exhausted your daily quota", top_k=3))
    hit = response.hits[0]
    assert (hit.status, hit.error_type) == ("error", "api_error")
    assert render_response(response).splitlines()[1].endswith(" [error: api_error]")
    out = mcp_output.SearchOut(
        mode=response.mode,
        query=response.query,
        hits=[
            mcp_output.HitOut(
                **hit.model_dump(include=set(mcp_output.TurnHit.model_fields)), ref="conv:turn:x"
            )
        ],  # fmt: skip
    )
    assert mcp_output.render_search(out).splitlines()[1].endswith(" [error: api_error]")
    cancelled = service.search(OWNER, SearchRequest(query="ssh into my router", top_k=3)).hits[0]
    assert (cancelled.status, cancelled.error_type) == ("cancelled", "interrupted")


def test_an_error_answer_is_labelled_as_the_error(service: SearchService) -> None:
    hit = service.search(OWNER, SearchRequest(query="exhausted your daily quota", top_k=3)).hits[0]
    view = service.turn(OWNER, hit.conversation_id, hit.turn_id)
    answer = view.messages[-1]
    assert (answer.role, answer.text, answer.event_type) == ("assistant", QUOTA, ERROR_ANSWER)
    assert f"  assistant (error): {QUOTA}" in render_turn(view).splitlines()
    assert message_kind(answer.event_type) == " (error)"
    assert message_kind(view.messages[0].event_type) == ""
