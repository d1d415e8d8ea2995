"""LangGraph adapter: a compiled graph whose every call is recorded as one turn.

    graph = RecordedGraph(builder.compile(checkpointer=saver), recorder, user_id="u1")
    graph.invoke({"messages": [("user", "why is my build slow?")]},
                 {"configurable": {"thread_id": "c1"}})

`invoke`, `stream`, `ainvoke` and `astream` run the wrapped graph's own `stream`/`astream` with the
`updates` and `values` modes added, hand the caller exactly the chunks (and the result) it asked
for, and record per call (docs/capture.md; calls asking for another output `version` than `v1`
pass through unrecorded):

- the folded user inputs: each user message of the call's input is a `user.submission` (the
  first a `prompt`, the others `followup`s);
- each node update in the stream is a `chat.step` (`tool` = the node);
- the files in the final state's `hosted_files` that the call added are `file.hosted` events;
  their `conv:fi:` refs are in `last_call.hosted_refs`;
- the final answer (the last AI message of the final state's `messages`) is the
  `assistant.completion`, with its token usage when the message has it.

The conversation is the call's `thread_id`; each call is a new turn (a fresh turn id; its events
are `<turn_id>-<n>`), so a re-sent spool file lands nothing new and a regenerated answer is a turn
of its own. The graph's checkpointer is only read (`get_state`, for the files the thread already
had), never written: the graph's memory stays the graph's (projection, not replacement).
langgraph is an optional extra (`pip install 'ctxdb[langgraph]'`); this module never imports it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxdb.capture.recorder import Recorder, Turn, derived_id, new_id

INTERRUPT = "__interrupt__"
USER_ROLES = frozenset({"user", "human"})
AI_ROLES = frozenset({"ai", "assistant"})
_REF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,127}$")

UserTexts = Callable[[Any], list[str]]
Answer = Callable[[Any], Any]


def message_role(message: Any) -> str | None:
    """The role of a LangChain message, a (role, content) tuple or a {"role", "content"} dict."""
    if isinstance(message, tuple) and len(message) == 2:
        return str(message[0])
    if isinstance(message, dict):
        return message.get("role") or message.get("type")
    return getattr(message, "type", None)


def message_text(message: Any) -> str:
    """The text of a message (content blocks of type `text` joined)."""
    if isinstance(message, str):
        return message
    if isinstance(message, tuple) and len(message) == 2:
        content = message[1]
    elif isinstance(message, dict):
        content = message.get("content", "")
    else:
        content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    parts = [
        block if isinstance(block, str) else block.get("text", "")
        for block in content or []
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    ]
    return "".join(parts)


def user_texts(graph_input: Any) -> list[str]:
    """The user messages of a call's input: a string, or the user entries of its `messages`
    (a resume `Command` or `None` has none)."""
    if isinstance(graph_input, str):
        return [graph_input]
    if not isinstance(graph_input, dict):
        return []
    messages = graph_input.get("messages", [])
    if isinstance(messages, str | tuple | dict) or hasattr(messages, "content"):
        messages = [messages]
    texts = []
    for message in messages:
        role = "user" if isinstance(message, str) else message_role(message)
        if role in USER_ROLES and (text := message_text(message).strip()):
            texts.append(text)
    return texts


def final_answer(state: Any) -> Any:
    """The last message of the final state's `messages` when it is the AI's, else None."""
    messages = state.get("messages") if isinstance(state, dict) else None
    if not messages:
        return None
    last = messages[-1]
    return last if message_role(last) in AI_ROLES else None


def conversation_of(config: dict[str, Any] | None) -> str | None:
    """The call's `thread_id` as a conversation id (hashed when it is not a safe id)."""
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None:
        return None
    thread = str(thread)
    return thread if _REF_ID.match(thread) else "x" + derived_id(thread)[:32]


@dataclass
class RecordedCall:
    """What one call recorded (the latest is `RecordedGraph.last_call`)."""

    conversation_id: str
    turn_id: str
    steps: int = 0
    hosted_refs: list[str] = field(default_factory=list)
    answered: bool = False
    interrupted: bool = False


class _Call:
    """Recording state of one graph call."""

    def __init__(self, turn: Turn, start_files: set[str]) -> None:
        self.turn = turn
        self.start_files = start_files
        self.latest: Any = None
        self.interrupts: list[Any] = []
        self.seq = 0
        self.record = RecordedCall(turn.conversation_id, turn.turn_id)

    def next_id(self) -> str:
        self.seq += 1
        return f"{self.turn.turn_id[:120]}-{self.seq}"

    def observe(self, namespace: tuple[str, ...], mode: str, data: Any) -> None:
        """Note one stream chunk: a top-level `values` state, or node `updates` (steps)."""
        if mode == "values" and not namespace:
            self.latest = data
        elif mode == "updates" and isinstance(data, dict):
            for node, update in data.items():
                if node == INTERRUPT:
                    if not namespace:
                        self.interrupts.extend(update if isinstance(update, list | tuple) else [])
                    continue
                self.step(namespace, node, update)

    def step(self, namespace: tuple[str, ...], node: str, update: Any) -> None:
        self.record.steps += 1
        path = "/".join([*(n.split(":")[0] for n in namespace), node])
        keys = ", ".join(update) if isinstance(update, dict) else ""
        title = f"{path}: {keys}" if keys else path
        self.turn.step(
            f"{self.record.steps}-{node}"[:128],
            tool=node[:128],
            status="ok",
            title=title[:1024],
            event_id=self.next_id(),
        )


class RecordedGraph:
    """A compiled LangGraph graph recording each call as a turn (see the module docstring).

    `user_id` (or the call's `configurable.user_id`) owns the turns; `conversation_id` is used
    for calls without a `thread_id`. `inputs(graph_input)` returns the call's user texts and
    `answer(final_state)` its final answer (a message or a string); `hosted_files` names the
    state key of the published files (dicts with `path`, `mime`, `size`, `sha256`, or `data`
    bytes instead of the last two). Every other attribute is the graph's own.
    """

    def __init__(
        self,
        graph: Any,
        recorder: Recorder,
        *,
        user_id: str | None = None,
        conversation_id: str | None = None,
        inputs: UserTexts = user_texts,
        answer: Answer = final_answer,
        hosted_files: str = "hosted_files",
    ) -> None:
        self.graph = graph
        self.recorder = recorder
        self.user_id = user_id
        self.conversation_id = conversation_id or new_id()
        self.inputs = inputs
        self.answer = answer
        self.hosted_files = hosted_files
        self.last_call: RecordedCall | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.graph, name)

    def invoke(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The graph's `invoke`, recorded: the final state (`values` mode) or the list of
        chunks of another mode."""
        if kwargs.get("version", "v1") != "v1":
            return self.graph.invoke(input, config, **kwargs)
        mode = kwargs.pop("stream_mode", "values")
        if mode != "values":
            return list(self._stream(input, config, mode, kwargs, False))
        (result,) = self._stream(input, config, ["updates", "values"], kwargs, True)
        return result

    def stream(
        self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """The graph's `stream` (its keywords, `stream_mode` among them), yielding exactly the
        chunks asked for, recorded."""
        if kwargs.get("version", "v1") != "v1":
            yield from self.graph.stream(input, config, **kwargs)
            return
        mode = kwargs.pop("stream_mode", None)
        yield from self._stream(input, config, mode, kwargs, False)

    async def ainvoke(self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The graph's `ainvoke`, recorded (as `invoke`)."""
        if kwargs.get("version", "v1") != "v1":
            return await self.graph.ainvoke(input, config, **kwargs)
        mode = kwargs.pop("stream_mode", "values")
        if mode != "values":
            return [c async for c in self._astream(input, config, mode, kwargs, False)]
        recorded = self._astream(input, config, ["updates", "values"], kwargs, True)
        (result,) = [c async for c in recorded]
        return result

    async def astream(
        self, input: Any, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The graph's `astream`, recorded (as `stream`)."""
        if kwargs.get("version", "v1") != "v1":
            async for chunk in self.graph.astream(input, config, **kwargs):
                yield chunk
            return
        mode = kwargs.pop("stream_mode", None)
        async for chunk in self._astream(input, config, mode, kwargs, False):
            yield chunk

    def _stream(
        self,
        input: Any,
        config: dict[str, Any] | None,
        stream_mode: str | Sequence[str] | None,
        kwargs: dict[str, Any],
        as_invoke: bool,
    ) -> Iterator[Any]:
        start = self.graph.get_state(config) if self._checkpointed(config) else None
        relay = _Relay(stream_mode, self.graph.stream_mode, kwargs, as_invoke)
        with self._open(input, config, start) as call:
            for chunk in self.graph.stream(input, config, **relay.arguments):
                yield from relay.passed(call, chunk)
            self._finish(call)
        if as_invoke:
            yield _invoke_result(call)

    async def _astream(
        self,
        input: Any,
        config: dict[str, Any] | None,
        stream_mode: str | Sequence[str] | None,
        kwargs: dict[str, Any],
        as_invoke: bool,
    ) -> AsyncIterator[Any]:
        start = await self.graph.aget_state(config) if self._checkpointed(config) else None
        relay = _Relay(stream_mode, self.graph.stream_mode, kwargs, as_invoke)
        with self._open(input, config, start) as call:
            async for chunk in self.graph.astream(input, config, **relay.arguments):
                for passed in relay.passed(call, chunk):
                    yield passed
            self._finish(call)
        if as_invoke:
            yield _invoke_result(call)

    def _checkpointed(self, config: dict[str, Any] | None) -> bool:
        return bool(self.graph.checkpointer) and conversation_of(config) is not None

    def _open(self, input: Any, config: dict[str, Any] | None, start: Any) -> _CallContext:
        """Open the call's turn and write its user inputs."""
        configurable = (config or {}).get("configurable") or {}
        user_id = self.user_id or configurable.get("user_id")
        if user_id is None:
            raise ValueError("RecordedGraph needs a user_id (argument or configurable.user_id)")
        conversation_id = conversation_of(config) or self.conversation_id
        turn_id = new_id()
        values = getattr(start, "values", None)
        start_files = {_file_path(f) for f in _files(values, self.hosted_files)}
        turn = self.recorder.turn(
            user_id=str(user_id),
            conversation_id=conversation_id,
            turn_id=turn_id,
            event_id=f"{turn_id}-0",
        )
        call = _Call(turn, start_files)
        for n, text in enumerate(self.inputs(input)):
            turn.submission(text, "prompt" if n == 0 else "followup", event_id=call.next_id())
        return _CallContext(self, call)

    def _finish(self, call: _Call) -> None:
        """Record the call's new hosted files and its final answer."""
        turn = call.turn
        for entry in _files(call.latest, self.hosted_files):
            path = _file_path(entry)
            if path in call.start_files or not isinstance(entry, dict):
                continue
            ref = turn.hosted_file(
                path,
                entry.get("mime") or "application/octet-stream",
                entry.get("size"),
                entry.get("sha256"),
                data=entry.get("data"),
                event_id=call.next_id(),
            )
            call.record.hosted_refs.append(ref)
        answer = self.answer(call.latest) if call.latest is not None else None
        if answer is not None and (text := message_text(answer)):
            usage = getattr(answer, "usage_metadata", None) or {}
            turn.completion(
                text,
                tokens_in=usage.get("input_tokens"),
                tokens_out=usage.get("output_tokens"),
                event_id=call.next_id(),
            )
            call.record.answered = True
        call.record.interrupted = bool(call.interrupts)


class _CallContext:
    """Closes a call's turn: ok, cancelled when the graph stopped at an interrupt without an
    answer (or the caller stopped reading), error when the graph raised."""

    def __init__(self, graph: RecordedGraph, call: _Call) -> None:
        self.graph = graph
        self.call = call

    def __enter__(self) -> _Call:
        return self.call

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        call, turn = self.call, self.call.turn
        close_id = f"{turn.turn_id[:120]}-close"
        if exc_type is None:
            if call.interrupts and not call.record.answered:
                turn.close("cancelled", error_type="interrupted", event_id=close_id)
            else:
                turn.close(event_id=close_id)
        elif issubclass(exc_type, Exception):
            turn.close("error", error_type=exc_type.__name__, event_id=close_id)
        else:
            turn.close("cancelled", error_type=exc_type.__name__, event_id=close_id)
        self.graph.last_call = call.record


def _files(state: Any, key: str) -> list[Any]:
    files = state.get(key) if isinstance(state, dict) else None
    return list(files) if isinstance(files, list | tuple) else []


def _file_path(entry: Any) -> str:
    return str(entry.get("path", "")) if isinstance(entry, dict) else str(entry)


class _Relay:
    """One recorded call's stream: the modes the caller asked for (`single`: it named one mode,
    so chunks come bare), with subgraphs or not, and the graph's own stream arguments (the modes
    asked for and the `updates` and `values` the recording reads)."""

    def __init__(
        self,
        stream_mode: str | Sequence[str] | None,
        default: Any,
        kwargs: dict[str, Any],
        as_invoke: bool,
    ) -> None:
        wanted = default if stream_mode is None else stream_mode
        self.single = isinstance(wanted, str)
        self.modes: list[str] = [wanted] if isinstance(wanted, str) else list(wanted)
        self.subgraphs = bool(kwargs.pop("subgraphs", False))
        self.as_invoke = as_invoke
        self.arguments = {
            "stream_mode": list(dict.fromkeys([*self.modes, "updates", "values"])),
            "subgraphs": self.subgraphs,
            **kwargs,
        }

    def passed(self, call: _Call, chunk: Any) -> list[Any]:
        """Note the graph's `chunk` in `call`; what the caller gets of it: the chunk in the shape
        its own stream call would have yielded, or nothing (a mode only the recording reads, or
        an `invoke`)."""
        namespace, mode, data = _unpack(chunk, self.subgraphs)
        call.observe(namespace, mode, data)
        if self.as_invoke or mode not in self.modes:
            return []
        return [_repack(namespace, mode, data, self.single, self.subgraphs)]


def _unpack(chunk: Any, subgraphs: bool) -> tuple[tuple[str, ...], str, Any]:
    if subgraphs:
        namespace, mode, data = chunk
        return tuple(namespace), mode, data
    mode, data = chunk
    return (), mode, data


def _repack(namespace: tuple[str, ...], mode: str, data: Any, single: bool, subgraphs: bool) -> Any:
    """A chunk in the shape the caller's own stream call would have yielded."""
    if single:
        return (namespace, data) if subgraphs else data
    return (namespace, mode, data) if subgraphs else (mode, data)


def _invoke_result(call: _Call) -> Any:
    """What `invoke` returns: the final state, with `__interrupt__` when the graph stopped at
    interrupts (LangGraph's v1 output)."""
    latest = call.latest
    if call.interrupts:
        return (
            {**latest, INTERRUPT: call.interrupts}
            if isinstance(latest, dict)
            else {INTERRUPT: call.interrupts}
        )
    return latest
