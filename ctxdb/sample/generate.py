"""Deterministic sample turn events for all four adapters (the demo, tests and benchmarks use it).

`generate_events` returns the events (raw dicts, as they would be written to JSONL), deliberately
malformed lines, the bytes of hosted files and attachments, and ground-truth facts saying which
conversation and turn is about which topic, so a labeled query set can be built from them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ctxdb.contract.events import MAX_EVENT_BYTES, SCHEMA_VERSION
from ctxdb.contract.refs import make_ref
from ctxdb.sample.topics import TOPICS, Topic
from ctxdb.storage.conversation_files import turn_file_path

AGENTS = {
    "minimal": "helper",
    "langgraph": "graph-agent",
    "claude_code": "press",
    "react": "kdcube",
}
TENANTS = ("acme", "globex")
SAMPLE_ADAPTERS = tuple(AGENTS)
"""Adapters the sample rotates through (fixed, so the sample never changes with the contract)."""
APP = "chat"


@dataclass(frozen=True)
class Fact:
    """Ground truth about one generated turn: what it is about and what it literally contains."""

    tenant: str
    app: str
    user_id: str
    conversation_id: str
    turn_id: str
    adapter: str
    topic: str
    turn_index: int
    started_at: datetime
    prompt: str
    answer: str
    error: bool
    attachment: str | None
    hosted_ref: str | None
    followups: int


@dataclass
class Generated:
    events: list[dict]
    malformed: list[str]
    files: dict[str, bytes]  # path relative to the files root -> bytes
    facts: list[Fact]
    topics: Sequence[Topic] = field(default_factory=lambda: TOPICS)

    def lines(self) -> list[str]:
        """Every JSONL line in arrival order (malformed lines interleaved deterministically)."""
        ordered = sorted(self.events, key=lambda e: (e["occurred_at"], e["event_id"]))
        lines = [json.dumps(e, separators=(",", ":")) for e in ordered]
        for i, bad in enumerate(self.malformed):
            lines.insert((i * 7919) % (len(lines) + 1), bad)
        return lines


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Writer:
    """Accumulates the events of one conversation with shared identity fields."""

    def __init__(self, rng: random.Random, identity: dict[str, str]) -> None:
        self.rng = rng
        self.identity = identity
        self.events: list[dict] = []

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{self.rng.getrandbits(64):016x}"

    def emit(self, type_: str, ts: datetime, turn_id: str, payload: dict) -> dict:
        event = {
            "event_id": self.new_id("e"),
            "schema_version": SCHEMA_VERSION,
            "type": type_,
            "occurred_at": _iso(ts),
            **self.identity,
            "turn_id": turn_id,
            "payload": payload,
        }
        self.events.append(event)
        return event


def _pause(rng: random.Random, lo: float, hi: float) -> timedelta:
    """A random gap of `lo`..`hi` seconds between two events."""
    return timedelta(seconds=rng.uniform(lo, hi))


def _keep_file(
    files: dict[str, bytes], ident: dict[str, str], turn_id: str, path: str, text: str
) -> tuple[bytes, str]:
    """`text` kept in `files` as `path` inside the turn's folder under the files root: its bytes
    and its conv:fi: ref."""
    data = text.encode()
    folder = turn_file_path(
        ident["tenant"], ident["app"], ident["user_id"], ident["conversation_id"], turn_id
    )
    files[f"{folder}/{path}"] = data
    return data, make_ref("fi", path, turn_id, ident["conversation_id"])


def _turn(
    w: _Writer,
    rng: random.Random,
    topic: Topic,
    adapter: str,
    turn_id: str,
    start: datetime,
    first: bool,
    files: dict[str, bytes],
    facts: list[Fact],
    index: int,
) -> datetime:
    """Write one turn's events (user input, tool steps, files, answer, feedback); record its Fact.

    The parts draw from `rng` in a fixed order, so a seed always yields the same events.
    """
    ident = w.identity
    ts, prompt = _prompt(w, rng, topic, turn_id, start, first)
    ts, attachment = _attachment(w, rng, topic, turn_id, ts, files)
    ts, followups = _followup(w, rng, topic, turn_id, ts)
    if adapter != "minimal":
        ts = _tool_steps(w, rng, topic, adapter, turn_id, ts)
    ts, hosted = _hosted_file(w, rng, topic, adapter, turn_id, ts, files)
    ts = _stream_and_citations(w, rng, topic, adapter, turn_id, ts)
    ts, answer, error = _answer(w, rng, topic, adapter, turn_id, ts, hosted)
    _feedback(w, rng, turn_id, ts)
    facts.append(
        Fact(
            tenant=ident["tenant"],
            app=ident["app"],
            user_id=ident["user_id"],
            conversation_id=ident["conversation_id"],
            turn_id=turn_id,
            adapter=adapter,
            topic=topic.key,
            turn_index=index,
            started_at=start,
            prompt=prompt,
            answer="" if error else answer,
            error=error,
            attachment=attachment,
            hosted_ref=hosted,
            followups=followups,
        )
    )
    return ts


def _prompt(
    w: _Writer, rng: random.Random, topic: Topic, turn_id: str, start: datetime, first: bool
) -> tuple[datetime, str]:
    """turn.started, the prompt, the conversation title (first turn) and sometimes user context."""
    ts = start
    w.emit("turn.started", ts, turn_id, {})
    prompt = rng.choice(topic.prompts)
    batch = f"{turn_id}-b0"
    ts += _pause(rng, 0.1, 1)
    w.emit(
        "user.submission",
        ts,
        turn_id,
        {"text": prompt, "event_type": "prompt", "batch_id": batch, "arrived_at": _iso(ts)},
    )
    if first:
        w.emit("conversation.title", ts + _pause(rng, 0.1, 0.5), turn_id, {"title": topic.title})
    if rng.random() < 0.15:
        ts += _pause(rng, 0.1, 1)
        w.emit(
            "user.context",
            ts,
            turn_id,
            {
                "kind": rng.choice(["selection", "page"]),
                "label": f"{topic.title} notes",
                "ref": f"app://notes/{topic.key}",
                "source": "editor",
                "batch_id": batch,
                "event": {"chars": rng.randint(20, 400)},
            },
        )
    return ts, prompt


def _attachment(
    w: _Writer,
    rng: random.Random,
    topic: Topic,
    turn_id: str,
    ts: datetime,
    files: dict[str, bytes],
) -> tuple[datetime, str | None]:
    """Sometimes the topic's attachment: its bytes into `files`, a user.attachment event."""
    if not (topic.attachment and rng.random() < 0.35):
        return ts, None
    batch = f"{turn_id}-b0"
    name, mime, text = topic.attachment
    data, ref = _keep_file(files, w.identity, turn_id, f"user.attachments/{name}", text)
    ts += _pause(rng, 0.5, 3)
    w.emit(
        "user.attachment",
        ts,
        turn_id,
        {
            "name": name,
            "mime": mime,
            "size": len(data),
            "storage_ref": ref,
            "extracted_text": text,
            "batch_id": batch,
        },
    )
    return ts, name


def _followup(
    w: _Writer, rng: random.Random, topic: Topic, turn_id: str, ts: datetime
) -> tuple[datetime, int]:
    """Sometimes a followup or steer submitted while the turn runs; returns how many (0 or 1)."""
    if rng.random() >= 0.3:
        return ts, 0
    kind = rng.choice(["followup", "followup", "steer"])
    text = rng.choice(topic.followups if kind == "followup" else topic.steers)
    ts += _pause(rng, 2, 20)
    w.emit(
        "user.submission",
        ts,
        turn_id,
        {"text": text, "event_type": kind, "batch_id": f"{turn_id}-b1", "arrived_at": _iso(ts)},
    )
    return ts, 1


def _tool_steps(
    w: _Writer, rng: random.Random, topic: Topic, adapter: str, turn_id: str, ts: datetime
) -> datetime:
    """One to three tool steps (start, complete), with react tool call/result blocks."""
    for n in range(rng.randint(1, 3)):
        tool = rng.choice(["search", "code_exec", "read_file", "web_fetch"])
        ts += _pause(rng, 0.5, 4)
        w.emit(
            "chat.step",
            ts,
            turn_id,
            {"step": f"s{n}", "phase": "start", "tool": tool, "title": f"Running {tool}"},
        )
        if adapter == "react":
            call = f"call{n}"
            w.emit(
                "react.block",
                ts,
                turn_id,
                {
                    "block_type": "react.tool.call",
                    "call_id": call,
                    "tool": tool,
                    "text": f"{tool}({topic.key})",
                },
            )
        ts += _pause(rng, 1, 10)
        w.emit(
            "chat.step",
            ts,
            turn_id,
            {"step": f"s{n}", "phase": "complete", "tool": tool, "status": "ok"},
        )
        if adapter == "react":
            w.emit(
                "react.block",
                ts,
                turn_id,
                {
                    "block_type": "react.tool.result",
                    "call_id": f"call{n}",
                    "tool": tool,
                    "text": f"{tool} returned results",
                },
            )
    return ts


def _hosted_file(
    w: _Writer,
    rng: random.Random,
    topic: Topic,
    adapter: str,
    turn_id: str,
    ts: datetime,
    files: dict[str, bytes],
) -> tuple[datetime, str | None]:
    """Sometimes (langgraph, react) a file the agent hosts; returns its conv:fi: ref."""
    if not (topic.hosted_file and adapter in ("langgraph", "react") and rng.random() < 0.5):
        return ts, None
    path, mime, content = topic.hosted_file
    data, ref = _keep_file(files, w.identity, turn_id, f"files/{path}", content)
    ts += _pause(rng, 0.5, 3)
    w.emit(
        "file.hosted",
        ts,
        turn_id,
        {
            "path": path,
            "mime": mime,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        },
    )
    return ts, ref


def _stream_and_citations(
    w: _Writer, rng: random.Random, topic: Topic, adapter: str, turn_id: str, ts: datetime
) -> datetime:
    """Sometimes a langgraph stream aggregate, sometimes citations."""
    if adapter == "langgraph" and rng.random() < 0.3:
        ts += _pause(rng, 0.5, 2)
        w.emit(
            "stream.aggregate",
            ts,
            turn_id,
            {
                "marker": "subsystem",
                "name": "code_exec",
                "chunks": [f"line {i}" for i in range(rng.randint(2, 6))],
            },
        )
    if adapter != "minimal" and rng.random() < 0.25:
        w.emit(
            "communicator.event",
            ts + _pause(rng, 0.1, 1),
            turn_id,
            {
                "name": "chat.citations",
                "data": {
                    "items": [
                        {"url": f"https://docs.example.com/{topic.key}", "title": topic.title}
                    ]
                },
            },
        )
    return ts


def _answer(
    w: _Writer,
    rng: random.Random,
    topic: Topic,
    adapter: str,
    turn_id: str,
    ts: datetime,
    hosted: str | None,
) -> tuple[datetime, str, bool]:
    """The answer (or an error), react summary/anchors/note, usage, turn.closed."""
    error = rng.random() < 0.05
    answer = rng.choice(topic.answers)
    if hosted:
        answer += f" The result is saved at {hosted}."
    ts += _pause(rng, 2, 30)
    if adapter == "react" and not error:
        w.emit(
            "react.summary",
            ts,
            turn_id,
            {"text": topic.summary, "refs": [hosted] if hosted else [], "scope": "turn"},
        )
        w.emit(
            "react.anchors",
            ts,
            turn_id,
            {"phrases": list(topic.phrases), "entities": list(topic.entities)},
        )
        if rng.random() < 0.5:
            w.emit(
                "react.note",
                ts,
                turn_id,
                {"text": f"User works on {topic.title.lower()}; prefers concrete commands."},
            )
    tokens = {"tokens_in": rng.randint(200, 4000), "tokens_out": rng.randint(100, 1200)}
    if error:
        w.emit(
            "assistant.completion",
            ts,
            turn_id,
            {
                "text": "",
                "error": True,
                "error_type": rng.choice(["tool_timeout", "model_overloaded"]),
                **tokens,
            },
        )
    else:
        w.emit("assistant.completion", ts, turn_id, {"text": answer, **tokens})
    if adapter != "minimal":
        w.emit("communicator.event", ts, turn_id, {"name": "accounting.usage", "data": tokens})
    ts += _pause(rng, 0.1, 1)
    w.emit("turn.closed", ts, turn_id, {"status": "error" if error else "ok"})
    return ts, answer, error


def _feedback(w: _Writer, rng: random.Random, turn_id: str, ts: datetime) -> None:
    """Sometimes late user feedback on the closed turn."""
    if rng.random() < 0.2:
        late = ts + timedelta(minutes=rng.uniform(1, 600))
        w.emit(
            "feedback",
            late,
            turn_id,
            {
                "reaction": rng.choice(["up", "up", "down"]),
                "text": rng.choice([None, "thanks, that worked", "not quite"]),
                "origin": "user",
            },
        )


def _malformed(rng: random.Random, sample: dict, count: int) -> list[str]:
    """Deliberately bad lines, one of each kind in turn (see docs/events.md for the reasons)."""

    def variant(i: int) -> str:
        event = json.loads(json.dumps(sample))
        event["event_id"] = f"bad{i:06d}x{rng.getrandbits(32):08x}"
        kind = i % 7
        if kind == 0:
            return json.dumps(event)[: rng.randint(10, 60)]
        if kind == 1:
            event["type"] = "user.telepathy"
        elif kind == 2:
            del event["tenant"]
        elif kind == 3:
            event["occurred_at"] = event["occurred_at"].rstrip("Z")
        elif kind == 4:
            event["conversation_id"] = "conv.with/dots"
        elif kind == 5:
            event["payload"] = {"text": "x", "event_type": "shout"}
            event["type"] = "user.submission"
        else:
            event["type"] = "user.submission"
            event["payload"] = {"text": "x" * (MAX_EVENT_BYTES + 10)}
        return json.dumps(event)

    return [variant(i) for i in range(count)]


def generate_events(
    users: int = 5,
    conversations: int = 20,
    seed: int = 0,
    now: datetime | None = None,
    malformed_ratio: float = 0.005,
    duplicate_ratio: float = 0.002,
    days: float = 30.0,
) -> Generated:
    """Generate `conversations` conversations spread over `users` users and the last `days` days.

    Adapters rotate through minimal, langgraph, claude_code and react; 1-5 turns per conversation
    with follow-ups, steers, context events, attachments, hosted files, errors and late feedback.
    """
    if users < 1 or conversations < 1:
        raise ValueError("users and conversations must be positive")
    now = now or datetime.now(UTC)
    rng = random.Random(seed)
    events: list[dict] = []
    files: dict[str, bytes] = {}
    facts: list[Fact] = []
    for c in range(conversations):
        adapter = SAMPLE_ADAPTERS[c % len(SAMPLE_ADAPTERS)]
        user = f"u{rng.randrange(users):04d}"
        tenant = TENANTS[0] if int(user[1:]) % 5 else TENANTS[1]
        conversation_id = f"c{rng.getrandbits(64):016x}"
        writer = _Writer(
            rng,
            {
                "tenant": tenant,
                "app": APP,
                "agent": AGENTS[adapter],
                "adapter": adapter,
                "user_id": user,
                "conversation_id": conversation_id,
            },
        )
        topic = rng.choice(TOPICS)
        ts = now - timedelta(days=rng.uniform(0.05, days))
        for index in range(rng.randint(1, 5)):
            if index and rng.random() < 0.25:
                topic = rng.choice(TOPICS)
            turn_id = f"t{rng.getrandbits(64):016x}"
            end = _turn(writer, rng, topic, adapter, turn_id, ts, index == 0, files, facts, index)
            ts = end + timedelta(minutes=rng.uniform(1, 60 * 20))
            if ts > now:
                break
        events.extend(e for e in writer.events if e["occurred_at"] <= _iso(now))
    dupes = [events[rng.randrange(len(events))] for _ in range(int(len(events) * duplicate_ratio))]
    events.extend(dict(e) for e in dupes)
    bad = _malformed(rng, events[0], max(1, int(len(events) * malformed_ratio)))
    return Generated(events=events, malformed=bad, files=files, facts=facts)


def write_sample(
    generated: Generated,
    out: Path,
    files_root: Path | None = None,
    per_file: int = 20_000,
    gzip_every: int = 2,
) -> list[Path]:
    """Write the lines as JSONL parts under `out` (every `gzip_every`-th part gzipped) and the
    file bytes under `files_root`; returns the written part paths."""
    out.mkdir(parents=True, exist_ok=True)
    lines = generated.lines()
    parts = []
    for n, start in enumerate(range(0, len(lines), per_file)):
        body = ("\n".join(lines[start : start + per_file]) + "\n").encode()
        gz = gzip_every > 0 and n % gzip_every == gzip_every - 1
        path = out / f"events-{n:05d}.jsonl{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(body, mtime=0) if gz else body)
        parts.append(path)
    if files_root is not None:
        for rel, data in generated.files.items():
            target = files_root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return parts
