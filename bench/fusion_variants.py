"""Fusion variants scored offline on the cached arm rows of every set (issue 29).

Each variant ranks one query's candidate turns (`Prepared`, built by `bench_search_quality`)
into a top 25; `compare` scores every variant on every set and `learned` cross-validates a
logistic combination leaving one set out (fitted on the others, never on the set it is scored
on).

  rrf(k, w)        sum of w_arm / (k + rank_arm), nothing else
  defaults         the service's fusion under its default knobs, tweaked one knob at a time
  minmax / z       convex combination of per-arm scores normalised over the arm's returned turns
                   (min-max to [0, 1], or z-scores), an absent turn scoring the arm's minimum
  (every variant drops the turns below the service's relevance floor, as the service does, and
  with `answers_first` moves replies ahead of their asking turns as the service does)
  floor f          the defaults with another relevance floor (`min_score`)
  mmr(d)           any base score, then greedy selection in which each turn already taken from
                   a conversation multiplies the next one's score by (1 - d): diversity over
                   conversations
  learned          logistic regression on per-arm features (1 / (k + rank) at k 5 and 60,
                   min-max score, present, coverage) plus the time-window flag
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from search_quality_metrics import query_metrics, summarize

from ctxdb.search.fusion import ranked
from ctxdb.search.models import ARMS
from ctxdb.settings.search import SearchKnobs

Key = tuple[str, str]
TOP = 25
ORDER = SearchKnobs(cap_user_scope=False)
"""What `order` takes of the knobs beside a variant's score: floor, reorder, diversity, no cap."""


@dataclass(frozen=True)
class Variant:
    name: str
    score: Callable[[object], np.ndarray]  # Prepared -> one score per candidate turn
    diversity: float = 0.0
    floor: float | None = None  # the relevance floor (None: the service's default)


def order(
    p,
    score: np.ndarray,
    diversity: float = 0.0,
    top: int = TOP,
    replies_first: bool = False,
    floor: float | None = None,
) -> list[Key]:
    """The top turns by a variant's score (ties: most recent first), ordered by the service's
    own code (`ctxdb.search.fusion.ranked`): the turns below the relevance floor (`floor`, or
    the service's default) dropped, replies ahead of their asking turns with `replies_first`,
    then with `diversity` d > 0 the greedy selection over conversations."""
    if not p.keys:
        return []
    knobs = ORDER.model_copy(
        update={
            "min_score": p.floor if floor is None else floor,
            "answers_first": replies_first,
            "diversity": diversity,
        }
    )
    kept = ranked(p, knobs, score, np.zeros(len(p.keys)), top, p.query, p.scope).kept
    return [p.keys[i] for i in kept]


def rrf(k: float, weights: Sequence[float] = (1.0, 1.0, 1.0)) -> Callable:
    def score(p) -> np.ndarray:
        total = np.zeros(len(p.keys))
        for arm, w in zip(ARMS, weights, strict=True):
            r = p.ranks[arm]
            total += np.where(r > 0, w / (k + np.maximum(r, 1)), 0.0)
        return total

    return score


def normalised(p, arm: str, how: str) -> np.ndarray:
    """The arm's score of each candidate normalised over the turns the arm returned; a turn the
    arm did not return gets the arm's minimum (0 after min-max)."""
    s, present = p.scores[arm], p.ranks[arm] > 0
    if not present.any():
        return np.zeros(len(p.keys))
    got = s[present]
    if how == "minmax":
        lo, hi = got.min(), got.max()
        out = (s - lo) / (hi - lo) if hi > lo else np.ones(len(s))
        return np.where(present, out, 0.0)
    mean, std = got.mean(), got.std() or 1.0
    z = (s - mean) / std
    return np.where(present, z, (got.min() - mean) / std)


def convex(how: str, weights: Sequence[float]) -> Callable:
    def score(p) -> np.ndarray:
        return sum(w * normalised(p, arm, how) for arm, w in zip(ARMS, weights, strict=True))

    return score


def features(p) -> np.ndarray:
    """Per candidate: for each arm 1/(5 + rank), 1/(60 + rank), min-max score, present,
    coverage; then the time-window flag."""
    cols = []
    for arm in ARMS:
        r = p.ranks[arm]
        present = r > 0
        cols += [
            np.where(present, 1 / (5 + np.maximum(r, 1)), 0.0),
            np.where(present, 1 / (60 + np.maximum(r, 1)), 0.0),
            normalised(p, arm, "minmax"),
            present.astype(float),
            np.where(present, p.coverage[arm], 0.0),
        ]
    cols.append(p.in_window.astype(float))
    return np.stack(cols, axis=1) if p.keys else np.zeros((0, len(cols)))


def fit_learned(prepared: Sequence) -> Callable:
    """A logistic regression on `features` of every candidate of `prepared` (label: relevant);
    returns a scorer."""
    from sklearn.linear_model import LogisticRegression

    xs, ys = [], []
    for p in prepared:
        if p.keys:
            xs.append(features(p))
            ys.append(np.array([k in p.relevant for k in p.keys], dtype=int))
    model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    model.fit(np.concatenate(xs), np.concatenate(ys))

    def score(p) -> np.ndarray:
        return model.decision_function(features(p)) if p.keys else np.zeros(0)

    score.coef = model.coef_  # type: ignore[attr-defined]
    return score


def evaluate(
    prepared: Sequence,
    score: Callable,
    diversity: float = 0.0,
    replies_first: bool = False,
    floor: float | None = None,
) -> dict:
    return summarize(
        (
            p.kind,
            query_metrics(
                order(p, score(p), diversity, replies_first=replies_first, floor=floor),
                p.relevant,
            ),
        )
        for p in prepared
    )


def headline(summary: dict) -> dict[str, float]:
    """any@5, any@10, any@25, all@10, NDCG@10 over all queries, and the macro objective."""
    a = summary["all"]
    out = {m: round(a[m], 3) for m in ("any@5", "any@10", "any@25", "all@10", "ndcg@10")}
    out["J"] = round((summary["macro"]["any@10"] + summary["macro"]["ndcg@10"]) / 2, 4)
    return out


def variants(default_score: Callable, tweak: Callable | None = None) -> list[Variant]:
    """Every fixed variant compared (the learned one is fitted per held-out set); `tweak(**kw)`
    makes the defaults' scorer with some knobs changed."""
    out = [Variant("defaults", default_score)]
    if tweak is not None:
        for k in (3, 10, 20, 60):
            out.append(Variant(f"defaults k={k}", tweak(rrf_k=k)))
        out.append(Variant("defaults coverage 0", tweak(coverage_power=0.0)))
        out.append(Variant("defaults coverage 1", tweak(coverage_power=1.0)))
        out.append(Variant("defaults recency 0", tweak(weight_recency=0.0)))
        out.append(Variant("defaults time 0", tweak(weight_time=0.0)))
        out.append(Variant("defaults k=60 coverage 0", tweak(rrf_k=60, coverage_power=0.0)))
    for floor in (0.0, 0.1, 0.15, 0.18, 0.22, 0.25):
        out.append(Variant(f"defaults floor {floor}", default_score, floor=floor))
    out += [Variant(f"rrf k={k}", rrf(k)) for k in (1, 2, 3, 5, 10, 20, 30, 60, 100, 200)]
    for sem in (0.5, 0.75):
        for k in (5, 20, 60):
            out.append(Variant(f"rrf k={k} w={sem}/1/1", rrf(k, (sem, 1.0, 1.0))))
    for k in (5, 20, 60):
        out.append(Variant(f"rrf k={k} w=1/0.5/1", rrf(k, (1.0, 0.5, 1.0))))
        out.append(Variant(f"rrf k={k} w=1/1/0.5", rrf(k, (1.0, 1.0, 0.5))))
    for how in ("minmax", "z"):
        for w in ((1, 1, 1), (0.5, 1, 1), (1, 0.5, 0.5), (0.75, 1, 1), (1, 1, 0.5)):
            out.append(Variant(f"{how} w={w[0]}/{w[1]}/{w[2]}", convex(how, w)))
    for d in (0.1, 0.2, 0.3, 0.5):
        out.append(Variant(f"defaults + mmr {d}", default_score, d))
        out.append(Variant(f"rrf k=60 + mmr {d}", rrf(60), d))
    return out


def compare(
    prepared: dict[str, Sequence],
    default_score: Callable,
    tweak: Callable | None = None,
    replies_first: bool = False,
) -> list[dict]:
    """Every variant on every set, plus the learned combination fitted on the other sets; with
    `replies_first` every variant's order gets the service's `answers_first` reorder."""
    rows = []
    for v in variants(default_score, tweak):
        rows.append(
            {"variant": v.name}
            | {
                name: headline(evaluate(preps, v.score, v.diversity, replies_first, v.floor))
                for name, preps in prepared.items()
            }
        )
    if len(prepared) > 1:
        row: dict = {"variant": "learned (leave one set out)"}
        for held in prepared:
            train = [p for name, preps in prepared.items() if name != held for p in preps]
            learned = fit_learned(train)
            row[held] = headline(evaluate(prepared[held], learned, replies_first=replies_first))
        rows.append(row)
    return rows


def render(rows: list[dict], sets: Sequence[str]) -> str:
    cols = ("any@5", "any@10", "any@25", "all@10", "ndcg@10")
    head = f"{'variant':<28}" + "".join(f" | {s}: " + "/".join(cols) + " J" for s in sets)
    lines = [head]
    for row in rows:
        cells = [" ".join(f"{row[s][c]:.3f}" for c in cols) + f" {row[s]['J']:.4f}" for s in sets]
        lines.append(f"{row['variant']:<28} | " + " | ".join(cells))
    return "\n".join(lines)
