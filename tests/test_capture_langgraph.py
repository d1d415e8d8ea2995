"""The LangGraph adapter on a real LangGraph graph of deterministic Python nodes (no model calls):
the wrapped graph answers exactly as the bare one, its checkpoints are the bare graph's, and each
call lands as one turn (user inputs, node steps, new hosted files, the answer)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import polars as pl
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Interrupt, interrupt

from ctxdb.capture import Recorder
from ctxdb.capture.langgraph import RecordedGraph
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS, TURN_LOGS, TURN_LOGS_SCHEMA


class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    hosted_files: Annotated[list, operator.add]
    topic: str


def classify(state: State) -> dict[str, Any]:
    question = state["messages"][-1].content.lower()
    if "explode" in question:
        raise RuntimeError("the classifier exploded")
    return {"topic": "excel" if "xls" in question else "general"}


def convert(state: State) -> dict[str, Any]:
    if state["topic"] != "excel":
        return {}
    data = f"converted for turn {len(state['messages'])}".encode()
    name = f"converted-{len(state['messages'])}.xlsx"
    return {"hosted_files": [{"path": name, "mime": "application/vnd.ms-excel", "data": data}]}


def respond(state: State) -> dict[str, Any]:
    if "ask me" in state["messages"][-1].content:
        interrupt("which sheet?")
    reply = {
        "excel": "openpyxl reads only .xlsx; I converted your workbook.",
        "general": "Here is a general answer.",
    }[state["topic"]]
    return {"messages": [("assistant", reply)]}


def build(checkpointer: Any = None) -> Any:
    builder = StateGraph(State)
    builder.add_node("classify", classify)
    builder.add_node("convert", convert)
    builder.add_node("respond", respond)
    builder.add_edge(START, "classify")
    builder.add_edge("classify", "convert")
    builder.add_edge("convert", "respond")
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=checkpointer)


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def land_all(landing: Path, root: Path) -> tuple[Any, pl.DataFrame]:
    store = DeltaStore(str(root))
    stats = land(store, str(landing))
    return stats, store.read(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA)


def of_turn(events: pl.DataFrame, turn_id: str, event_type: str) -> list[dict]:
    rows = events.filter((pl.col("turn_id") == turn_id) & (pl.col("type") == event_type))
    return [json.loads(p) for p in rows.sort("line_number")["payload"]]


def plain(value: Any) -> Any:
    """State values comparable across graphs (message and interrupt ids differ run to run)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "content") and hasattr(value, "type"):
        return (value.type, value.content)
    if isinstance(value, Interrupt):
        return ("interrupt", value.value)
    return value


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    rec = Recorder(
        tmp_path / "landing", tenant="acme", app="sheets", agent="lg", adapter="langgraph"
    )
    yield rec
    rec.close()


def test_calls_answer_as_the_bare_graph_and_land_as_turns(
    recorder: Recorder, tmp_path: Path
) -> None:
    bare = build(InMemorySaver())
    wrapped = RecordedGraph(build(InMemorySaver()), recorder, user_id="alice")
    first = {
        "messages": [("user", "my sales.xls will not open"), ("user", "the .xls is from 2003")]
    }
    second = {"messages": [("user", "and the old budget.xls too?")]}
    third = {"messages": [("user", "thanks, anything else?")]}

    assert plain(wrapped.invoke(first, config("c1"))) == plain(bare.invoke(first, config("c1")))
    calls = [wrapped.last_call]
    streamed = list(wrapped.stream(second, config("c1"), stream_mode=["updates", "custom"]))
    assert plain(streamed) == plain(
        list(bare.stream(second, config("c1"), stream_mode=["updates", "custom"]))
    )
    calls.append(wrapped.last_call)

    async def async_calls() -> tuple[Any, Any]:
        values = [c async for c in wrapped.astream(third, config("c2"), stream_mode="values")]
        calls.append(wrapped.last_call)
        result = await wrapped.ainvoke(first, config("c3"))
        calls.append(wrapped.last_call)
        return values, result

    values, result = asyncio.run(async_calls())
    assert plain(values) == plain(list(bare.stream(third, config("c2"), stream_mode="values")))
    assert plain(result) == plain(bare.invoke(first, config("c3")))

    for thread in ("c1", "c2", "c3"):  # the checkpointer holds what it would hold unwrapped
        ours = list(wrapped.get_state_history(config(thread)))
        theirs = list(bare.get_state_history(config(thread)))
        assert [plain(s.values) for s in ours] == [plain(s.values) for s in theirs]

    recorder.close()
    stats, events = land_all(tmp_path / "landing", tmp_path / "delta")
    assert stats.quarantined == 0 and set(events["adapter"]) == {"langgraph"}
    one, two, three, four = calls
    assert [(c.conversation_id, c.steps, c.answered) for c in calls] == [
        ("c1", 3, True),
        ("c1", 3, True),
        ("c2", 3, True),
        ("c3", 3, True),
    ]
    prompts = of_turn(events, one.turn_id, "user.submission")
    assert [(p["text"], p["event_type"]) for p in prompts] == [
        ("my sales.xls will not open", "prompt"),
        ("the .xls is from 2003", "followup"),
    ]
    assert [s["tool"] for s in of_turn(events, one.turn_id, "chat.step")] == [
        "classify",
        "convert",
        "respond",
    ]
    files = of_turn(events, one.turn_id, "file.hosted")
    assert files == [
        {
            "path": "converted-2.xlsx",
            "mime": "application/vnd.ms-excel",
            "size": len(b"converted for turn 2"),
            "sha256": hashlib.sha256(b"converted for turn 2").hexdigest(),
        }
    ]
    assert one.hosted_refs == [f"conv:fi:conv_c1.turn_{one.turn_id}.files/converted-2.xlsx"]
    # the second call on the thread records only the file it added, not the first one again
    assert [f["path"] for f in of_turn(events, two.turn_id, "file.hosted")] == ["converted-4.xlsx"]
    assert of_turn(events, three.turn_id, "file.hosted") == []
    answers = [of_turn(events, c.turn_id, "assistant.completion")[0]["text"] for c in calls]
    assert answers[2] == "Here is a general answer." and answers[0].startswith("openpyxl")

    derive(DeltaStore(str(tmp_path / "delta")), Settings(home=tmp_path))
    logs = DeltaStore(str(tmp_path / "delta")).read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert sorted(logs["turn_id"]) == sorted(c.turn_id for c in calls)
    assert set(logs["user_id"]) == {"alice"}


def test_a_failing_node_an_interrupt_and_an_abandoned_stream_close_their_turns(
    recorder: Recorder, tmp_path: Path
) -> None:
    wrapped = RecordedGraph(build(InMemorySaver()), recorder, user_id="alice")
    bare = build(InMemorySaver())
    with pytest.raises(RuntimeError, match="exploded"):
        wrapped.invoke({"messages": [("user", "please explode")]}, config("c-err"))
    failed = wrapped.last_call

    asking = {"messages": [("user", "convert my.xls but ask me first")]}
    paused = wrapped.invoke(asking, config("c-int"))
    assert plain(paused) == plain(bare.invoke(asking, config("c-int")))
    assert "__interrupt__" in paused
    interrupted = wrapped.last_call

    for _chunk in wrapped.stream({"messages": [("user", "hello")]}, config("c-cut")):
        break  # the caller stops reading after the first node
    abandoned = wrapped.last_call

    recorder.close()
    _, events = land_all(tmp_path / "landing", tmp_path / "delta")
    closed = {
        c.turn_id: of_turn(events, c.turn_id, "turn.closed")[0]
        for c in (failed, interrupted, abandoned)
    }
    assert closed[failed.turn_id] == {"status": "error", "error_type": "RuntimeError"}
    assert closed[interrupted.turn_id] == {"status": "cancelled", "error_type": "interrupted"}
    assert closed[abandoned.turn_id] == {"status": "cancelled", "error_type": "GeneratorExit"}
    assert interrupted.interrupted and not interrupted.answered


def test_subgraph_streams_keep_their_shape_and_a_user_id_is_required(
    recorder: Recorder, tmp_path: Path
) -> None:
    inner = build()
    outer_builder = StateGraph(State)
    outer_builder.add_node("assistant", inner)
    outer_builder.add_edge(START, "assistant")
    outer_builder.add_edge("assistant", END)
    outer = outer_builder.compile()
    question = {"messages": [("user", "what about my.xls?")], "topic": ""}
    wrapped = RecordedGraph(outer, recorder, conversation_id="c-sub")
    config_with_user = {"configurable": {"user_id": "bob"}}
    ours = list(wrapped.stream(question, config_with_user, stream_mode="updates", subgraphs=True))
    theirs = list(outer.stream(question, stream_mode="updates", subgraphs=True))

    def shape(chunks: list) -> list:  # namespaces carry task ids, different per run
        return [([n.split(":")[0] for n in ns], plain(data)) for ns, data in chunks]

    assert shape(ours) == shape(theirs) and len(ours) == 4
    call = wrapped.last_call
    assert call.conversation_id == "c-sub" and call.steps == 4  # 3 inner nodes + the outer one
    with pytest.raises(ValueError, match="user_id"):
        wrapped.invoke(question)
