"""The pack's candidate items, made from the turns in scope: recent sessions, unfinished turns,
recent work (files edited, commands run, how the turn ended), a conversation's timeline, and
earlier turns a query finds. Every item says how old it is and carries its `conv:` ref."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ctxdb.contract.refs import Ref, format_ref
from ctxdb.pack.fit import Candidate, age, candidate
from ctxdb.pack.tokens import count_tokens, cut_to_tokens
from ctxdb.record.titles import lead_sentence, typed_text

if TYPE_CHECKING:
    from ctxdb.search.models import SearchHit

SESSIONS = 8
UNFINISHED = 5
WORK_TURNS = 6
STEPS_TURNS = 50
"""The newest turns whose steps a pack reads (for files edited and commands run)."""
TITLE_CHARS = 100
LINE_CHARS = 200
WHOLE_SHARE = 0.7
"""Of a reload's budget, the most its whole newest turns take (titles of older turns share the
rest)."""
PROMPT_SHARE = 0.4
"""Of a newest turn cut to fit, the most its prompt takes: the answer is what an agent goes on
from, so a pasted prompt never crowds it out."""
EDIT_TOOLS = frozenset(
    {"Edit", "MultiEdit", "Write", "NotebookEdit", "write_file", "replace", "apply_patch"}
)
_PATH_KEYS = ("file_path", "notebook_path", "path", "absolute_path")
_STEP = re.compile(r"^\[step\.\d+\] (?P<tool>[^|]*) \| (?P<title>.*?) \| (?P<input>.*)$")


def one_line(text: str | None, chars: int) -> str:
    """`text` on one line, cut to `chars` at a word boundary."""
    flat = " ".join((text or "").split())
    if len(flat) <= chars:
        return flat
    return flat[: chars - 1].rsplit(" ", 1)[0] + "…"


def turn_ref(conversation_id: str, turn_id: str) -> str:
    return format_ref(Ref(family="turn", conversation_id=conversation_id, turn_id=turn_id))


def outcome(status: str | None, error_type: str | None) -> str:
    if status == "cancelled":
        return "interrupted"
    if status == "error":
        return f"error ({error_type})" if error_type else "error"
    return "answered"


def typed_prompt(turn: dict[str, Any]) -> str:
    """What the person typed in a turn's first prompt, host wrappers dropped ("" when none)."""
    return typed_text(turn.get("first_user_text") or "")


def turn_title(turn: dict[str, Any]) -> str:
    """A turn's prompt (a turn's title is often its conversation's), else its title."""
    return one_line(typed_prompt(turn) or turn.get("title") or "(no prompt)", TITLE_CHARS)


def sessions(turns: pl.DataFrame, now: datetime) -> list[Candidate]:
    """The most recently active conversations: title, age, turn count, how the last turn ended."""
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    for turn in turns.iter_rows(named=True):
        by_conversation.setdefault(turn["conversation_id"], []).append(turn)
    latest = sorted(
        by_conversation.items(), key=lambda kv: (kv[1][-1]["ended_at"], kv[0]), reverse=True
    )
    out = []
    for rank, (conversation_id, rows) in enumerate(latest[:SESSIONS]):
        last = rows[-1]
        title = one_line(rows[0].get("conversation_title") or turn_title(rows[0]), TITLE_CHARS)
        when = age(last["ended_at"], now)
        count = f"{len(rows)} turn{'s' if len(rows) != 1 else ''}"
        ref = f"conv:conversation:{conversation_id}"
        ended = outcome(last["status"], last["error_type"])
        before = f"- {title} ("
        text = f"{before}{when}; {count}; last turn {ended}) {ref}"
        out.append(
            candidate(
                "sessions", (rank, 1), (rank,), text, ref, last["ended_at"], when, len(before)
            )
        )
    return out


def unfinished(turns: pl.DataFrame, now: datetime) -> list[Candidate]:
    """Turns that ended cancelled or in error with no answered turn after them in their
    conversation (not resumed), newest first."""
    answered_after: dict[str, datetime] = {}
    for turn in turns.filter(pl.col("status") == "ok").iter_rows(named=True):
        answered_after[turn["conversation_id"]] = turn["started_at"]
    open_turns = [
        t
        for t in turns.filter(pl.col("status").is_in(["cancelled", "error"])).iter_rows(named=True)
        if t["conversation_id"] not in answered_after
        or answered_after[t["conversation_id"]] <= t["started_at"]
    ]
    open_turns.sort(
        key=lambda t: (t["started_at"], t["conversation_id"], t["turn_id"]), reverse=True
    )
    out = []
    for rank, turn in enumerate(open_turns[:UNFINISHED]):
        ref = turn_ref(turn["conversation_id"], turn["turn_id"])
        when = age(turn["started_at"], now)
        prompt = one_line(typed_prompt(turn) or turn_title(turn), LINE_CHARS)
        before = f"- [{outcome(turn['status'], turn['error_type'])}] {prompt} ("
        text = f"{before}{when}) {ref}"
        out.append(
            candidate(
                "unfinished", (rank, 0), (rank,), text, ref, turn["started_at"], when, len(before)
            )
        )
    return out


def step_facts(steps_text: str) -> tuple[list[str], list[str]]:
    """Files edited and commands run, in order and without repeats, from a steps row's text
    (`[step.N] tool | title | input`, input the call's compact JSON)."""
    files: dict[str, None] = {}
    commands: dict[str, None] = {}
    for line in steps_text.splitlines():
        match = _STEP.match(line)
        if match is None:
            continue
        tool, raw = match["tool"].strip(), match["input"]
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            continue
        if tool in EDIT_TOOLS:
            path = next((data[k] for k in _PATH_KEYS if isinstance(data.get(k), str)), None)
            if path:
                files.setdefault(path)
        command = data.get("command")
        if isinstance(command, str | list) and command:
            commands.setdefault(
                one_line(" ".join(command) if isinstance(command, list) else command, 80)
            )
    return list(files), list(commands)


def first_sentence(text: str | None) -> str:
    return one_line(lead_sentence(text or ""), LINE_CHARS)


def work(turns: pl.DataFrame, steps: dict[tuple[str, str], str], now: datetime) -> list[Candidate]:
    """The newest turns that edited files or ran commands (of the last `STEPS_TURNS`, whose
    steps `steps` holds; the newest turns when none did), spread over their sessions
    (`by_session`), newest first: what was asked, edited and run, and the answer's first
    sentence."""
    recent = list(turns.tail(STEPS_TURNS).iter_rows(named=True))[::-1]
    facts = {
        (t["conversation_id"], t["turn_id"]): step_facts(
            steps.get((t["conversation_id"], t["turn_id"]), "")
        )
        for t in recent
    }
    busy = [t for t in recent if any(facts[(t["conversation_id"], t["turn_id"])])]
    shown = busy or recent
    out = []
    for rank, at in enumerate(by_session(shown)[:WORK_TURNS]):
        turn = shown[at]
        files, commands = facts[(turn["conversation_id"], turn["turn_id"])]
        parts = [f"asked: {one_line(typed_prompt(turn), TITLE_CHARS)}"]
        if files:
            parts.append("edited " + ", ".join(files[:6]))
        if commands:
            parts.append("ran " + "; ".join(f"`{c}`" for c in commands[:3]))
        if turn["status"] == "ok" and turn.get("last_assistant_text"):
            parts.append(f"concluded: {first_sentence(turn['last_assistant_text'])}")
        else:
            parts.append(outcome(turn["status"], turn["error_type"]))
        ref = turn_ref(turn["conversation_id"], turn["turn_id"])
        when = age(turn["started_at"], now)
        text = f"- {when}: " + " | ".join(parts) + f" {ref}"
        out.append(candidate("work", (rank, 2), (at,), text, ref, turn["started_at"], when, 2))
    return out


def by_session(turns: list[dict[str, Any]]) -> list[int]:
    """The positions of `turns` (newest first) taken each conversation's newest first, then
    each one's second newest, and so on: the sessions before the last one keep a place in
    recent work however many turns the last one had."""
    depth: dict[str, int] = {}
    keys = []
    for at, turn in enumerate(turns):
        n = depth.get(turn["conversation_id"], 0)
        depth[turn["conversation_id"]] = n + 1
        keys.append((n, at))
    return [at for _, at in sorted(keys)]


def _whole(turn: dict[str, Any], ordinal: int, now: datetime, limit: int | None = None) -> str:
    """The turn's heading, prompt and answer; with `limit`, within that many tokens, the prompt
    cut to its PROMPT_SHARE first and the answer to what is left."""
    marker = "" if turn["status"] == "ok" else f" [{outcome(turn['status'], turn['error_type'])}]"
    ref = turn_ref(turn["conversation_id"], turn["turn_id"])
    head = f"### Turn {ordinal} ({age(turn['started_at'], now)}){marker} {ref}"
    user = (turn.get("first_user_text") or "").strip()
    answer = (turn.get("last_assistant_text") or "(no answer)").strip()
    if limit is None:
        return f"{head}\nUser: {user}\nAssistant: {answer}"
    if count_tokens(head) >= limit:  # never a cut ref: the heading alone, for `fit` to judge
        return head
    user = cut_to_tokens(user, int(limit * PROMPT_SHARE))
    rest = limit - count_tokens(f"{head}\nUser: {user}\nAssistant:")
    return cut_to_tokens(f"{head}\nUser: {user}\nAssistant: {cut_to_tokens(answer, rest)}", limit)


def timeline(turns: pl.DataFrame, budget: int, now: datetime) -> list[Candidate]:
    """A conversation to continue from: its newest turns whole (within WHOLE_SHARE of the
    budget; the newest cut to fit), each older turn as its title with its ref (the first turn's
    title kept first, then the newest)."""
    rows = list(turns.iter_rows(named=True))
    share = int(budget * WHOLE_SHARE)
    used, out, whole = 0, [], True
    for back, turn in enumerate(reversed(rows)):
        ordinal = len(rows) - back
        ref = turn_ref(turn["conversation_id"], turn["turn_id"])
        when = age(turn["started_at"], now)
        text = _whole(turn, ordinal, now)
        tokens = count_tokens(text)
        if whole and (used + tokens <= share or back == 0):
            text = _whole(turn, ordinal, now, share) if tokens > share else text
            used += count_tokens(text)
            out.append(
                candidate(
                    "turns", (0, back), (ordinal,), text, ref=ref, ts=turn["started_at"], age=when
                )
            )
            continue
        whole = False
        marker = (
            "" if turn["status"] == "ok" else f" [{outcome(turn['status'], turn['error_type'])}]"
        )
        line = f"- Turn {ordinal} ({when}){marker}: {turn_title(turn)} {ref}"
        rank = (1, -1) if ordinal == 1 else (1, back)  # the opening states the goal: kept first
        out.append(
            candidate("turns", rank, (ordinal,), line, ref=ref, ts=turn["started_at"], age=when)
        )
    return out


def related(hits: Iterable[SearchHit], now: datetime) -> list[Candidate]:
    """Earlier turns a query found above the relevance floor, best first."""
    out = []
    for rank, hit in enumerate(hits):
        ref = turn_ref(hit.conversation_id, hit.turn_id)
        when = age(hit.ts, now)
        snippet = one_line(hit.snippets[0].text if hit.snippets else "", LINE_CHARS)
        score = f"relevance {hit.relevance:.2f}; " if hit.relevance is not None else ""
        title = one_line(hit.title or "(untitled)", TITLE_CHARS)
        text = f"- {title} ({score}{when}) {ref}" + (f": {snippet}" if snippet else "")
        out.append(candidate("related", (rank, 0), (rank,), text, ref=ref, ts=hit.ts, age=when))
    return out
