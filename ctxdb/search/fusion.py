"""Reciprocal-rank fusion of the three arms, then the recency, time and brevity factors (pure
arithmetic, no I/O).

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
of one turn never crowd out others. An optional per-conversation cap then keeps at most `cap`
turns of one conversation.

Diversity over conversations (`diversity` d in [0, 1), 0: off) picks the top k greedily, each turn
already picked from a conversation scaling the final score of that conversation's next turn by
(1 - d): a soft cap, a maximal-marginal-relevance selection whose similarity is "same
conversation".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TypeVar

from ctxdb.search.arms import RowHit
from ctxdb.search.coverage import QueryTerms, stem_coverage
from ctxdb.search.models import ARMS, Arm, ArmExplain, Explain, Target
from ctxdb.search.relevance import relevance
from ctxdb.text import content_words, stems

RRF_K = 60
WEIGHT_MIN, WEIGHT_MAX = 0.0, 2.0


def clamp_weight(value: float) -> float:
    return min(WEIGHT_MAX, max(WEIGHT_MIN, float(value)))


def arm_weights(semantic: float, lexical: float, trigram: float | None = None) -> dict[Arm, float]:
    """The weight of each arm, clamped to [0, 2]; the trigram arm takes the lexical weight
    when it has none of its own."""
    sem, lex = clamp_weight(semantic), clamp_weight(lexical)
    return {
        "semantic": sem,
        "lexical": lex,
        "trigram": lex if trigram is None else clamp_weight(trigram),
    }


def recency_factor(ts: datetime, now: datetime, half_life_days: float) -> tuple[float, float]:
    """(age in days, 2 ** (-age / half_life)); future timestamps count as age 0."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be positive")
    age = max(0.0, (now - ts).total_seconds() / 86400.0)
    return age, 2.0 ** (-age / half_life_days)


def brevity(rows: Iterable[RowHit], brief_words: int, brief_power: float) -> float:
    """min(1, n / brief_words) ** brief_power, n the distinct content words of the longest of
    `rows` (its text and anchors; at least 1); 1 when off. Only the longest is counted: search
    scales every candidate turn."""
    if brief_power <= 0 or brief_words <= 1:
        return 1.0
    n = content_words(max((counted(row) for row in rows), key=len), brief_words)
    return (max(n, 1) / brief_words) ** brief_power


def counted(row: RowHit) -> str:
    """What `brevity` counts of a row: its text and its retrieval anchors."""
    return f"{row.text} {row.anchors_text}" if row.anchors_text else row.text


def dedup_turns(rows: Iterable[RowHit]) -> list[RowHit]:
    """Keep the first (best-ranked) row of each (conversation, turn), preserving order."""
    seen: dict[tuple[str, str], RowHit] = {}
    for row in rows:
        seen.setdefault(row.key, row)
    return list(seen.values())


@dataclass(frozen=True)
class FusionTerms:
    """The terms of one fusion shared by all its turns (what explain reports beside the ranks)."""

    weights: Mapping[Arm, float]  # clamped, one per arm
    recency_weight: float
    half_life_days: float
    window_weight: float
    windowed: bool
    coverage_power: float
    brief_words: int = 0
    brief_power: float = 0.0


@dataclass
class FusedTurn:
    conversation_id: str
    turn_id: str
    final: float
    rrf: float
    ts: datetime
    rows: dict[Arm, RowHit] = field(default_factory=dict)
    ranks: dict[Arm, int] = field(default_factory=dict)
    contributions: dict[Arm, float] = field(default_factory=dict)
    age_days: float = 0.0
    recency: float = 0.0
    in_window: bool = False
    brevity: float = 1.0
    terms: FusionTerms | None = None
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
    def explain(self) -> Explain | None:
        """How the final score was made, built on demand: a search fuses hundreds of turns and
        explains at most its top k."""
        t = self.terms
        if t is None:
            return None
        arms: dict[Arm, ArmExplain] = {}
        for arm in ARMS:
            weight = t.weights[arm]
            row = self.rows.get(arm)
            arms[arm] = (
                ArmExplain(weight=weight)
                if row is None
                else ArmExplain(
                    rank=self.ranks[arm],
                    score=row.score,
                    weight=weight,
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
            recency_weight=t.recency_weight,
            half_life_days=t.half_life_days,
            in_window=self.in_window if t.windowed else None,
            window_weight=t.window_weight,
            coverage_power=t.coverage_power,
            brevity=self.brevity,
            brief_words=t.brief_words,
            brief_power=t.brief_power,
            final=self.final,
            answers_turn=self.answers,
        )


def fuse(
    ranked: Mapping[Arm, Sequence[RowHit]],
    *,
    weights: Mapping[Arm, float],
    recency_weight: float,
    half_life_days: float,
    now: datetime,
    rrf_k: int = RRF_K,
    window: tuple[datetime, datetime] | None = None,
    window_weight: float = 0.0,
    coverage_power: float = 0.0,
    brief_words: int = 0,
    brief_power: float = 0.0,
) -> list[FusedTurn]:
    """Fuse per-arm ranked rows into turns ordered by final score (desc), with explain; turns
    inside `window` (start inclusive, end exclusive) are lifted by `window_weight`, each row's
    contribution is scaled by its query coverage to the power `coverage_power`, and brief turns
    are scaled down (`brevity`)."""
    w_rec = clamp_weight(recency_weight)
    w_win = clamp_weight(window_weight) if window is not None else 0.0
    per_turn: dict[tuple[str, str], dict[Arm, tuple[int, RowHit]]] = {}
    for arm in ARMS:
        for rank, row in enumerate(dedup_turns(ranked.get(arm, ())), start=1):
            per_turn.setdefault(row.key, {})[arm] = (rank, row)
    arm_weight = {arm: clamp_weight(weights.get(arm, 0.0)) for arm in ARMS}
    terms = FusionTerms(
        weights=arm_weight,
        recency_weight=w_rec,
        half_life_days=half_life_days,
        window_weight=w_win,
        windowed=window is not None,
        coverage_power=coverage_power,
        brief_words=brief_words,
        brief_power=brief_power,
    )
    fused = [
        _fused_turn(key, hits, terms, now=now, rrf_k=rrf_k, window=window)
        for key, hits in per_turn.items()
    ]
    fused.sort(key=lambda f: (-f.final, -f.rrf, -f.ts.timestamp(), f.conversation_id, f.turn_id))
    return fused


def _fused_turn(
    key: tuple[str, str],
    hits: Mapping[Arm, tuple[int, RowHit]],
    terms: FusionTerms,
    *,
    now: datetime,
    rrf_k: int,
    window: tuple[datetime, datetime] | None,
) -> FusedTurn:
    """One turn's fused score from its (rank, row) in each arm that returned it (`fuse`)."""
    contributions = {
        arm: terms.weights[arm] * row.coverage**terms.coverage_power / (rrf_k + rank)
        for arm, (rank, row) in hits.items()
    }
    rrf = sum(contributions.values())  # hits, and so the sum, run in ARMS order
    ts = max(row.ts for _, row in hits.values())
    age, rec = recency_factor(ts, now, terms.half_life_days)
    inside = window is not None and window[0] <= ts < window[1]
    brief = brevity([row for _, row in hits.values()], terms.brief_words, terms.brief_power)
    lifts = (1.0 + terms.recency_weight * rec) * (1.0 + terms.window_weight * inside)
    return FusedTurn(
        conversation_id=key[0],
        turn_id=key[1],
        final=rrf * lifts * brief,
        rrf=rrf,
        ts=ts,
        rows={arm: row for arm, (_, row) in hits.items()},
        ranks={arm: rank for arm, (rank, _) in hits.items()},
        contributions=contributions,
        age_days=age,
        recency=rec,
        in_window=inside,
        brevity=brief,
        terms=terms,
    )


DIVERSITY_POOL = 4  # the greedy selection looks this many times top_k deep


def asked_of(turn: FusedTurn) -> str:
    """The question the turn replies to: the `context` of its user row among its rows."""
    return next((r.context for r in turn.rows.values() if r.target == "user" and r.context), "")


T = TypeVar("T")
ASKED_COVERAGE = 0.5
"""Share of the query's content stems the asked question must hold for its reply to move."""


def answers_first(fused: Sequence[FusedTurn], top_k: int, query: str) -> list[FusedTurn]:
    """Among the first `DIVERSITY_POOL x top_k` turns, each turn that replies to what the query
    asks (its user row's `context`, the question it answers, holds at least `ASKED_COVERAGE` of
    the query's content stems) moves just ahead of the turn that asked it (ranked above it, same
    conversation, the question in one of its rows); order is otherwise kept, and final scores
    are left as fused.

    A question about what was said ("what am I majoring in?") matches the turn that asked it
    ("what are you majoring in?") as well as the reply, which carries the question as context
    (`ctxdb.record.role_rows.asked_context`); the reply holds the answer, the asking turn only
    the question. A reply whose question the query does not ask stays where it ranked (after
    "I painted a sunset, what about you?", the reply answers "what about you?", not a search
    for the painting). Measured on the three quality sets (bench/README.md)."""

    def moved(reply: FusedTurn, asker: FusedTurn) -> None:
        reply.answers = asker.turn_id

    pool = replies_ahead(
        fused[: DIVERSITY_POOL * top_k],
        query,
        asked=asked_of,
        conversation=lambda turn: turn.conversation_id,
        texts=lambda turn: [row.text for row in turn.rows.values()],
        moved=moved,
    )
    return pool + list(fused[DIVERSITY_POOL * top_k :])


def replies_ahead(
    ranked: Sequence[T],
    query: str,
    *,
    asked: Callable[[T], str],
    conversation: Callable[[T], str],
    texts: Callable[[T], Sequence[str]],
    moved: Callable[[T, T], None] | None = None,
) -> list[T]:
    """`ranked` with each reply to what `query` asks moved just ahead of its asking item
    (`answers_first`; `moved(reply, asker)` is told of each move); items are read through the
    accessors, so the quality bench's offline fusion reorders its turn keys with this very
    code."""
    terms = QueryTerms.of(query)
    pool = list(ranked)
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
            asks[question] = stem_coverage(terms, stems(question)) >= ASKED_COVERAGE
        if not asks[question]:
            continue
        asker = next((i for i in above if any(question in t for t in texts(pool[i]))), None)
        if asker is not None:
            if moved is not None:
                moved(item, pool[asker])
            pool.insert(asker, pool.pop(at))
    return pool


def diversify(fused: Sequence[FusedTurn], diversity: float, top_k: int) -> list[FusedTurn]:
    """The first `DIVERSITY_POOL x top_k` turns re-ordered greedily: each pick is the next turn,
    in order, of the conversation whose best remaining final score times (1 - diversity) **
    (turns already picked from it) is highest (ties: the earlier turn). Order is kept when
    `diversity` is 0."""
    if diversity <= 0:
        return list(fused)
    pool = fused[: DIVERSITY_POOL * top_k]
    queues: dict[str, list[int]] = {}  # per conversation, its pool positions in fused order
    for i, turn in enumerate(pool):
        queues.setdefault(turn.conversation_id, []).append(i)
    picked: list[FusedTurn] = []
    taken: dict[str, int] = {}
    while queues:
        # a conversation competes with the best score left in it and gives its first turn in
        # order (answers_first may have put a reply, scored lower, ahead of its asking turn)
        conv = max(
            queues,
            key=lambda c: (
                max(pool[i].final for i in queues[c]) * (1.0 - diversity) ** taken.get(c, 0),
                -queues[c][0],
            ),
        )
        picked.append(pool[queues[conv].pop(0)])
        taken[conv] = taken.get(conv, 0) + 1
        if not queues[conv]:
            del queues[conv]
    return picked + list(fused[DIVERSITY_POOL * top_k :])


def cap_per_conversation(
    fused: Sequence[FusedTurn], cap: int | None, top_k: int
) -> list[FusedTurn]:
    """At most `cap` turns per conversation (None: no cap), at most `top_k` in all, order kept."""
    counts: dict[str, int] = {}
    kept = []
    for turn in fused:
        if cap is not None and counts.get(turn.conversation_id, 0) >= cap:
            continue
        counts[turn.conversation_id] = counts.get(turn.conversation_id, 0) + 1
        kept.append(turn)
        if len(kept) >= top_k:
            break
    return kept


@dataclass(frozen=True)
class FusionParams:
    """Every knob of the fusion, resolved from the request and the settings."""

    weights: dict[Arm, float]
    recency_weight: float
    half_life_days: float
    cap: int | None
    rrf_k: int = RRF_K
    window_weight: float = 0.0
    coverage_power: float = 0.0
    brief_words: int = 0
    brief_power: float = 0.0
    diversity: float = 0.0
    min_score: float = 0.0  # relevance floor (relevance.py); 0: keep every turn
    answers_first: bool = False


def rank_turns(
    ranked: Mapping[Arm, Sequence[RowHit]],
    params: FusionParams,
    now: datetime,
    top_k: int,
    window: tuple[datetime, datetime] | None = None,
    query: str = "",
) -> list[FusedTurn]:
    """The top `top_k` fused turns under `params` (fusion, recency and window lifts, turns
    below the relevance floor dropped, replies ahead of the questions `query` asks again,
    diversity over conversations, optional cap)."""
    fused = fuse(
        ranked,
        weights=params.weights,
        recency_weight=params.recency_weight,
        half_life_days=params.half_life_days,
        now=now,
        rrf_k=params.rrf_k,
        window=window,
        window_weight=params.window_weight,
        coverage_power=params.coverage_power,
        brief_words=params.brief_words,
        brief_power=params.brief_power,
    )
    if params.min_score > 0:
        fused = [turn for turn in fused if relevance(turn.rows) >= params.min_score]
    if params.answers_first:
        fused = answers_first(fused, top_k, query)
    return cap_per_conversation(diversify(fused, params.diversity, top_k), params.cap, top_k)
