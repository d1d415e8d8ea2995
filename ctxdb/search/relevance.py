"""The relevance floor: how strongly a fused turn matches its query, on a scale that means the
same for every query (fused scores do not: RRF sees only ranks, so the top turn of a search for
a topic the memory never mentions scores like the top turn of a good match).

A turn's relevance is its strongest arm signal, over the arms that returned it:

    semantic  cosine similarity of the query (or of the compound question's part that found
              the row) and the turn's best kNN row
              (Elasticsearch's cosine `_score` is (1 + cos) / 2)
    lexical   share of the query's content stems in the row (`coverage.py`)
    trigram   (share of the query's padded trigrams in the row) ** 2: the arm returns rows holding
              40% of them, which a long row reaches by chance, so only a high share counts

A turn below the knob `min_score` (default 0.15) is dropped before the top k is
chosen; a kept turn below `models.WEAK_BELOW` is marked weak. Both were chosen on the labeled
bench sets and on queries about topics none of them mention (docs/search-api.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from ctxdb.search.arms import RowHit
from ctxdb.search.models import WEAK_BELOW, Arm

TRIGRAM_POWER = 2.0


def cosine_of(es_score: float) -> float:
    """The cosine similarity behind Elasticsearch's cosine `_score` ((1 + cos) / 2)."""
    return 2.0 * es_score - 1.0


def arm_signal(arm: Arm, row: RowHit) -> float:
    """The signal of one arm's row on the shared 0..1 scale (a negative cosine counts 0)."""
    if arm == "semantic":
        return max(0.0, cosine_of(row.score))
    if arm == "trigram":
        return row.coverage**TRIGRAM_POWER
    return row.coverage


def relevance(rows: Mapping[Arm, RowHit]) -> float:
    """A turn's relevance: its strongest arm signal (0 when no arm returned it)."""
    return max((arm_signal(arm, row) for arm, row in rows.items()), default=0.0)


def is_weak(score: float) -> bool:
    """Whether a kept turn's relevance is low enough to flag the hit as a weak match."""
    return score < WEAK_BELOW
