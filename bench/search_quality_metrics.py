"""Turn-level ranking metrics of the search quality bench (pure functions).

For a ranked list of turns and the set R of relevant (evidence) turns:

  any@k    1 when at least one relevant turn is in the top k
  all@10   1 when every relevant turn is in the top 10
  ndcg@10  binary-gain NDCG: sum over relevant hits at rank i <= 10 of 1/log2(i+1), divided by
           the same sum for a perfect ranking (min(10, |R|) hits at the top)
  mrr      1/rank of the first relevant turn in the top 10 (0 when none)
  r@10     the generator bench's recall of issue 5: |relevant in top 10| / min(10, reachable),
           reachable counting at most 2 relevant turns per conversation (found clipped to it)

Every category weighs the same in `macro` (mean of the per-kind means); `all` is the mean over
queries.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

Key = tuple[str, str]
METRICS = ("any@5", "any@10", "any@25", "all@10", "ndcg@10", "mrr", "r@10")
LEGACY_CAP = 2


def query_metrics(ranked: Sequence[Key], relevant: frozenset[Key]) -> dict[str, float]:
    """Every metric of one query (see the module docstring)."""
    hits = [key in relevant for key in ranked]
    out = {f"any@{k}": float(any(hits[:k])) for k in (5, 10, 25)}
    out["all@10"] = float(relevant <= set(ranked[:10]))
    dcg = sum(1 / math.log2(i + 2) for i, hit in enumerate(hits[:10]) if hit)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(10, len(relevant))))
    out["ndcg@10"] = dcg / ideal
    first = next((i for i, hit in enumerate(hits[:10], start=1) if hit), None)
    out["mrr"] = 1 / first if first else 0.0
    per_conv: dict[str, int] = defaultdict(int)
    for conv, _ in relevant:
        per_conv[conv] += 1
    reachable = min(10, sum(min(n, LEGACY_CAP) for n in per_conv.values()))
    out["r@10"] = min(sum(hits[:10]), reachable) / reachable
    return out


def summarize(rows: Iterable[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per kind, `all` and `macro` means of (kind, metrics) rows; `n` is the query count."""
    by_kind: dict[str, list[dict[str, float]]] = defaultdict(list)
    for kind, metrics in rows:
        by_kind[kind].append(metrics)
    out = {
        kind: {m: statistics.fmean(r[m] for r in items) for m in METRICS} | {"n": len(items)}
        for kind, items in sorted(by_kind.items())
    }
    everything = [r for items in by_kind.values() for r in items]
    kinds = list(out)
    out["all"] = {m: statistics.fmean(r[m] for r in everything) for m in METRICS} | {
        "n": len(everything)
    }
    out["macro"] = {m: statistics.fmean(out[k][m] for k in kinds) for m in METRICS} | {
        "n": len(everything)
    }
    return out
