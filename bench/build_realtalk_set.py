"""Build the REALTALK labeled set: 21 days of real messaging between people, with the questions
and evidence its authors labeled.

Source: REALTALK (Lee et al., 2025, arXiv 2502.13270), https://github.com/danny911kr/REALTALK,
`data/Chat_*.json` (see `bench/data/realtalk/SOURCE.md`). Ten chats between two people, each a
few messages a day for 21 days; every message has its speaker, time and id (`D<session>:<n>`),
and every chat has memory-probing questions with their evidence message ids and a category
(1 fact, 2 date, 3 inference). The repository carries no license file, so nothing of it is
committed here: the set is built from a local clone into `bench/data/realtalk/` (ignored by git)
and the bench leaves it out where it is not built. `data/locomo/` of that repository (a copy of
LoCoMo, the issue's held-out set) is never read.

Each chat is one *user* of ctxdb (`rt01`..`rt10`, by the chat's number) whose memory holds its
sessions, one conversation each. `speaker_1` is the user (`user.submission`), `speaker_2` the
partner (`assistant.completion`, agent `partner`). A turn is one run of the user's consecutive
messages and the partner's run that follows; a session the partner opens starts with a turn whose
prompt is empty, and one the user closes ends with a turn whose answer is empty, so every message
lies in exactly one turn. Times are the messages' own; `now` is a day after the last message.

Questions are kept as their authors wrote them (they name the speakers, sometimes by names the
speaker labels do not use). Kinds: category 2 `temporal`, 3 `open-domain`, 1 `single-hop` when its
evidence lies in one session, else `multi-hop`. An evidence id is read leniently (`D5:3.`,
`D12:3-D12:5` ranges, `;`- or space-joined lists); ids naming no message are dropped, and so is a
question left with no evidence (the manifest counts both).

Run: `.venv/bin/python bench/build_realtalk_set.py PATH/REALTALK` (a clone of the repository).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from labeled_set_files import TurnEnvelope, set_manifest, turn_events, write_set

DATA = Path(__file__).parent / "data" / "realtalk"
APP, AGENT, TENANT = "realtalk", "partner", "home"
SOURCE_COMMIT = "b903e06a9770bf4e5fe9018c3e132889666d3b4a"
_CHAT = re.compile(r"Chat_(\d+)_.+\.json")
_SESSION = re.compile(r"session_(\d+)")
_ID = re.compile(r"D(\d+):(\d+)")
_RANGE = re.compile(r"D(\d+):(\d+)\s*[-–]\s*(?:D(\d+):)?(\d+)")
KINDS = {2: "temporal", 3: "open-domain"}
"""Kinds by category; category 1 (fact) is single- or multi-hop by its evidence's sessions."""


@dataclass
class Turn:
    conversation_id: str
    turn_id: str
    user: list[str]
    partner: list[str]
    started: datetime
    answered: datetime


def _ts(text: str) -> datetime:
    return datetime.strptime(text, "%d.%m.%Y, %H:%M:%S").replace(tzinfo=UTC)


def session_turns(
    conv_id: str, messages: list[dict[str, Any]], user: str
) -> tuple[list[Turn], dict[str, str]]:
    """The session's turns (module docstring) and the turn id holding each message id."""
    turns: list[Turn] = []
    where: dict[str, str] = {}
    for m in messages:
        mine, at = m["speaker"] == user, _ts(m["date_time"])
        if not turns or (mine and turns[-1].partner):
            turn_id = f"{conv_id}-t{len(turns) + 1:03d}"
            turns.append(Turn(conv_id, turn_id, [], [], at, at))
        turn = turns[-1]
        (turn.user if mine else turn.partner).append(m["clean_text"].strip())
        turn.answered = max(turn.answered, at)
        where[m["dia_id"]] = turn.turn_id
    return turns, where


def evidence_ids(raw: list[str] | str) -> list[tuple[int, int]]:
    """(session, message) of every id in `raw`: ranges within one session ("D12:3-D12:5",
    "D1:3-5", either order) expanded, a range across sessions read as its two ends."""
    out: list[tuple[int, int]] = []
    for item in [raw] if isinstance(raw, str) else raw:
        for s1, m1, s2, m2 in _RANGE.findall(item):
            s2 = s2 or s1
            if s1 == s2:
                low, high = sorted((int(m1), int(m2)))
                out += [(int(s1), n) for n in range(low, high + 1)]
            else:
                out += [(int(s1), int(m1)), (int(s2), int(m2))]
        out += [(int(s), int(n)) for s, n in _ID.findall(_RANGE.sub("", item))]
    return list(dict.fromkeys(out))


def kind_of(category: int, sessions: set[str]) -> str:
    if category == 1:
        return "single-hop" if len(sessions) == 1 else "multi-hop"
    if category not in KINDS:
        raise ValueError(f"unknown REALTALK question category {category!r}")
    return KINDS[category]


def chat_set(
    number: int, chat: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """(events, questions, counts) of one chat."""
    user_id, user = f"rt{number:02d}", chat["name"]["speaker_1"]
    events: list[dict[str, Any]] = []
    where: dict[str, tuple[str, str]] = {}
    sessions = sorted((int(m.group(1)), k) for k in chat if (m := _SESSION.fullmatch(k)))
    turns = 0
    for n, key in sessions:
        conv_id = f"{user_id}-c{n:02d}"
        session, held = session_turns(conv_id, chat[key], user)
        where |= {dia: (conv_id, turn_id) for dia, turn_id in held.items()}
        for t in session:
            envelope = TurnEnvelope(TENANT, APP, AGENT, "minimal", user_id, conv_id, t.turn_id)
            prompt, answer = "\n".join(t.user), "\n".join(t.partner)
            events += turn_events(envelope, prompt, answer, t.started, t.answered, None)
        turns += len(session)
    questions, dropped_ids, dropped_questions = [], 0, 0
    for q in chat["qa"]:
        ids = [f"D{s}:{m}" for s, m in evidence_ids(q["evidence"])]
        found = list(dict.fromkeys(where[i] for i in ids if i in where))
        dropped_ids += sum(i not in where for i in ids)
        if not found:
            dropped_questions += 1
            continue
        questions.append(
            {
                "id": f"{user_id}-q{len(questions) + 1:03d}",
                "user_id": user_id,
                "tenant": TENANT,
                "kind": kind_of(int(q["category"]), {conv for conv, _ in found}),
                "how": f"category {q['category']}",
                "question": q["question"],
                "answer": str(q["answer"]),
                "evidence": [{"conversation_id": c, "turn_id": t} for c, t in found],
            }
        )
    counts = {
        "conversations": len(sessions),
        "turns": turns,
        "questions": len(questions),
        "evidence_ids_dropped": dropped_ids,
        "questions_dropped": dropped_questions,
    }
    return events, questions, counts


def build_set(source: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(events, questions, manifest) of every chat under `source/data` (never `data/locomo`)."""
    chats = sorted(
        (int(m.group(1)), path)
        for path in (source / "data").glob("Chat_*.json")
        if (m := _CHAT.fullmatch(path.name))
    )
    if not chats:
        raise typer.BadParameter(f"no data/Chat_*.json under {source}: pass a REALTALK clone")
    events: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    per_user: dict[str, dict[str, int]] = {}
    for number, path in chats:
        chat_events, chat_questions, counts = chat_set(number, json.loads(path.read_text()))
        events += chat_events
        questions += chat_questions
        per_user[f"rt{number:02d}"] = counts
    events.sort(key=lambda e: (e["occurred_at"], e["event_id"]))
    last = max(datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00")) for e in events)
    now = (last + timedelta(days=1)).replace(hour=12, minute=0, second=0)
    manifest = set_manifest(
        now, 0, per_user, questions, source=f"REALTALK {SOURCE_COMMIT} (no license file)"
    )
    return events, questions, manifest


def main(
    source: Annotated[Path, typer.Argument(help="A clone of github.com/danny911kr/REALTALK.")],
    out: Annotated[Path, typer.Option(help="Output directory.")] = DATA,
) -> None:
    """Events, questions and manifest of the REALTALK chats."""
    write_set(out, *build_set(source))


if __name__ == "__main__":
    typer.run(main)
