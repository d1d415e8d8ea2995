"""Build the chit-chat labeled set: real multi-session conversations between people.

Source: the BYU PCC lab's Chit-Chat Challenge corpus (PyPI `chitchat-dataset` 0.9.0, MIT; see
`bench/data/chitchat/SOURCE.md`): 7,168 conversations typed by pairs of people in 2018, every
message with its sender id and time. One sender is one *user* of ctxdb; each two-person
conversation the sender took part in is one session. A turn is one run of the user's consecutive
messages (`user.submission`) and the partner's reply that follows (`assistant.completion`, agent
`partner`); a partner's opening before the user's first message and a last run of the user's
with no reply are left out. Times are the messages' own.

`extract` picks the users and their conversations from the corpus file and writes them, verbatim,
to `source/conversations.jsonl` (what is committed). `build` writes, beside `source/`:

  events.jsonl     turn events in the landing contract (docs/events.md), minimal adapter
  questions.jsonl  {id, user_id, tenant, kind, question, answer, evidence: [{conversation_id,
                   turn_id}], how}
  manifest.json    the reference time `now`, counts per kind and user

Questions come from what the partners themselves asked. A partner's question about the user
("what are you majoring in?") is turned to the first person ("what am I majoring in?"); its
evidence is the user's reply, the next turn. Kinds (`how` records the rule of each question):

  single-hop   one such question and its answer turn
  temporal     the same, with the month of the session ("... back in May?"); the user has
               sessions in other months
  multi-hop    `repeat`: a question the user was asked in two or more sessions (evidence: every
               answer, one per session, up to 5); `pair`: two questions of two sessions joined
               ("what am I majoring in, and where did I serve my mission?"; evidence: both)
  open-domain  the conversation starter the pair was given ("What superpower do you wish you had,
               and why?" -> "... do I wish I had ..."); evidence: the user's statements in that
               session that share a content word with the starter, and the user's reply to the
               partner's asking it

A partner question counts when it ends with "?", addresses the user ("you"), names nothing of the
partner's own ("I", "my"...), holds a content word beyond small talk ("how are you doing
today?" does not) and is answered by a statement of four or more content words.

Run: `.venv/bin/python bench/build_chitchat_set.py extract PATH/dataset.json` (once), then
`.venv/bin/python bench/build_chitchat_set.py build`.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from labeled_set_files import TurnEnvelope, jsonl, set_manifest, turn_events, write_set

from ctxdb.text import STOPWORDS, stems, words

DATA = Path(__file__).parent / "data" / "chitchat"
SOURCE = DATA / "source" / "conversations.jsonl"
NOW = datetime(2018, 11, 20, 12, 0, tzinfo=UTC)
APP, AGENT, TENANT = "chitchat", "partner", "home"
USERS = 12
SESSIONS_PER_USER = 26
MIN_MESSAGES_EACH = 4
MAX_RUNS = 40  # runs of messages in a conversation (about 20 turns of each side)
QUOTA = {"single-hop": 25, "temporal": 15, "multi-hop": 15, "open-domain": 10}
SMALL_TALK = frozenset(
    "also anything day do doing done else fun go going good great guess hey hi hello how just"
    " know lol haha like mean new night nice now ok okay oh one pretty really right say says"
    " see so sound sounds sure talk tell thing things think time today tonight up well what"
    " whats yeah yes yet much about".split()
)
FIRST_PERSON = frozenset("i i'm im me my mine myself we us our ours i've ive i'd id i'll".split())
_SWAPS = [
    (r"\bare you\b", "am I"),
    (r"\bwere you\b", "was I"),
    (r"\byou are\b", "I am"),
    (r"\byou were\b", "I was"),
    (r"\byou'?re\b", "I'm"),
    (r"\byou'?ve\b", "I've"),
    (r"\byou'?ll\b", "I'll"),
    (r"\byou'?d\b", "I'd"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (r"\bur\b", "my"),
    (r"\bu\b", "you"),
]
_LEADING = re.compile(
    r"^(?:(?:so|and|but|or|then|oh|ooh|yo|sure|well|haha+|lol|ok|okay|also|anyway|wait|hmm+|yeah|cool|nice)\b[\s,.!]*)+",
    re.IGNORECASE,
)
_GROUP = re.compile(r"\b(?:you guys|y'?all|you two|both of you)\b", re.IGNORECASE)
_ANAPHORA = frozenset("it that this those these him her them there he she they".split())
_OBJECT_BEFORE = frozenset(
    "to for with at about of from make makes made let tell told give gave like love see saw"
    " help know bring get got than call called ask asked".split()
)


# --- extract ---------------------------------------------------------------------------------


def two_party(convo: dict[str, Any]) -> Counter[str] | None:
    """Messages per sender of a conversation held by exactly two people, each writing at least
    `MIN_MESSAGES_EACH` messages; None otherwise."""
    senders: Counter[str] = Counter(m["sender"] for group in convo["messages"] for m in group)
    runs = sum(1 for group in convo["messages"] if group)
    if len(senders) == 2 and min(senders.values()) >= MIN_MESSAGES_EACH and runs <= MAX_RUNS:
        return senders
    return None


def pick_users(corpus: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """`USERS` senders and `SESSIONS_PER_USER` of their conversations each, no conversation
    twice: the senders with the most two-person conversations after the three busiest (hundreds
    of conversations each, the lab's own accounts by the look of it), conversations spread evenly
    over each sender's dates."""
    by_sender: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for cid, convo in corpus.items():
        senders = two_party(convo)
        for sender in senders or ():
            by_sender[sender].append((convo["start"], cid))
    ranked = sorted(by_sender, key=lambda s: (-len(by_sender[s]), s))[3:]
    taken: set[str] = set()
    picked = []
    for sender in ranked:
        free = sorted(x for x in by_sender[sender] if x[1] not in taken)
        if len(free) < SESSIONS_PER_USER:
            continue
        step = len(free) / SESSIONS_PER_USER
        chosen = [free[int(i * step)][1] for i in range(SESSIONS_PER_USER)]
        taken.update(chosen)
        picked.append((sender, chosen))
        if len(picked) == USERS:
            break
    return picked


# --- turns -----------------------------------------------------------------------------------


@dataclass
class Turn:
    conversation_id: str
    turn_id: str
    user: str
    answer: str
    started: datetime
    answered: datetime


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def session_turns(conv_id: str, convo: dict[str, Any], sender: str) -> list[Turn]:
    """The user's runs of messages, each with the partner's reply (see the module docstring)."""
    groups = [g for g in convo["messages"] if g]
    turns: list[Turn] = []
    for i, group in enumerate(groups):
        if group[0]["sender"] != sender or i + 1 >= len(groups):
            continue
        reply = groups[i + 1]
        if reply[0]["sender"] == sender:
            continue
        turns.append(
            Turn(
                conv_id,
                f"{conv_id}-t{len(turns) + 1:02d}",
                "\n".join(m["text"] for m in group),
                "\n".join(m["text"] for m in reply),
                _ts(group[0]["timestamp"]),
                max(_ts(reply[-1]["timestamp"]), _ts(group[-1]["timestamp"])),
            )
        )
    return turns


# --- questions -------------------------------------------------------------------------------


def content(text: str) -> set[str]:
    """Content stems: not a stopword, not small talk, not a first- or second-person word."""
    kept = [
        w
        for w in words(text)
        if w not in STOPWORDS
        and w not in SMALL_TALK
        and w not in FIRST_PERSON
        and w not in {"you", "u", "ur", "yours", "yourself"}
    ]
    return set(stems(" ".join(kept)).split()) if kept else set()


def first_person(question: str) -> str:
    """A partner's question about the user, as the user would ask it ("what are you studying?"
    -> "what am I studying?")."""
    text = question.strip()
    for pattern, repl in _SWAPS:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    tokens = text.split(" ")
    for i, token in enumerate(tokens):
        bare = token.lower().strip("?!.,")
        if bare == "you":
            before = tokens[i - 1].lower().strip("?!.,") if i else ""
            last = i == len(tokens) - 1 or token.endswith(("?", "!", ".", ","))
            word = "me" if before in _OBJECT_BEFORE or last else "I"
            tokens[i] = word + token[len(bare) :]
    text = " ".join(tokens)
    text = re.sub(r"\bdoes I\b", "do I", text)
    text = re.sub(r"\bI (has|is)\b", lambda m: "I have" if m.group(1) == "has" else "I am", text)
    return text[0].lower() + text[1:] if text[:2] != "I " else text


def asked(text: str) -> list[str]:
    """The question sentences of a message run that address the other person and say nothing
    of the asker's own."""
    found = []
    for sentence in re.findall(r"[^.!?\n]*\?", text):
        sentence = sentence.strip()
        tokens = set(words(sentence))
        if not ({"you", "your", "u", "ur"} & tokens) or (FIRST_PERSON & tokens):
            continue
        clauses = sentence.split(",")
        while len(clauses) > 1 and not {"you", "your", "u", "ur"} & set(words(clauses[0])):
            clauses.pop(0)
        sentence = _LEADING.sub("", ",".join(clauses).strip())
        if _GROUP.search(sentence) or not sentence:
            continue
        kept = content(sentence)
        vague = bool(_ANAPHORA & tokens) and len(kept) < 2
        if kept and max(map(len, kept)) >= 4 and not vague and 3 <= len(sentence.split()) <= 16:
            found.append(sentence[0].upper() + sentence[1:])
    return found


def is_statement(text: str) -> bool:
    return len(content(text)) >= 4 and not text.rstrip().endswith("?")


@dataclass
class Fact:
    """A partner's question and the user's answer turn."""

    user_id: str
    question: str
    raw: str
    answer: str
    evidence: tuple[str, str]
    started: datetime


def facts_of(user_id: str, turns: list[Turn]) -> list[Fact]:
    """Every partner question of a session answered by the user's next turn."""
    out = []
    for before, after in zip(turns, turns[1:], strict=False):
        if not is_statement(after.user):
            continue
        for raw in asked(before.answer)[-1:]:
            out.append(
                Fact(
                    user_id,
                    first_person(raw),
                    raw,
                    after.user,
                    (after.conversation_id, after.turn_id),
                    after.started,
                )
            )
    return out


def _question(
    user_id: str, kind: str, how: str, text: str, answer: str, evidence: list[tuple[str, str]]
) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "tenant": TENANT,
        "kind": kind,
        "how": how,
        "question": text,
        "answer": answer,
        "evidence": [{"conversation_id": c, "turn_id": t} for c, t in dict.fromkeys(evidence)],
    }


def user_questions(
    user_id: str, sessions: list[tuple[dict[str, Any], list[Turn]]], rng: random.Random
) -> list[dict[str, Any]]:
    """The user's questions, at most `QUOTA` of each kind (see the module docstring)."""
    facts = [f for _, turns in sessions for f in facts_of(user_id, turns)]
    rng.shuffle(facts)
    by_key: dict[frozenset[str], list[Fact]] = defaultdict(list)
    for fact in facts:
        by_key[frozenset(content(fact.question))].append(fact)
    out: list[dict[str, Any]] = []
    used: set[str] = set()

    def count(kind: str) -> int:
        return sum(q["kind"] == kind for q in out)

    repeated = [fs for fs in by_key.values() if len({f.evidence[0] for f in fs}) >= 2]
    for group in repeated[: QUOTA["multi-hop"]]:
        chosen = list({f.evidence[0]: f for f in group}.values())[:5]
        answers = " | ".join(f.answer for f in chosen)
        evidence = [f.evidence for f in chosen]
        out.append(_question(user_id, "multi-hop", "repeat", chosen[0].question, answers, evidence))
        used.update(f.raw for f in group)
    multi_session = {k for k, fs in by_key.items() if len({f.evidence[0] for f in fs}) >= 2}
    singles = [f for f in facts if frozenset(content(f.question)) not in multi_session]
    months = {f.started.strftime("%B") for f in facts}
    for fact in singles[: QUOTA["single-hop"]]:
        out.append(
            _question(user_id, "single-hop", "asked", fact.question, fact.answer, [fact.evidence])
        )
    if len(months) > 1:
        for fact in singles[::-1][: QUOTA["temporal"]]:
            text = f"back in {fact.started.strftime('%B')}, {fact.question}"
            out.append(_question(user_id, "temporal", "asked", text, fact.answer, [fact.evidence]))
    pairs = [
        (a, b) for a, b in zip(singles, singles[1:], strict=False) if a.evidence[0] != b.evidence[0]
    ]
    for a, b in pairs[: QUOTA["multi-hop"] - count("multi-hop")]:
        text = f"{a.question.rstrip('?')}, and {b.question}"
        answers = f"{a.answer} | {b.answer}"
        out.append(_question(user_id, "multi-hop", "pair", text, answers, [a.evidence, b.evidence]))

    by_prompt: dict[str, list[tuple[dict[str, Any], list[Turn]]]] = defaultdict(list)
    for convo, turns in sessions:
        if convo.get("prompt") and turns:
            by_prompt[convo["prompt"]].append((convo, turns))
    prompts = sorted(by_prompt)
    rng.shuffle(prompts)
    for prompt in prompts:
        if count("open-domain") >= QUOTA["open-domain"]:
            break
        topic = content(prompt)
        evidence: list[tuple[str, str]] = []
        for _, turns in by_prompt[prompt]:
            for before, turn in zip([None, *turns], turns, strict=False):
                replied = before is not None and bool(topic & content(before.answer))
                on_topic = bool(topic & content(turn.user)) or replied
                if on_topic and is_statement(turn.user):
                    evidence.append((turn.conversation_id, turn.turn_id))
        if topic and 1 <= len(evidence) <= 8:
            out.append(
                _question(
                    user_id,
                    "open-domain",
                    "starter",
                    f"what did I say about: {first_person(prompt)}",
                    "",
                    evidence,
                )
            )
    return out


# --- commands --------------------------------------------------------------------------------


def load_source(path: Path = SOURCE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def build_set(
    records: list[dict[str, Any]], seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(events, questions, manifest) of the extracted conversations."""
    events: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    per_user: dict[str, dict[str, int]] = {}
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_user[record["user_id"]].append(record)
    for user_id, convos in sorted(by_user.items()):
        sessions = []
        for n, record in enumerate(sorted(convos, key=lambda r: r["start"]), start=1):
            conv_id = f"{user_id}-c{n:02d}"
            turns = session_turns(conv_id, record, record["sender"])
            for i, turn in enumerate(turns):
                envelope = TurnEnvelope(
                    TENANT, APP, AGENT, "minimal", user_id, turn.conversation_id, turn.turn_id
                )
                title = record.get("prompt") if i == 0 else None
                events.extend(
                    turn_events(
                        envelope, turn.user, turn.answer, turn.started, turn.answered, title
                    )
                )
            sessions.append((record, turns))
        mine = user_questions(user_id, sessions, random.Random(f"{seed}:{user_id}"))
        for n, q in enumerate(mine, start=1):
            questions.append({"id": f"{user_id}-q{n:03d}", **q})
        per_user[user_id] = {
            "conversations": len(sessions),
            "turns": sum(len(t) for _, t in sessions),
            "questions": len(mine),
        }
    events.sort(key=lambda e: (e["occurred_at"], e["event_id"]))
    manifest = set_manifest(
        NOW,
        seed,
        per_user,
        questions,
        source="chitchat-dataset 0.9.0 (BYU PCC lab Chit-Chat Challenge), MIT",
    )
    return events, questions, manifest


app = typer.Typer(add_completion=False)


@app.command()
def extract(
    corpus: Annotated[Path, typer.Argument(help="dataset.json of chitchat-dataset 0.9.0.")],
) -> None:
    """Pick the users and their conversations and write them to source/conversations.jsonl."""
    data = json.loads(corpus.read_text())
    rows = []
    for n, (sender, cids) in enumerate(pick_users(data), start=1):
        for cid in cids:
            rows.append({"user_id": f"u{n:02d}", "sender": sender, "id": cid, **data[cid]})
    SOURCE.parent.mkdir(parents=True, exist_ok=True)
    SOURCE.write_text(jsonl(rows))
    typer.echo(f"{len(rows)} conversations of {n} users -> {SOURCE}")


@app.command()
def build(
    seed: Annotated[int, typer.Option(help="Seed of the question draw.")] = 29,
    out: Annotated[Path, typer.Option(help="Output directory.")] = DATA,
) -> None:
    """Events, questions and manifest from source/conversations.jsonl."""
    events, questions, manifest = build_set(load_source(), seed)
    write_set(out, events, questions, manifest)


if __name__ == "__main__":
    app()
