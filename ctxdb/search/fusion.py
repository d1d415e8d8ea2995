"""Reciprocal-rank fusion of the three arms, then the recency, time and brevity factors, under
one `SearchKnobs` (pure arithmetic, no I/O).

    rrf   = sum over arms of w_arm * c_arm ** p / (k + r_arm)                     (r 1-based)
    rec   = 2 ** (-age_days / half_life_days)
    brevity = min(1, n / brief_words) ** brief_power
    final = rrf * (1 + w_rec * rec) * (1 + w_win * in_window) * brevity

`c_arm` is the query coverage of the arm's row (`coverage.py`: the share of the query's stems or
trigrams the row holds; 1 for the semantic arm) and `p` the coverage power (0: plain RRF).
`in_window` is 1 when the turn falls in the span a time expression of the query names ("in
April", "last spring", "last week"; see `temporal.py`), else 0. `n` counts the distinct words,
stopwords aside, of the turn's longest matched row: a brief row ("Hello Kevin, how are you
today?") shares a name or a question's shape with many queries and rarely holds what they ask
for (`brief_power` 0: off). An arm that did not return the turn contributes 0. Each arm is
deduplicated to its best row per (conversation, turn) before ranks are assigned, so several rows
of one turn never crowd out others.

The candidates of a query are arrays (`Candidates`, built once) that `scores` weighs under any
knobs and `ranked` orders: turns below the relevance floor dropped, replies ahead of the
questions the query asks again (`answers_first`), diversity over conversations (`diversify`: the
top k picked greedily, each turn already picked from a conversation scaling the final score of
that conversation's next turn by (1 - d), a maximal-marginal-relevance selection whose
similarity is "same conversation"), then the optional per-conversation cap. The service ranks
one search this way; the quality bench scores thousands of knob settings on the same arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ctxdb.search.arms import RowHit
from ctxdb.search.coverage import QueryTerms, stem_coverage
from ctxdb.search.models import ARMS, Arm, ArmExplain, Explain, Scope, Target
from ctxdb.search.relevance import relevance
from ctxdb.settings.search import BRIEF_WORDS_MAX, SearchKnobs
from ctxdb.text import content_words, stems

Floats = npt.NDArray[np.float64]
Key = tuple[str, str]
T = TypeVar("T")

DIVERSITY_POOL = 4  # the greedy selection looks this many times top_k deep


def arm_weights(knobs: SearchKnobs) -> dict[Arm, float]:
    """The weight of each arm under `knobs`."""
    return {
        "semantic": knobs.weight_semantic,
        "lexical": knobs.weight_lexical,
        "trigram": knobs.weight_trigram,
    }


def cap_of(knobs: SearchKnobs, scope: Scope) -> int | None:
    """The per-conversation cap: never in conversation scope, in user and agent scope only
    when `cap_user_scope`."""
    return knobs.max_per_conversation if scope != "conversation" and knobs.cap_user_scope else None


def age_days(ts: datetime, now: datetime) -> float:
    """Days from `ts` to `now`; a future timestamp is age 0."""
    return max(0.0, (now - ts).total_seconds() / 86400.0)


def counted(row: RowHit) -> str:
    """What brevity counts of a row: its text and its retrieval anchors."""
    return f"{row.text} {row.anchors_text}" if row.anchors_text else row.text


def dedup_turns(rows: Iterable[RowHit]) -> list[RowHit]:
    """Keep the first (best-ranked) row of each (conversation, turn), preserving order."""
    seen: dict[Key, RowHit] = {}
    for row in rows:
        seen.setdefault(row.key, row)
    return list(seen.values())


def counted_words(knobs: SearchKnobs) -> int:
    """How far `candidates` must count a turn's words for `knobs` (0: brevity is off)."""
    return knobs.brief_words if knobs.brief_power > 0 and knobs.brief_words > 1 else 0


@dataclass(frozen=True)
class Candidates:
    """One query's candidate turns, index i in every field: each turn's best row per arm (in
    ARMS order), its 1-based rank per arm (0: not returned), that row's query coverage, the
    newest of its rows' times, age in days, whether it lies in the query's time window, the
    distinct content words of its longest row (counted up to `words_up_to`), its relevance and
    its place in (newest first, conversation, turn) order, which breaks ties."""

    keys: list[Key]
    rows: list[dict[Arm, RowHit]]
    ranks: dict[Arm, Floats]
    coverage: dict[Arm, Floats]
    ts: list[datetime]
    age_days: Floats
    in_window: Floats
    windowed: bool
    words: Floats
    relevance: Floats
    tie: npt.NDArray[np.int64]
    _memo: dict[Hashable, Floats] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def each(self, key: Hashable, values: Floats, f: Callable[[float], float]) -> Floats:
        """`f` of each of `values`, in Python floats (numpy's power may differ from Python's in
        the last bit), kept under `key`, which names `values` and every parameter of `f`: a
        bench scoring thousands of knob settings on these candidates asks few distinct ones."""
        if key not in self._memo:
            self._memo[key] = _floats(f(value) for value in values.tolist())
        return self._memo[key]


def candidates(
    ranked: Mapping[Arm, Sequence[RowHit]],
    now: datetime,
    window: tuple[datetime, datetime] | None = None,
    words_up_to: int = BRIEF_WORDS_MAX,
) -> Candidates:
    """The candidates of per-arm ranked rows; `window` (start inclusive, end exclusive) marks
    the turns inside the span the query names."""
    per_turn: dict[Key, dict[Arm, tuple[int, RowHit]]] = {}
    for arm in ARMS:
        for rank, row in enumerate(dedup_turns(ranked.get(arm, ())), start=1):
            per_turn.setdefault(row.key, {})[arm] = (rank, row)
    keys = list(per_turn)
    rows = [{arm: row for arm, (_, row) in hits.items()} for hits in per_turn.values()]
    ts = [max(row.ts for row in turn.values()) for turn in rows]
    order = sorted(range(len(keys)), key=lambda i: (-ts[i].timestamp(), keys[i]))
    tie = np.empty(len(keys), dtype=np.int64)
    tie[order] = np.arange(len(keys))
    words = [
        content_words(max((counted(r) for r in turn.values()), key=len), words_up_to)
        if words_up_to
        else 0
        for turn in rows
    ]
    return Candidates(
        keys=keys,
        rows=rows,
        ranks={arm: _floats(hits.get(arm, (0,))[0] for hits in per_turn.values()) for arm in ARMS},
        coverage={arm: _floats(t[arm].coverage if arm in t else 0.0 for t in rows) for arm in ARMS},
        ts=ts,
        age_days=_floats(age_days(t, now) for t in ts),
        in_window=_floats(window is not None and window[0] <= t < window[1] for t in ts),
        windowed=window is not None,
        words=_floats(words),
        relevance=_floats(relevance(turn) for turn in rows),
        tie=tie,
    )


def _floats(values: Iterable[float]) -> Floats:
    return np.fromiter(values, dtype=np.float64)


@dataclass(frozen=True)
class Scores:
    """Every candidate's per-arm contributions, RRF sum, recency and brevity factors and final
    score under one set of knobs."""

    contributions: dict[Arm, Floats]
    rrf: Floats
    recency: Floats
    brevity: Floats
    final: Floats


def scores(c: Candidates, knobs: SearchKnobs) -> Scores:
    """The fused scores of the candidates under `knobs` (the formulas of the module docstring)."""
    power, half_life = knobs.coverage_power, knobs.recency_half_life_days
    words, brief_power = knobs.brief_words, knobs.brief_power
    contributions = {
        arm: np.where(
            c.ranks[arm] > 0,
            weight
            * c.each(("coverage", arm, power), c.coverage[arm], lambda x: x**power)
            / (knobs.rrf_k + np.maximum(c.ranks[arm], 1)),
            0.0,
        )
        for arm, weight in arm_weights(knobs).items()
    }
    rrf = contributions["semantic"] + contributions["lexical"] + contributions["trigram"]
    recency = c.each(("recency", half_life), c.age_days, lambda age: 2.0 ** (-age / half_life))
    brevity = np.ones(len(c.keys))
    if counted_words(knobs):
        brevity = c.each(
            ("brevity", words, brief_power),
            c.words,
            lambda n: (min(max(n, 1), words) / words) ** brief_power,
        )
    window_weight = knobs.weight_time if c.windowed else 0.0
    lifts = (1.0 + knobs.weight_recency * recency) * (1.0 + window_weight * c.in_window)
    return Scores(contributions, rrf, recency, brevity, rrf * lifts * brevity)


def fused_order(c: Candidates, final: Floats, rrf: Floats) -> list[int]:
    """The candidates by final score (desc; ties: rrf, newer, ids)."""
    return np.lexsort((c.tie, -rrf, -final)).tolist()


@dataclass
class Ranking:
    """The kept candidates in order, and the turn each moved reply was put ahead of."""

    kept: list[int]
    answers: dict[int, int] = field(default_factory=dict)


def ranked(
    c: Candidates,
    knobs: SearchKnobs,
    final: Floats,
    rrf: Floats,
    top_k: int,
    query: str = "",
    scope: Scope = "user",
) -> Ranking:
    """The top `top_k` candidates under `knobs` given their scores: by final score, those
    below the relevance floor dropped, replies ahead of the questions `query` asks again,
    diversity over conversations, optional cap."""

    def conversation(i: int) -> str:
        return c.keys[i][0]

    order = fused_order(c, final, rrf)
    if knobs.min_score > 0:
        order = [i for i in order if c.relevance[i] >= knobs.min_score]
    answers: dict[int, int] = {}
    if knobs.answers_first:
        pool = DIVERSITY_POOL * top_k
        order = (
            replies_ahead(
                order[:pool],
                query,
                knobs.asked_coverage,
                asked=lambda i: asked_of(c.rows[i]),
                conversation=conversation,
                texts=lambda i: [row.text for row in c.rows[i].values()],
                moved=answers.__setitem__,
            )
            + order[pool:]
        )
    order = diversify(order, knobs.diversity, top_k, conversation, lambda i: float(final[i]))
    return Ranking(cap_per_conversation(order, cap_of(knobs, scope), top_k, conversation), answers)


@dataclass
class FusedTurn:
    conversation_id: str
    turn_id: str
    final: float
    rrf: float
    ts: datetime
    knobs: SearchKnobs
    rows: dict[Arm, RowHit] = field(default_factory=dict)
    ranks: dict[Arm, int] = field(default_factory=dict)
    contributions: dict[Arm, float] = field(default_factory=dict)
    age_days: float = 0.0
    recency: float = 0.0
    in_window: bool | None = None  # None: the query names no time
    brevity: float = 1.0
    answers: str | None = None  # the turn this reply was moved ahead of (answers_first)

    @property
    def best_row(self) -> RowHit:
        """The row from the arm that ranked this turn best (ties: semantic, lexical, trigram)."""
        arm = min(self.ranks, key=lambda a: (self.ranks[a], ARMS.index(a)))
        return self.rows[arm]

    @property
    def matched_targets(self) -> list[Target]:
        return list(dict.fromkeys(r.target for r in self.rows.values()))

    @cached_property
    def explain(self) -> Explain:
        """How the final score was made, built on demand: a search fuses hundreds of turns and
        explains at most its top k."""
        weights = arm_weights(self.knobs)
        arms: dict[Arm, ArmExplain] = {}
        for arm in ARMS:
            row = self.rows.get(arm)
            arms[arm] = (
                ArmExplain(weight=weights[arm])
                if row is None
                else ArmExplain(
                    rank=self.ranks[arm],
                    score=row.score,
                    weight=weights[arm],
                    coverage=row.coverage,
                    contribution=self.contributions[arm],
                    session=row.session,
                    lifted=row.lifted,
                )
            )
        return Explain(
            arms=arms,
            rrf=self.rrf,
            age_days=self.age_days,
            recency=self.recency,
            in_window=self.in_window,
            brevity=self.brevity,
            final=self.final,
            answers_turn=self.answers,
            knobs=self.knobs,
        )


def fused_turn(c: Candidates, s: Scores, knobs: SearchKnobs, i: int) -> FusedTurn:
    """Candidate `i` as a turn, with what its explain reports."""
    rows = c.rows[i]
    return FusedTurn(
        conversation_id=c.keys[i][0],
        turn_id=c.keys[i][1],
        final=float(s.final[i]),
        rrf=float(s.rrf[i]),
        ts=c.ts[i],
        knobs=knobs,
        rows=rows,
        ranks={arm: int(c.ranks[arm][i]) for arm in rows},
        contributions={arm: float(s.contributions[arm][i]) for arm in rows},
        age_days=float(c.age_days[i]),
        recency=float(s.recency[i]),
        in_window=bool(c.in_window[i]) if c.windowed else None,
        brevity=float(s.brevity[i]),
    )


def fuse(
    ranked_rows: Mapping[Arm, Sequence[RowHit]],
    knobs: SearchKnobs,
    now: datetime,
    window: tuple[datetime, datetime] | None = None,
) -> list[FusedTurn]:
    """Every candidate turn of per-arm ranked rows, ordered by final score under `knobs`
    (nothing dropped or moved: `rank_turns` does that)."""
    c = candidates(ranked_rows, now, window, counted_words(knobs))
    s = scores(c, knobs)
    return [fused_turn(c, s, knobs, i) for i in fused_order(c, s.final, s.rrf)]


def rank_turns(
    ranked_rows: Mapping[Arm, Sequence[RowHit]],
    knobs: SearchKnobs,
    now: datetime,
    top_k: int,
    window: tuple[datetime, datetime] | None = None,
    query: str = "",
    scope: Scope = "user",
) -> list[FusedTurn]:
    """The top `top_k` fused turns of a search under `knobs` (`ranked`)."""
    c = candidates(ranked_rows, now, window, counted_words(knobs))
    s = scores(c, knobs)
    ranking = ranked(c, knobs, s.final, s.rrf, top_k, query, scope)
    turns = []
    for i in ranking.kept:
        turn = fused_turn(c, s, knobs, i)
        if i in ranking.answers:
            turn.answers = c.keys[ranking.answers[i]][1]
        turns.append(turn)
    return turns


def asked_of(rows: Mapping[Arm, RowHit]) -> str:
    """The question a turn replies to: the `context` of its user row among its `rows`."""
    return next((r.context for r in rows.values() if r.target == "user" and r.context), "")


def replies_ahead(
    ranked_items: Sequence[T],
    query: str,
    share: float,
    *,
    asked: Callable[[T], str],
    conversation: Callable[[T], str],
    texts: Callable[[T], Sequence[str]],
    moved: Callable[[T, T], None] | None = None,
) -> list[T]:
    """`ranked_items` with each turn that replies to what `query` asks (its user row's
    `context`, the question it answers, holds at least `share` of the query's content stems,
    the knob `asked_coverage`) moved just ahead of the turn that asked it (ranked above it,
    same conversation, the question in one of its texts); order is otherwise kept, and scores
    are left as fused (`moved(reply, asker)` is told of each move).

    A question about what was said ("what am I majoring in?") matches the turn that asked it
    ("what are you majoring in?") as well as the reply, which carries the question as context
    (`ctxdb.record.role_rows.asked_context`); the reply holds the answer, the asking turn only
    the question. A reply whose question the query does not ask stays where it ranked (after
    "I painted a sunset, what about you?", the reply answers "what about you?", not a search
    for the painting). Measured on the three quality sets (bench/HISTORY.md)."""
    terms = QueryTerms.of(query)
    pool = list(ranked_items)
    if not terms.stems:
        return pool
    asks: dict[str, bool] = {}  # question -> whether the query asks it (stemmed once)
    for item in list(pool):
        question = asked(item)
        if not question:
            continue
        at = pool.index(item)
        # cheapest first: a turn of the same conversation above it, the query asking its
        # question, and only then the texts (every turn qualifies in conversation scope)
        above = [
            i for i, other in enumerate(pool[:at]) if conversation(other) == conversation(item)
        ]
        if not above:
            continue
        if question not in asks:
            asks[question] = stem_coverage(terms, stems(question)) >= share
        if not asks[question]:
            continue
        asker = next((i for i in above if any(question in t for t in texts(pool[i]))), None)
        if asker is not None:
            if moved is not None:
                moved(item, pool[asker])
            pool.insert(asker, pool.pop(at))
    return pool


def diversify(
    items: Sequence[T],
    diversity: float,
    top_k: int,
    conversation: Callable[[T], str],
    score: Callable[[T], float],
) -> list[T]:
    """The first `DIVERSITY_POOL x top_k` items re-ordered greedily: each pick is the next
    item, in order, of the conversation whose best remaining score times (1 - diversity) **
    (items already picked from it) is highest (ties: the earlier item). Order is kept when
    `diversity` is 0."""
    if diversity <= 0:
        return list(items)
    pool = items[: DIVERSITY_POOL * top_k]
    queues: dict[str, list[int]] = {}  # per conversation, its pool positions in order
    for i, item in enumerate(pool):
        queues.setdefault(conversation(item), []).append(i)
    picked: list[T] = []
    taken: dict[str, int] = {}
    while queues:
        # a conversation competes with the best score left in it and gives its first item in
        # order (answers_first may have put a reply, scored lower, ahead of its asking turn)
        conv = max(
            queues,
            key=lambda c: (
                max(score(pool[i]) for i in queues[c]) * (1.0 - diversity) ** taken.get(c, 0),
                -queues[c][0],
            ),
        )
        picked.append(pool[queues[conv].pop(0)])
        taken[conv] = taken.get(conv, 0) + 1
        if not queues[conv]:
            del queues[conv]
    return picked + list(items[DIVERSITY_POOL * top_k :])


def cap_per_conversation(
    items: Sequence[T], cap: int | None, top_k: int, conversation: Callable[[T], str]
) -> list[T]:
    """At most `cap` items per conversation (None: no cap), at most `top_k` in all, order kept."""
    counts: dict[str, int] = {}
    kept = []
    for item in items:
        conv = conversation(item)
        if cap is not None and counts.get(conv, 0) >= cap:
            continue
        counts[conv] = counts.get(conv, 0) + 1
        kept.append(item)
        if len(kept) >= top_k:
            break
    return kept
