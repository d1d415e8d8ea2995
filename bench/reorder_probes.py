"""Reorders of the fused candidates, probed on every set (issue 29, eighth pass).

Putting the relevant turns of the fused top 25 first would lift REALTALK's NDCG@10 from .565 to
.859: the candidates are there, their order is the gap. Each probe asks whether a signal the
shipped components already hold gives a better order, scored offline on the cached arm rows
(`bench_search_quality`) against the defaults:

  turn words   brevity counting the turn's longest role row (every row of the turn, read from
               `role_rows`) instead of its longest matched row
  lexical prf  RM3-like feedback: the stems of the top m fused turns, weighted by their score
               and their idf among the candidates, lift each candidate holding them by
               (1 + g x the share of that weight it holds)
  vector prf   Rocchio feedback: the query vector plus b x the mean best-row vector of the top
               m turns ranks every candidate for the semantic arm (vectors read from
               Elasticsearch; "exact" is the query vector alone, no feedback)
  boosted      gradient-boosted trees on per-candidate features (`fusion_variants.features`,
               the fused score and rank, content words, recency, question rows, arms matched),
               fitted on the other sets (the two chitchat sets never train each other) and
               scored on the held-out one

None was adopted (bench/HISTORY.md, eighth pass); the script stays so each can be measured again
on another set. Run: `.venv/bin/python bench/reorder_probes.py --prefix-suffix -ctx`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated

import fusion_variants as fv
import numpy as np
import typer
from bench_search_quality import (
    SETS,
    Collected,
    Prepared,
    build_memory,
    collected_rows,
    fused_scores,
    prepare,
    suffixed,
)
from elasticsearch import helpers

from ctxdb.embedding.backends import make_embedder
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.search.models import ARMS, SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import Settings, get_settings
from ctxdb.settings.search import BRIEF_WORDS_MAX, SearchKnobs
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS
from ctxdb.text import content_words, stems

Key = tuple[str, str]
Scorer = Callable[[Prepared], np.ndarray]


class Probe:
    """One set's prepared queries with what the probes read beside them: each turn's word
    count, each row's vector, each query's vector and each candidate's stems."""

    def __init__(
        self,
        preps: list[Prepared],
        cfg: SearchKnobs,
        turn_words: dict[Key, int],
        vectors: dict[Key, np.ndarray],
        queries: list[np.ndarray],
    ) -> None:
        self.preps, self.cfg, self.turn_words = preps, cfg, turn_words
        self.vectors, self.queries = vectors, queries
        self.stemsets: list[list[frozenset[str]]] = [
            [frozenset(stems(" ".join(p.texts[k])).split()) for k in p.keys] for p in preps
        ]
        self._at = {id(p): n for n, p in enumerate(preps)}

    def at(self, p: Prepared) -> int:
        """The position of `p` among this set's queries."""
        return self._at[id(p)]


def turn_words(settings: Settings) -> dict[Key, int]:
    """The content words of each turn's longest role row (text and anchors), as brevity counts."""
    rows = DeltaStore.from_settings(settings).scan(ROLE_ROWS)
    rows = rows.select("conversation_id", "turn_id", "text", "anchors_text").collect()
    out: dict[Key, int] = {}
    for conv, turn, text, anchors in rows.iter_rows():
        n = content_words(f"{text} {anchors}" if anchors else text, BRIEF_WORDS_MAX)
        out[(conv, turn)] = max(out.get((conv, turn), 0), n)
    return out


def row_vectors(settings: Settings) -> dict[Key, np.ndarray]:
    """Every embedded role row's vector, stacked per turn (`_source` leaves vectors out unless
    asked)."""
    client = make_client(settings)
    index = alias_name(settings.elasticsearch.index_prefix, ROWS)
    source = {"exclude_vectors": False, "includes": ["conversation_id", "turn_id", "embedding"]}
    per: dict[Key, list[list[float]]] = {}
    for hit in helpers.scan(client, index=index, query={"_source": source}):
        s = hit["_source"]
        if "embedding" in s:
            per.setdefault((s["conversation_id"], s["turn_id"]), []).append(s["embedding"])
    return {k: np.asarray(v, dtype=np.float32) for k, v in per.items()}


def with_turn_words(probe: Probe, brief_words: int, brief_power: float) -> Scorer:
    cfg = probe.cfg.model_copy(update={"brief_words": brief_words, "brief_power": brief_power})

    def score(p: Prepared) -> np.ndarray:
        words = np.array([probe.turn_words.get(k, 0) for k in p.keys], dtype=float)
        return fused_scores(replace(p, words=words), cfg)

    return score


def lexical_prf(probe: Probe, m: int, terms: int, gain: float) -> Scorer:
    def score(p: Prepared) -> np.ndarray:
        s = fused_scores(p, probe.cfg)
        if len(s) < 3:
            return s
        sets = probe.stemsets[probe.at(p)]
        asked = frozenset(stems(p.query).split())
        df = Counter(t for held in sets for t in held)
        weight: dict[str, float] = {}
        top = np.argsort(-s)[:m]
        for i in top:
            for t in sets[i] - asked:
                if df[t] > 1:
                    weight[t] = weight.get(t, 0.0) + s[i] / s[top[0]] * math.log(len(s) / df[t])
        kept = dict(sorted(weight.items(), key=lambda tw: (-tw[1], tw[0]))[:terms])
        total = sum(kept.values()) or 1.0
        share = np.array([sum(w for t, w in kept.items() if t in held) / total for held in sets])
        return s * (1 + gain * share)

    return score


def vector_prf(probe: Probe, m: int, b: float) -> Scorer:
    def score(p: Prepared) -> np.ndarray:
        if len(p.keys) < 2:
            return fused_scores(p, probe.cfg)
        q = probe.queries[probe.at(p)]
        none = np.zeros((1, len(q)), dtype=np.float32)  # a turn with no embedded row
        rows = [probe.vectors.get(k, none) for k in p.keys]
        if m:
            top = np.argsort(-fused_scores(p, probe.cfg))[:m]
            mean = np.mean([rows[i][int(np.argmax(rows[i] @ q))] for i in top], axis=0)
            q = q + b * mean
            q = q / np.linalg.norm(q)
        cos = np.array([float((r @ q).max()) for r in rows])
        rank = np.empty(len(cos))
        rank[np.argsort(-cos)] = np.arange(1, len(cos) + 1)
        return fused_scores(replace(p, ranks={**p.ranks, "semantic": rank}), probe.cfg)

    return score


def features(p: Prepared, cfg: SearchKnobs) -> np.ndarray:
    """`fusion_variants.features` plus the fused score and rank, content words, recency, a
    question among the matched rows and the arms matched."""
    s = fused_scores(p, cfg)
    rank = np.empty(len(s))
    rank[np.argsort(-s)] = np.arange(1, len(s) + 1)
    question = [any(t.rstrip().endswith("?") for t in p.texts[k]) for k in p.keys]
    extra = [
        np.log(s + 1e-9),
        s / s.max(),
        1 / (rank + 5),
        np.minimum(p.words, 50),
        2.0 ** (-p.age_days / cfg.recency_half_life_days),
        np.array(question, dtype=float),
        sum((p.ranks[a] > 0).astype(float) for a in ARMS),
    ]
    return np.concatenate([fv.features(p), np.stack(extra, axis=1)], axis=1)


def boosted(probes: dict[str, Probe], held: str) -> Scorer:
    from sklearn.ensemble import HistGradientBoostingClassifier

    def family(name: str) -> str:
        return name.split("-")[0]

    xs, ys = [], []
    for name, probe in probes.items():
        if family(name) == family(held):
            continue
        for p in probe.preps:
            if p.keys:
                xs.append(features(p, probe.cfg))
                ys.append(np.array([k in p.relevant for k in p.keys], dtype=int))
    model = HistGradientBoostingClassifier(
        max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=100, random_state=0
    )
    model.fit(np.concatenate(xs), np.concatenate(ys))
    cfg = probes[held].cfg
    return lambda p: model.predict_proba(features(p, cfg))[:, 1] if p.keys else np.zeros(0)


def line(label: str, name: str, summary: dict) -> str:
    h = fv.headline(summary)
    kinds = " ".join(
        f"{k}:{v['any@10']:.3f}/{v['ndcg@10']:.3f}"
        for k, v in summary.items()
        if k not in ("all", "macro")
    )
    return (
        f"{label:<26} {name:<15} any@10 {h['any@10']:.3f} all@10 {h['all@10']:.3f}"
        f" ndcg@10 {h['ndcg@10']:.3f}  [{kinds}]"
    )


def main(
    sets: Annotated[
        str, typer.Option(help="Comma-separated sets (bench_search_quality's names).")
    ] = "realtalk,chitchat,chitchat-named,realistic,generator",
    prefix_suffix: Annotated[str, typer.Option(help="Appended to each set's prefix.")] = "",
) -> None:
    base = get_settings()
    embedder = make_embedder(base.embedding)
    probes: dict[str, Probe] = {}
    for name in sets.split(","):
        try:
            qs = SETS[name](base)
        except FileNotFoundError as missing:
            typer.echo(f"{name}: left out, {missing}")
            continue
        suffixed(qs, base, prefix_suffix)
        build_memory(qs, embedder)
        query_embedder = ModelQueryEmbedder(embedder)
        service = SearchService(qs.settings, make_client(qs.settings), query_embedder)
        collected: list[Collected] = collected_rows(service, qs, False)
        cfg = service.knobs(SearchRequest(query="defaults", top_k=25))
        queries = [np.asarray(query_embedder.embed_query(c.text)) for c in collected]
        probes[name] = Probe(
            [prepare(c, qs.now) for c in collected],
            cfg,
            turn_words(qs.settings),
            row_vectors(qs.settings),
            [(q / np.linalg.norm(q)).astype(np.float32) for q in queries],
        )
    for name, probe in probes.items():
        scorers: dict[str, Scorer] = {
            "defaults": lambda p, cfg=probe.cfg: fused_scores(p, cfg),
            "turn words 12^0.5": with_turn_words(probe, 12, 0.5),
            "turn words 20^0.5": with_turn_words(probe, 20, 0.5),
            "lexical prf m=3 g=0.2": lexical_prf(probe, 3, 10, 0.2),
            "lexical prf m=5 g=0.3": lexical_prf(probe, 5, 20, 0.3),
            "vector exact": vector_prf(probe, 0, 0.0),
            "vector prf m=3 b=0.5": vector_prf(probe, 3, 0.5),
            "vector prf m=5 b=1": vector_prf(probe, 5, 1.0),
        }
        if len(probes) > 1:
            scorers["boosted (other sets)"] = boosted(probes, name)
        for label, scorer in scorers.items():
            summary = fv.evaluate(probe.preps, scorer, replies_first=probe.cfg.answers_first)
            typer.echo(line(label, name, summary))
        typer.echo("")


if __name__ == "__main__":
    typer.run(main)
