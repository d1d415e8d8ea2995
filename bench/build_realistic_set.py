"""Build the realistic labeled query set: multi-session chats between people and an assistant.

Hand-written material lives in `bench/data/realistic/source/`: one file per user (sessions of
turns, labeled facts and the questions about them) and `smalltalk.txt`, a pool of small-talk
exchanges inserted between the facts. Nothing comes from `ctxdb.sample`. The build is
deterministic (seeded per user) and writes, beside `source/`:

  events.jsonl     turn events in the landing contract (docs/events.md), minimal adapter
  questions.jsonl  {id, user_id, tenant, kind, question, answer, evidence: [{conversation_id,
                   turn_id}]}; kinds: single, multi, temporal, paraphrase, exact, misspelled
  manifest.json    the reference time `now`, counts per kind and user

Source format (one item per line; `#` starts a comment line):

  user: maya                         the user id (also names: `name:`, `tenant:`)
  slots: partner=Dan; friend=Jess    names the small talk may mention ({partner}, ...)
  smalltalk_sessions: 12             that many extra small-talk-only sessions, seeded dates
  == 2026-03-03 20:00 | title        a new conversation (session) starting at that UTC time
  U @label,@label2: text             a user message opening a turn, optionally labeled
  A: text                            the assistant's answer closing that turn
  ~ 3                                three small-talk groups (each one or more turns)
  ? kind @label,@label2 | question | answer

Checks (the build fails on any): every label names one turn and every question label exists;
a `paraphrase` question shares no content-word stem with its evidence turns; an `exact`
question holds a literal of one of its evidence turns (`shares_literal`); a `multi` question
has at least two evidence turns.

Run: `.venv/bin/python bench/build_realistic_set.py [--seed 15]`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from difflib import SequenceMatcher
from pathlib import Path
from typing import Annotated, Any

import typer
from labeled_set_files import TurnEnvelope, jsonl, set_manifest, turn_events, write_set

from ctxdb.text import STOPWORDS, stems, words

DATA = Path(__file__).parent / "data" / "realistic"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
KINDS = ("single", "multi", "temporal", "paraphrase", "exact", "misspelled")
APP, AGENT = "chat", "assistant"
EXACT_MIN_CHARS = 10


@dataclass
class Turn:
    user: str
    answer: str = ""
    labels: list[str] = field(default_factory=list)


@dataclass
class Session:
    start: datetime
    title: str
    items: list[Turn | int] = field(default_factory=list)  # a Turn, or a small-talk count


@dataclass
class Question:
    kind: str
    labels: list[str]
    text: str
    answer: str


@dataclass
class UserSource:
    user_id: str
    tenant: str
    slots: dict[str, str]
    sessions: list[Session] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def parse_smalltalk(text: str) -> list[list[Turn]]:
    """Small-talk groups: blank-line separated runs of `U:`/`A:` lines."""
    groups = []
    for block in re.split(r"\n\s*\n", text):
        turns: list[Turn] = []
        for line in block.splitlines():
            if line.startswith("U:"):
                turns.append(Turn(user=line[2:].strip()))
            elif line.startswith("A:"):
                turns[-1].answer = line[2:].strip()
        if turns:
            groups.append(turns)
    return groups


def _labels(spec: str) -> list[str]:
    return [part.strip().lstrip("@") for part in spec.split(",") if part.strip()]


def parse_user(text: str) -> UserSource:
    """One user's sessions, turns and questions (see the module docstring for the format)."""
    head: dict[str, str] = {}
    sessions: list[Session] = []
    questions: list[Question] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if line.startswith("=="):
                when, title = line[2:].split("|", 1)
                start = datetime.strptime(when.strip(), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
                sessions.append(Session(start, title.strip()))
            elif line.startswith("U"):
                spec, body = line[1:].split(":", 1)
                sessions[-1].items.append(Turn(user=body.strip(), labels=_labels(spec)))
            elif line.startswith("A:"):
                turn = sessions[-1].items[-1]
                assert isinstance(turn, Turn) and not turn.answer
                turn.answer = line[2:].strip()
            elif line.startswith("~"):
                sessions[-1].items.append(int(line[1:]))
            elif line.startswith("?"):
                kind_labels, question, answer = (p.strip() for p in line[1:].split("|"))
                kind, _, labels = kind_labels.partition(" ")
                questions.append(Question(kind, _labels(labels), question, answer))
            else:
                key, value = line.split(":", 1)
                head[key.strip()] = value.strip()
        except (ValueError, IndexError, AssertionError) as exc:
            raise ValueError(f"line {number}: cannot read {raw!r} ({exc})") from exc
    if "smalltalk_sessions" in head:
        sessions = with_smalltalk_sessions(sessions, int(head["smalltalk_sessions"]), head["user"])
    slots = dict(
        (k.strip(), v.strip())
        for k, v in (s.split("=", 1) for s in head.get("slots", "").split(";") if s.strip())
    )
    return UserSource(head["user"], head.get("tenant", "home"), slots, sessions, questions)


def with_smalltalk_sessions(sessions: list[Session], n: int, user_id: str) -> list[Session]:
    """`sessions` plus `n` small-talk-only sessions (2 to 4 groups) at seeded random times
    between the first and the last session, at least three hours from any other session."""
    rng = random.Random(f"sessions:{user_id}")
    first, last = sessions[0].start, sessions[-1].start
    taken = [s.start for s in sessions]
    added = []
    while len(added) < n:
        day = first + timedelta(days=rng.uniform(0, (last - first).days))
        start = day.replace(hour=rng.randint(7, 22), minute=rng.randint(0, 59))
        if all(abs(start - t) > timedelta(hours=3) for t in taken):
            taken.append(start)
            added.append(Session(start, "Chat", [rng.randint(2, 4)]))
    return sorted(sessions + added, key=lambda s: s.start)


def _fill(text: str, slots: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: slots[m.group(1)], text)


@dataclass
class Built:
    events: list[dict[str, Any]]
    turn_texts: dict[tuple[str, str], str]
    labels: dict[str, tuple[str, str]]


def build_user(user: UserSource, smalltalk: list[list[Turn]], rng: random.Random) -> Built:
    """Events of every session of `user`, small talk drawn without repeats from the pool."""
    pool = list(range(len(smalltalk)))
    rng.shuffle(pool)
    events: list[dict[str, Any]] = []
    texts: dict[tuple[str, str], str] = {}
    labels: dict[str, tuple[str, str]] = {}
    previous = datetime.min.replace(tzinfo=UTC)
    for s_no, session in enumerate(user.sessions, start=1):
        if session.start <= previous:
            raise ValueError(f"{user.user_id}: session {session.title!r} is not after the last")
        conv = f"{user.user_id}-c{s_no:02d}"
        turns: list[Turn] = []
        for item in session.items:
            if isinstance(item, Turn):
                turns.append(item)
            else:
                for _ in range(item):
                    if not pool:
                        raise ValueError(f"{user.user_id}: small-talk pool exhausted")
                    group = smalltalk[pool.pop()]
                    turns.extend(
                        Turn(_fill(t.user, user.slots), _fill(t.answer, user.slots)) for t in group
                    )
        at = session.start
        for t_no, turn in enumerate(turns, start=1):
            turn_id = f"{conv}-t{t_no:02d}"
            answered = at + timedelta(seconds=rng.randint(8, 40))
            envelope = TurnEnvelope(user.tenant, APP, AGENT, "minimal", user.user_id, conv, turn_id)
            title = session.title if t_no == 1 else None
            events.extend(turn_events(envelope, turn.user, turn.answer, at, answered, title))
            texts[conv, turn_id] = f"{turn.user}\n{turn.answer}"
            for label in turn.labels:
                if label in labels:
                    raise ValueError(f"{user.user_id}: label @{label} names two turns")
                labels[label] = (conv, turn_id)
            at = answered + timedelta(minutes=rng.randint(1, 6), seconds=rng.randint(0, 59))
        previous = at
    return Built(events, texts, labels)


def content_stems(text: str) -> set[str]:
    """Stems of the words that are not stopwords (what the text arms match on)."""
    return set(stems(" ".join(w for w in words(text) if w not in STOPWORDS)).split())


def shares_literal(question: str, evidence: str) -> bool:
    """A code, number or name of the question (a token of 4+ characters with a capital or a
    digit) or the whole question appears verbatim in the evidence, or the two share a run of
    10+ characters."""
    if question.strip("?!. ") in evidence:
        return True
    for token in question.split():
        token = token.strip("?!.,'\"")
        if len(token) >= 4 and re.search(r"[A-Z0-9]", token) and token in evidence:
            return True
    match = SequenceMatcher(None, question, evidence, autojunk=False).find_longest_match()
    return match.size >= EXACT_MIN_CHARS


def check_question(question: Question, evidence: list[str], where: str) -> None:
    """The kind-specific checks of the module docstring; ValueError naming the question."""
    if question.kind not in KINDS:
        raise ValueError(f"{where}: unknown kind {question.kind!r}")
    if question.kind == "multi" and len(evidence) < 2:
        raise ValueError(f"{where}: a multi question needs two or more evidence turns")
    if question.kind == "paraphrase":
        shared = content_stems(question.text) & set().union(*map(content_stems, evidence))
        if shared:
            raise ValueError(f"{where}: paraphrase shares {sorted(shared)} with its evidence")
    if question.kind == "exact" and not any(shares_literal(question.text, t) for t in evidence):
        raise ValueError(f"{where}: exact question shares no literal with its evidence")


def build(source: Path, seed: int) -> tuple[list[dict], list[dict], dict]:
    """(events, questions, manifest) from the source directory."""
    smalltalk = parse_smalltalk((source / "smalltalk.txt").read_text())
    events: list[dict] = []
    questions: list[dict] = []
    problems: list[str] = []
    per_user: dict[str, dict[str, int]] = {}
    for path in sorted(source.glob("*.txt")):
        if path.name == "smalltalk.txt":
            continue
        user = parse_user(path.read_text())
        built = build_user(user, smalltalk, random.Random(f"{seed}:{user.user_id}"))
        events.extend(built.events)
        for n, question in enumerate(user.questions, start=1):
            where = f"{path.name} question {n} ({question.text!r})"
            missing = [label for label in question.labels if label not in built.labels]
            if missing:
                problems.append(f"{where}: unknown labels {missing}")
                continue
            keys = list(dict.fromkeys(built.labels[label] for label in question.labels))
            try:
                check_question(question, [built.turn_texts[k] for k in keys], where)
            except ValueError as exc:
                problems.append(str(exc))
            questions.append(
                {
                    "id": f"{user.user_id}-q{n:03d}",
                    "user_id": user.user_id,
                    "tenant": user.tenant,
                    "kind": question.kind,
                    "question": question.text,
                    "answer": question.answer,
                    "evidence": [{"conversation_id": c, "turn_id": t} for c, t in keys],
                }
            )
        per_user[user.user_id] = {
            "conversations": len(user.sessions),
            "turns": len(built.turn_texts),
            "questions": len(user.questions),
        }
    if problems:
        raise ValueError("the source has problems:\n" + "\n".join(problems))
    events.sort(key=lambda e: (e["occurred_at"], e["event_id"]))
    manifest = set_manifest(NOW, seed, per_user, questions)
    return events, questions, manifest


_jsonl = jsonl
"""How the set files are written (tests/test_realistic_set.py checks them against it)."""


def main(
    seed: Annotated[int, typer.Option(help="Seed of the small-talk draw and timings.")] = 15,
    out: Annotated[Path, typer.Option(help="Output directory.")] = DATA,
) -> None:
    events, questions, manifest = build(DATA / "source", seed)
    write_set(out, events, questions, manifest)


if __name__ == "__main__":
    typer.run(main)
