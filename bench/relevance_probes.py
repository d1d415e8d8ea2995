"""Off-topic probes for the relevance floor (`min_score`, `ctxdb.search.relevance`): ten queries
about topics none of the labeled sets is about, each asked as three users of each set.

A probe's best relevance is the strongest arm signal over every turn its arms return, so under a
floor f it returns no hit when that is below f, and no hit that is not weak when it is below
`WEAK_BELOW` (whatever the floor). Together with the sets' any@10 under each floor
(`fusion_variants`, "defaults floor f"), this is what the default floor is chosen on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from search_quality_sets import QuerySet

from ctxdb.contract.identity import Principal
from ctxdb.search.coverage import with_coverage
from ctxdb.search.models import WEAK_BELOW, SearchRequest
from ctxdb.search.relevance import arm_signal
from ctxdb.search.service import SearchService

PROBES = (
    "opentelemetry",
    "rust borrow checker lifetime error",
    "configure a kafka consumer group rebalance",
    "tune a guitar to drop D",
    "terraform state lock in dynamodb",
    "replace a bicycle bottom bracket",
    "haskell monad transformer stack",
    "level the bed of a 3d printer",
    "quantum chromodynamics gluon confinement",
    "calibrate an oscilloscope probe",
)
USERS_PER_SET = 3
FLOORS = (0.0, 0.1, 0.15, 0.18, 0.2, 0.22, 0.25)


def probe_relevance(service: SearchService, qs: QuerySet, now: datetime) -> list[float]:
    """The best relevance of every probe asked as each of the set's first three users."""
    users = list(dict.fromkeys((q.user_id, q.tenant) for q in qs.queries))[:USERS_PER_SET]
    best = []
    for user_id, tenant in users:
        principal = Principal(user_id=user_id, tenant=tenant)
        for text in PROBES:
            request = SearchRequest(query=text)
            rows = service.run_arms(service.arm_bodies(principal, request, text, None, now))
            if service.embedder is not None:
                embedded = service.embedder.embed(text)
                if embedded is not None:
                    rows |= service.semantic_arm(
                        principal, request, text, embedded.values, now, model=embedded.model
                    )
            signals = (
                arm_signal(arm, row)
                for arm, hits in with_coverage(rows, text).items()
                for row in hits
            )
            best.append(max(signals, default=0.0))
    return best


def render(best: dict[str, Sequence[float]]) -> str:
    """Per floor, the probes left with no hit (per set and in all), then those left with no hit
    that is not weak."""
    every = [b for values in best.values() for b in values]
    lines = ["floor | " + " | ".join(best) + " | all (probes left with 0 hits)"]
    for floor in FLOORS:
        cells = [f"{sum(b < floor for b in values)}/{len(values)}" for values in best.values()]
        total = f"{sum(b < floor for b in every)}/{len(every)}"
        lines.append(f"{floor:.2f} | " + " | ".join(cells) + f" | {total}")
    weak = sum(b < WEAK_BELOW for b in every)
    lines.append(f"no hit that is not weak (relevance < {WEAK_BELOW}): {weak}/{len(every)}")
    return "\n".join(lines)
