"""The context pack (issue 45) over memories built by the real pipeline (landing files, `land`,
`derive`, read back from Delta): it names the project's sessions, its unfinished turns and the
files and commands of recent turns with their refs; it stays within its budget for any budget,
is byte-identical for identical memory, never holds another user's turns or `<private>` text, and
a conversation reloads as its newest turns whole and older turns as titles."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from conftest_turn_record import NOW, T0, Turn, land_and_derive, settings_for, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxdb.contract.identity import Principal
from ctxdb.pack.build import build_pack
from ctxdb.pack.fit import fit, header, render
from ctxdb.pack.items import timeline, work
from ctxdb.pack.models import ContextRequest
from ctxdb.pack.tokens import count_tokens
from ctxdb.search.models import NotFound
from ctxdb.storage.delta import DeltaStore

SHOP, GARDEN = "home-ann-src-shop", "home-ann-src-garden"
ANN = Principal(user_id="ann", tenant="acme")
BOB = Principal(user_id="bob", tenant="acme")
SECRET = "ZEBRA-PASSPHRASE-917"
BOB_WORD = "BOBSONLYTOPIC"


def _step(turn: Turn, step: str, tool: str, data: dict[str, str]) -> None:
    payload = {"step": step, "phase": "complete", "tool": tool, "title": tool}
    turn.add("chat.step", {**payload, "input": json.dumps(data, separators=(",", ":"))})


def ann_turns(start: datetime = T0) -> list[Turn]:
    """Ann's shop project (a session with edits and a command, then a turn she cancelled; a
    second session with a private span), her garden project, and a long conversation."""
    one = Turn("shop-1", "t1", start=start, agent=SHOP, user_id="ann")
    one.add("turn.started")
    one.add("user.submission", {"text": "Fix the cart total rounding bug", "event_type": "prompt"})
    _step(one, "s1", "Edit", {"file_path": "src/cart.py", "old_string": "x"})
    _step(one, "s2", "Bash", {"command": "pytest -q tests/test_cart.py"})
    one.add(
        "assistant.completion",
        {"text": "### 2. Fixed\n```diff\n- float\n```\nRounding now uses Decimal. Tests pass."},
    )
    one.add("turn.closed")
    two = Turn("shop-1", "t2", start=start + timedelta(hours=1), agent=SHOP, user_id="ann")
    two.add("turn.started")
    two.add("user.submission", {"text": "Migrate the orders table to UUID keys"})
    two.add("turn.closed", {"status": "cancelled"})
    private = Turn("shop-2", "t3", start=start + timedelta(days=2), agent=SHOP, user_id="ann")
    private.basic(f"Deploy with key <private>{SECRET}</private> to staging", "Deployed.")
    garden = Turn("garden-1", "g1", start=start + timedelta(days=3), agent=GARDEN, user_id="ann")
    garden.basic("When should I water the tomatoes", "Every morning.")
    long = []
    for n in range(30):
        at = start + timedelta(days=4, minutes=n)
        turn = Turn("long-1", f"l{n}", start=at, agent=SHOP, user_id="ann")
        long.append(turn.basic(f"Question {n} about invoices " + "detail " * 20, f"Answer {n}."))
    return [one, two, private, garden, *long]


def bob_turns() -> list[Turn]:
    """Bob's turns in Ann's tenant and in the same project folder name."""
    turn = Turn("bob-1", "b1", start=T0 + timedelta(days=5), agent=SHOP, user_id="bob")
    return [turn.basic(f"Tell me about {BOB_WORD} in the cart", f"{BOB_WORD} is done.")]


def build(root: Path) -> DeltaStore:
    events = [e for t in ann_turns() + bob_turns() for e in t.events]
    for event in events:
        event["tenant"] = "acme"
    write_jsonl(root / "landing" / "events.jsonl", events)
    store = DeltaStore(str(root / "delta"))
    land_and_derive(store, root / "landing", settings_for(root))
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> DeltaStore:
    return build(tmp_path_factory.mktemp("pack"))


def pack(store: DeltaStore, who: Principal = ANN, **request):
    return build_pack(who, ContextRequest(**request), NOW, store)


def test_a_project_pack_names_sessions_unfinished_turns_files_and_commands(store) -> None:
    result = pack(store, project=SHOP)
    text = result.text
    assert "Fix the cart total rounding bug" in text and "conv:conversation:shop-1" in text
    assert "[interrupted] Migrate the orders table to UUID keys" in text
    assert "conv:turn:conv_shop-1.t2" in text
    assert "edited src/cart.py" in text and "`pytest -q tests/test_cart.py`" in text
    assert "concluded: Rounding now uses Decimal." in text
    assert "water the tomatoes" not in text  # another project
    assert all(item.age and item.age.endswith("ago") for item in result.items)
    assert "tomatoes" in pack(store).text  # the whole user


def test_a_pack_never_holds_another_users_turns(store) -> None:
    for request in ({}, {"project": SHOP}, {"query": BOB_WORD}):
        assert BOB_WORD not in pack(store, **request).text
    assert BOB_WORD in pack(store, BOB).text
    with pytest.raises(NotFound):
        pack(store, conversation_id="bob-1")
    assert "shop-1" not in pack(store, BOB).text


def test_a_pack_never_holds_private_text(store) -> None:
    texts = [pack(store).text, pack(store, project=SHOP, budget=4000).text]
    texts.append(pack(store, conversation_id="shop-2").text)
    assert "Deploy with key" in texts[2]
    for text in texts:
        assert SECRET not in text and "<private>" not in text


def test_identical_memory_gives_a_byte_identical_pack(store, tmp_path: Path) -> None:
    again = build(tmp_path)
    for request in ({}, {"project": SHOP, "budget": 300}, {"conversation_id": "long-1"}):
        first, second = pack(store, **request), pack(again, **request)
        assert first.model_dump_json() == second.model_dump_json()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budget=st.integers(min_value=32, max_value=3000),
    scope=st.sampled_from([{}, {"project": SHOP}, {"conversation_id": "long-1"}]),
    max_chars=st.one_of(st.none(), st.integers(min_value=200, max_value=5000)),
)
def test_a_pack_never_exceeds_its_budget(store, budget: int, scope: dict, max_chars) -> None:
    result = pack(store, budget=budget, max_chars=max_chars, **scope)
    assert result.tokens == count_tokens(result.text) <= budget
    assert max_chars is None or len(result.text) <= max_chars
    assert result.text.startswith("# Memory from ctxdb")


def test_a_conversation_reloads_newest_turns_whole_and_older_as_titles(store) -> None:
    result = pack(store, conversation_id="long-1", budget=600)
    text = result.text
    assert "### Turn 30" in text and "Answer 29." in text  # the newest, whole
    assert "- Turn 1 (" in text and "conv:turn:conv_long-1.l0" in text  # the oldest, a title
    assert "Answer 0." not in text
    assert result.tokens <= 600 and result.dropped >= 0


def test_thousands_of_sessions_and_a_huge_turn_give_a_bounded_pack(tmp_path: Path) -> None:
    """2,000 sessions of one project and a turn at the contract's largest prompt and answer: the
    pack and the reload stay within budget and characters and name the newest sessions."""
    turns = [
        Turn(
            f"many-{n:04d}", "t", start=T0 + timedelta(minutes=n), agent=SHOP, user_id="ann"
        ).basic(f"Session {n} asks about the ledger", f"Ledger answer {n}.")
        for n in range(2000)
    ]
    huge = Turn("huge-1", "h", start=T0 + timedelta(days=3), agent=SHOP, user_id="ann")
    huge.add("turn.started")
    huge.add("user.submission", {"text": "paste " * 16_666, "event_type": "prompt"})
    _step(huge, "s1", "Bash", {"command": "cat " + "x" * 50_000})
    huge.add("assistant.completion", {"text": "long answer " * 16_666})
    huge.add("turn.closed")
    events = [e | {"tenant": "acme"} for t in [*turns, huge] for e in t.events]
    write_jsonl(tmp_path / "landing" / "events.jsonl", events)
    store = DeltaStore(str(tmp_path / "delta"))
    land_and_derive(store, tmp_path / "landing", settings_for(tmp_path))

    project = pack(store, project=SHOP, budget=1500, max_chars=10_000)
    assert project.tokens == count_tokens(project.text) <= 1500
    assert len(project.text) <= 10_000
    assert "conv:turn:conv_huge-1.h" in project.text  # the newest turn, cut to fit
    assert "Session 1999 asks about the ledger" in project.text  # the newest sessions are named
    assert "Session 0 asks" not in project.text
    reload = pack(store, conversation_id="huge-1", budget=800)
    assert reload.tokens == count_tokens(reload.text) <= 800
    prompt, answer = reload.text.split("\nAssistant: ")
    assert "paste paste" in prompt and answer.startswith("long answer long answer")
    assert count_tokens(prompt) < count_tokens(answer)  # a pasted prompt never crowds it out


@pytest.mark.parametrize("budget", [60, 80, 100, 120])
def test_a_newest_turn_cut_to_a_small_budget_never_cuts_its_ref(budget: int) -> None:
    """A conversation id long enough that the newest turn's heading (with its ref) is most of
    the whole-turn share: the reload holds whole refs only."""
    conversation = "".join(f"{n % 10}-q" for n in range(40))  # many tokens
    turns = pl.DataFrame(
        [
            {
                "conversation_id": conversation,
                "turn_id": f"t{n}",
                "started_at": NOW - timedelta(hours=n),
                "status": "ok",
                "error_type": None,
                "title": None,
                "first_user_text": "word " * 200,
                "last_assistant_text": "answer " * 200,
            }
            for n in (1, 0)
        ]
    )
    ref = f"conv:turn:conv_{conversation}.t"
    kept = fit(
        [header("the conversation", budget, NOW), *timeline(turns, budget, NOW)], budget, None
    )
    text = render(kept)
    assert count_tokens(text) <= budget
    for word in text.split():
        assert not word.startswith("conv:turn:") or (word.startswith(ref) and word[-1].isdigit())


def test_a_long_last_session_leaves_the_sessions_before_it_in_recent_work() -> None:
    """Eight turns of the last session ran commands, as did one of each session before it:
    recent work keeps the newest turn of every session, newest first, and fills the rest with
    the last session's."""
    rows = []
    for conversation, turns, hours in (("old", 1, 0), ("mid", 1, 1), ("last", 8, 2)):
        for n in range(turns):
            rows.append(
                {
                    "conversation_id": conversation,
                    "turn_id": f"t{n}",
                    "first_user_text": f"{conversation} prompt {n}",
                    "status": "ok",
                    "error_type": None,
                    "last_assistant_text": "Done.",
                    "started_at": T0 + timedelta(hours=hours, minutes=n),
                }
            )
    steps = {
        (r["conversation_id"], r["turn_id"]): f'[step.1] Bash | run | {{"command":"make {n}"}}'
        for n, r in enumerate(rows)
    }
    shown = work(pl.DataFrame(rows), steps, NOW)
    kept = fit(shown, 10_000, None)
    asked = [line.split("asked: ")[1].split(" |")[0] for line in render(kept).splitlines()[1:]]
    assert asked == [f"last prompt {n}" for n in (7, 6, 5, 4)] + ["mid prompt 0", "old prompt 0"]
