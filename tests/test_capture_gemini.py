"""Gemini CLI capture on real chat sessions (tests/data/gemini/SOURCE.md): one turn per user
prompt, the answer is the last gemini text of the turn, every tool call is a step, token counts
are summed per turn, "Request cancelled." closes the turn cancelled without an invented answer,
the hook imports the session it is called for; imported through landing, derivation, embedding and
indexing, a turn is found by its content, and a re-import lands nothing new."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from host_import_case import HostCase, by_type, check_import_searchable_and_idempotent

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.gemini import hook
from ctxdb.capture.gemini.importer import ADAPTER, session_events
from ctxdb.capture.gemini.session import project_hash
from ctxdb.contract.events import parse_event
from ctxdb.contract.private import strip_private
from ctxdb.landing import partitions
from ctxdb.record.records import build_turn
from ctxdb.record.role_rows import role_rows_frame
from ctxdb.search.materialize import turn_view
from ctxdb.settings import Settings

DATA = Path(__file__).parent / "data" / "gemini"
EXPLAIN = DATA / "session-2025-12-01T21-45-5b959dae.json"
FILE_OPS = DATA / "session-2026-01-16T11-01-file-ops-37b7abef.json"
ANN = Identity("local", "gemini-cli", "ann")
REVIEW_TURN = "df8fe184-c1db-4ce5-ac10-075ec086b3c0"
SLASH_ERRORS = DATA / "session-2025-12-13T19-01-049d9bb6.json"
TOOLS_ONLY = DATA / "session-2025-11-19T20-45-42f4bde7.json"
CONTINUED = DATA / "session-2026-04-23T12-52-0ab84937.jsonl"
CANCELLED_THEN_SLASH = DATA / "session-2025-12-06T07-22-e0f194ce.json"
API_ERROR_THEN_SLASH = DATA / "session-2025-12-08T17-47-2fd368e7.json"


def test_session_turns_prompts_answers_steps_and_tokens() -> None:
    events = session_events(EXPLAIN, ANN, True, strip_private).events
    for event in events:
        parse_event(json.dumps(event))
    prompts = [e["payload"]["text"] for e in by_type(events, "user.submission")]
    assert prompts[:2] == ["hi", "Explain what this is"]
    assert len(prompts) == 3
    assert [e["payload"]["status"] for e in by_type(events, "turn.closed")] == ["ok"] * 3
    answers = by_type(events, "assistant.completion")
    assert answers[1]["payload"]["text"].startswith("Based on my analysis of the files")
    assert answers[0]["payload"]["tokens_in"] == 2752 and answers[0]["payload"]["tokens_out"] == 55
    second = [e for e in by_type(events, "chat.step") if e["turn_id"] == answers[1]["turn_id"]]
    assert [e["payload"]["tool"] for e in second] == ["list_directory"] + ["read_file"] * 4
    assert second[1]["payload"]["title"].endswith("/assistants/lead.txt")
    assert second[0]["event_id"] == "gm-list_directory-1764625554423-6b5d2c6179cc4"
    assert {e["adapter"] for e in events} == {ADAPTER}
    digest = "fb8e242a6fbbb5c48a1d0be57a8a4cc934d33e0a1caf73ab5d4ecaa17269960c"
    assert {e["agent"] for e in events} == {digest}
    assert len(project_hash("/any/folder")) == 64


def test_a_slash_commands_error_after_an_answer_never_replaces_it() -> None:
    """Errors Gemini CLI writes for slash commands typed after an answer (`/ide`,
    `/permissions manage`: no user message records them) made the answered turn an `error`
    whose answer was "Invalid subcommand for /permissions"; the answer stays, the turn is ok."""
    events = session_events(SLASH_ERRORS, ANN, True, strip_private).events
    answer = next(
        e
        for e in by_type(events, "assistant.completion")
        if e["payload"]["text"].startswith("I could not find a file named `gemini.md`")
    )
    assert not answer["payload"]["error"]
    closed = [e for e in by_type(events, "turn.closed") if e["turn_id"] == answer["turn_id"]]
    assert [e["payload"]["status"] for e in closed] == ["ok"]
    assert "subcommand for /permissions" not in json.dumps(events)


@pytest.mark.parametrize(
    ("session", "prompt", "closed", "answer"),
    [
        (CANCELLED_THEN_SLASH, "ssh into my router", ("cancelled", "interrupted"), None),
        (
            API_ERROR_THEN_SLASH,
            "model",
            ("error", "api_error"),
            "[API Error: You have exhausted your daily quota on this model.]",
        ),
    ],
)
def test_a_slash_commands_error_after_a_cancel_or_an_api_error_never_replaces_it(
    session: Path, prompt: str, closed: tuple[str, str], answer: str | None
) -> None:
    """A turn ended by "Request cancelled." or by the model's API error, then `/directory add`
    or `/ide install` typed (their errors "Please provide at least one path to add.", "agy not
    found..." follow, no user message records the command): the slash command's error became the
    turn's answer. The turn keeps its own end and answer; the slash errors are in no event."""
    events = session_events(session, ANN, True, strip_private).events
    turn = next(e for e in by_type(events, "user.submission") if e["payload"]["text"] == prompt)
    mine = [e for e in events if e["turn_id"] == turn["turn_id"]]
    [close] = by_type(mine, "turn.closed")
    assert (close["payload"]["status"], close["payload"].get("error_type")) == closed
    assert [e["payload"]["text"] for e in by_type(mine, "assistant.completion")] == (
        [answer] if answer else []
    )
    said = json.dumps(events)
    assert "at least one path" not in said and "agy not found" not in said
    assert "Disconnected" not in said


def test_gemini_clis_own_please_continue_goes_on_with_the_turn() -> None:
    """Gemini CLI sends "System: Please continue." itself, as a user message of the same prompt,
    when its next-speaker check says the model should go on (line 18 of the real session). It
    made a turn of its own, and the turn the person asked for ended `error`/`no_answer`: the
    person's two prompts are two turns, the first answered by what came after the continuation."""
    events = session_events(CONTINUED, ANN, True, strip_private).events
    prompts = [e["payload"]["text"] for e in by_type(events, "user.submission")]
    assert len(prompts) == 2 and "Please continue" not in json.dumps(events)
    closed = by_type(events, "turn.closed")
    assert [e["payload"]["status"] for e in closed] == ["ok", "cancelled"]
    first = by_type(events, "assistant.completion")[0]["payload"]["text"]
    assert first.startswith("我已經完成了 `GEMINI.md` 的撰寫")


def test_a_turn_that_ran_tools_and_wrote_no_text_shows_no_invented_answer(tmp_path: Path) -> None:
    """ "install ThrottleStop" ran a shell call and wrote no text before the user typed again:
    an error turn (`no_answer`) whose answer read "An error occurred.", text nobody wrote. It
    keeps its status, shows no answer and indexes no assistant row."""
    events = session_events(TOOLS_ONLY, ANN, True, strip_private).events
    prompt = next(
        e
        for e in by_type(events, "user.submission")
        if e["payload"]["text"] == "install ThrottleStop"
    )
    mine = [
        {**e, "occurred_at": datetime.fromisoformat(e["occurred_at"])}
        for e in events
        if e["turn_id"] == prompt["turn_id"]
    ]
    turn = build_turn(mine)
    assert turn is not None and (turn.status, turn.error_type) == ("error", "no_answer")
    final = [b for b in turn.blocks if b["type"] == "assistant.completion"]
    assert [b["text"] for b in final] == [""]
    rows = role_rows_frame([turn], Settings(home=tmp_path), datetime.now(UTC))
    assert sorted(rows["role"]) == ["artifact", "user"]
    doc = {"conversation_id": turn.conversation_id, "turn_id": turn.turn_id, "status": "error"}
    view = turn_view(doc | {"payload": turn.to_record().model_dump(mode="json")["log"]})
    assert [m.role for m in view.messages] == ["user"]


def test_request_cancelled_closes_the_turn_cancelled_with_no_invented_answer(
    tmp_path: Path,
) -> None:
    data = json.loads(FILE_OPS.read_text())
    review = next(i for i, m in enumerate(data["messages"]) if m["id"] == REVIEW_TURN)
    tools = data["messages"][review + 1]
    assert tools["type"] == "gemini" and tools["toolCalls"] and not tools["content"]
    data["messages"] = (
        data["messages"][: review + 2]
        + [
            {
                "id": "cancel-1",
                "timestamp": "2026-01-16T11:04:10.000Z",
                "type": "info",
                "content": "Request cancelled.",
            }
        ]
        + data["messages"][review + 3 :]
    )
    cancelled = tmp_path / FILE_OPS.name
    cancelled.write_text(json.dumps(data))
    events = session_events(cancelled, ANN, True, strip_private).events
    closed = {e["turn_id"]: e["payload"] for e in by_type(events, "turn.closed")}
    assert closed[REVIEW_TURN] == {"status": "cancelled", "error_type": "interrupted"}
    assert REVIEW_TURN not in {e["turn_id"] for e in by_type(events, "assistant.completion")}
    assert len(by_type(events, "turn.closed")) == 5
    assert len([s for s in by_type(events, "chat.step") if s["turn_id"] == REVIEW_TURN]) == 9


def test_hook_imports_the_session_it_is_called_for(tmp_path: Path, capsys) -> None:
    root = tmp_path / ".gemini" / "tmp"
    chats = root / "907f2064" / "chats"
    chats.mkdir(parents=True)
    session = chats / FILE_OPS.name
    session.write_bytes(FILE_OPS.read_bytes())
    payload = {"hook_event_name": "AfterAgent", "session_id": "s", "transcript_path": str(session)}
    assert hook.run(tmp_path / "spool", ANN, root, io.StringIO(json.dumps(payload))) == 0
    assert capsys.readouterr().out == "{}\n"
    day = partitions.name(datetime.now(UTC))
    [file] = (tmp_path / "spool" / "import").rglob("*.jsonl")
    assert (
        file.relative_to(tmp_path / "spool" / "import").as_posix() == f"{day}/{FILE_OPS.stem}.jsonl"
    )
    written = file.read_text().splitlines()
    assert len(written) == len(session_events(FILE_OPS, ANN, True, strip_private).events)
    outside = {**payload, "transcript_path": str(FILE_OPS)}
    with pytest.raises(ValueError, match="not a session file under"):
        hook.handle(outside, tmp_path / "spool2", ANN, root)
    assert hook.handle({**payload, "hook_event_name": "BeforeTool"}, tmp_path, ANN, root) is None


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_imported_sessions_are_searchable_and_reimport_lands_nothing(
    settings: Settings, query_embedder
) -> None:
    case = HostCase(
        spool="gemini_cli",
        sessions=[EXPLAIN, FILE_OPS],
        events=session_events,
        identity=ANN,
        query="hardcoded plugin registries adaptability security",
        turn_id=REVIEW_TURN,
        prompt_starts="expore repository and figure out issues",
        answer_starts="The repository exploration has identified",
        turns=8,
        deleted=EXPLAIN,
    )
    check_import_searchable_and_idempotent(case, settings, query_embedder)
