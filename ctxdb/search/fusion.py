"""Reciprocal-rank fusion of the three arms, then the recency lift (pure arithmetic, no I/O).

    rrf   = w_sem / (k + r_sem) + w_lex / (k + r_lex) + w_lex / (k + r_trgm)     (k = 60, r 1-based)
    rec   = 2 ** (-age_days / half_life_days)                                    (half-life 7 days)
    final = rrf * (1 + w_rec * rec)

An arm that did not return the turn contributes 0. Each arm is deduplicated to its best row per
(conversation, turn) before ranks are assigned, so several rows of one turn never crowd out others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ctxdb.search.arms import RowHit
from ctxdb.search.models import ARMS, Arm, ArmExplain, Explain, Target

RRF_K = 60
WEIGHT_MIN, WEIGHT_MAX = 0.0, 2.0


def clamp_weight(value: float) -> float:
    return min(WEIGHT_MAX, max(WEIGHT_MIN, float(value)))


def arm_weights(semantic: float, lexical: float) -> dict[Arm, float]:
    """Semantic weight on the kNN arm, lexical weight on both text arms, clamped to [0, 2]."""
    sem, lex = clamp_weight(semantic), clamp_weight(lexical)
    return {"semantic": sem, "lexical": lex, "trigram": lex}


def recency_factor(ts: datetime, now: datetime, half_life_days: float) -> tuple[float, float]:
    """(age in days, 2 ** (-age / half_life)); future timestamps count as age 0."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be positive")
    age = max(0.0, (now - ts).total_seconds() / 86400.0)
    return age, 2.0 ** (-age / half_life_days)


def dedup_turns(rows: Iterable[RowHit]) -> list[RowHit]:
    """Keep the first (best-ranked) row of each (conversation, turn), preserving order."""
    seen: dict[tuple[str, str], RowHit] = {}
    for row in rows:
        seen.setdefault(row.key, row)
    return list(seen.values())


@dataclass
class FusedTurn:
    conversation_id: str
    turn_id: str
    final: float
    rrf: float
    ts: datetime
    rows: dict[Arm, RowHit] = field(default_factory=dict)
    ranks: dict[Arm, int] = field(default_factory=dict)
    explain: Explain | None = None

    @property
    def best_row(self) -> RowHit:
        """The row from the arm that ranked this turn best (ties: semantic, lexical, trigram)."""
        arm = min(self.ranks, key=lambda a: (self.ranks[a], ARMS.index(a)))
        return self.rows[arm]

    @property
    def matched_targets(self) -> list[Target]:
        return list(dict.fromkeys(r.target for r in self.rows.values()))


def fuse(
    ranked: Mapping[Arm, Sequence[RowHit]],
    *,
    weights: Mapping[Arm, float],
    recency_weight: float,
    half_life_days: float,
    now: datetime,
    rrf_k: int = RRF_K,
) -> list[FusedTurn]:
    """Fuse per-arm ranked rows into turns ordered by final score (desc), with explain."""
    w_rec = clamp_weight(recency_weight)
    per_turn: dict[tuple[str, str], dict[Arm, tuple[int, RowHit]]] = {}
    for arm in ARMS:
        for rank, row in enumerate(dedup_turns(ranked.get(arm, ())), start=1):
            per_turn.setdefault(row.key, {})[arm] = (rank, row)
    fused = []
    for (conv, turn), hits in per_turn.items():
        arms_explain: dict[Arm, ArmExplain] = {}
        rrf = 0.0
        for arm in ARMS:
            weight = clamp_weight(weights.get(arm, 0.0))
            if arm in hits:
                rank, row = hits[arm]
                contribution = weight / (rrf_k + rank)
                rrf += contribution
                arms_explain[arm] = ArmExplain(
                    rank=rank, score=row.score, weight=weight, contribution=contribution
                )
            else:
                arms_explain[arm] = ArmExplain(weight=weight)
        ts = max(row.ts for _, row in hits.values())
        age, rec = recency_factor(ts, now, half_life_days)
        final = rrf * (1.0 + w_rec * rec)
        explain = Explain(
            arms=arms_explain,
            rrf=rrf,
            age_days=age,
            recency=rec,
            recency_weight=w_rec,
            half_life_days=half_life_days,
            final=final,
        )
        fused.append(
            FusedTurn(
                conversation_id=conv,
                turn_id=turn,
                final=final,
                rrf=rrf,
                ts=ts,
                rows={arm: row for arm, (_, row) in hits.items()},
                ranks={arm: rank for arm, (rank, _) in hits.items()},
                explain=explain,
            )
        )
    fused.sort(key=lambda f: (-f.final, -f.rrf, -f.ts.timestamp(), f.conversation_id, f.turn_id))
    return fused


def cap_per_conversation(fused: Sequence[FusedTurn], cap: int, top_k: int) -> list[FusedTurn]:
    """At most `cap` turns per conversation, at most `top_k` in all, order kept."""
    counts: dict[str, int] = {}
    kept = []
    for turn in fused:
        if counts.get(turn.conversation_id, 0) >= cap:
            continue
        counts[turn.conversation_id] = counts.get(turn.conversation_id, 0) + 1
        kept.append(turn)
        if len(kept) >= top_k:
            break
    return kept
