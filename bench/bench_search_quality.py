"""Search quality on three labeled sets: each arm alone and fused, per kind of question.

Sets (`search_quality_sets.py`): `chitchat` (real conversations between people,
`bench/data/chitchat`, issue 29; the primary set), `generator` (the sample generator's ground
truth, issue 5) and `realistic` (hand-written multi-session chats, `bench/data/realistic`,
issue 15). Each is built
by the real pipeline (landing -> derivation -> embedding -> indexing) under its own home and
index prefix, then every query runs through `SearchService`'s own arm bodies and `_msearch` as
the turn's owner, at the set's fixed reference time. The ranked rows of every arm are cached
(`bench/results/cache/`, keyed by the set, the arm settings and the source of the arm code), so
fusion sweeps re-rank without touching Elasticsearch.

Systems: `semantic`, `lexical`, `trigram` (each arm alone: best row per turn, no cap),
`shipped` (issue 5's fusion: weights 1/0.5/0.5, recency 0.2 with a 7-day half-life, at most 2
turns per conversation, fused offline from the cached rows), `rrf60` (plain RRF: k 60, equal
weights, nothing else) and `fused` (`SearchService.search`
itself, with its defaults, on every query). The cache holds the rows as deep as a capped request
fetches them (twice what the default, uncapped request fetches), so the sweep can score the cap
on and off; the share of queries where the offline fusion of those rows under the defaults equals
the service's answer is printed. Metrics: `search_quality_metrics.py`.

`--variants` scores the fusion variants of `fusion_variants.py` on every set (among them the
defaults under other relevance floors); `--probes` asks off-topic queries under each floor
(`relevance_probes.py`). `--sweep` scores a
grid of fusion parameters on the sets and chooses defaults by cross-validation over them (never
one alone):

  objective  J_s(c) = (any@10 + ndcg@10) / 2, macro over kinds, on set s
  joint      mean over the sets of J_s(c) / max_c' J_s(c')  (each set's best counts 1)
  leave-one-set-out  the best c on one set, scored on the other
  5-fold     queries of both sets split in 5 folds (by id hash); c chosen (rule below) on
             the joint objective of 4 folds, scored on the fifth; the mean over folds
             estimates how well the procedure generalizes
  chosen     among the c within 1 point of the best joint objective on all queries, the one
             with the most nearly equal arm weights (ties: the higher objective), a parsimony
             rule like the one-standard-error rule: fitted weight ratios are what the two sets
             would overfit

The kNN arm is collected as the service runs it, session lift included (`SearchService.
semantic_arm`); `--rederive` derives every conversation again after a derivation change (the
session rows of issue 29 came this way). The offline fusion drops turns below the relevance
floor as the service does.

Run: `ELASTICSEARCH_URL=... .venv/bin/python bench/bench_search_quality.py [--sets
generator,realistic] [--sweep] [--set search.phrase_boost=1] [--out bench/results/q.json]`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import pickle
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

import fusion_variants
import numpy as np
import relevance_probes
import third_person
import typer
from search_quality_metrics import METRICS, query_metrics, summarize
from search_quality_sets import (
    LabeledQuery,
    QuerySet,
    build_memory,
    chitchat_set,
    generator_set,
    realistic_set,
    realtalk_set,
)

import ctxdb.search.arms
import ctxdb.search.filters
import ctxdb.search.names
import ctxdb.search.service
import ctxdb.search.sessions
import ctxdb.search.subquestions
import ctxdb.search.temporal
import ctxdb.text
from ctxdb.contract.identity import Principal
from ctxdb.embedding.backends import make_embedder
from ctxdb.index.client import make_client
from ctxdb.search.arms import RowHit
from ctxdb.search.coverage import with_coverage
from ctxdb.search.fusion import Candidates, asked_of, candidates, dedup_turns, ranked, scores
from ctxdb.search.models import ARMS, Arm, SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, QueryVector, SearchService
from ctxdb.search.temporal import split_time_hint
from ctxdb.settings import Settings, get_settings
from ctxdb.settings.search import (
    BRIEF_WORDS_MAX,
    PLAIN_RRF,
    KnobOverrides,
    SearchKnobs,
    knob_names,
)
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS

Key = tuple[str, str]
CACHE = Path(__file__).parent / "results" / "cache"
SHIPPED = PLAIN_RRF.model_copy(
    update={
        "weight_lexical": 0.5,
        "weight_trigram": 0.5,
        "weight_recency": 0.2,
        "cap_user_scope": True,
        "max_per_conversation": 2,
    }
)
"""Issue 5's fusion: weights 1/0.5/0.5, recency 0.2 with a 7-day half-life, at most 2 turns per
conversation."""
SETS = {
    "generator": generator_set,
    "realistic": realistic_set,
    "chitchat": chitchat_set,
    "chitchat-named": third_person.chitchat_named_set,
    "realtalk": realtalk_set,
}
ARM_SETTINGS = (
    "lexical_min_match",
    "trigram_min_match",
    "fuzzy_min_match",
    "phrase_boost",
    "phrase_slop",
    "overfetch_rows",
    "knn_k",
    "num_candidates",
    "max_per_conversation",
    "session_weight",
    "session_expand",
    "focus_names",
    "split_questions",
)


@dataclass
class Collected:
    query: LabeledQuery
    rows: dict[Arm, list[RowHit]]
    text: str  # the query the arms searched for (`SearchService.focused_query`)


def suffixed(qs: QuerySet, base: Settings, suffix: str) -> None:
    """Give the set its own home and indices under its prefix plus `suffix` (none when empty)."""
    if suffix:
        prefix = qs.settings.elasticsearch.index_prefix + suffix
        qs.settings = qs.settings.replace(
            home=base.home / prefix, elasticsearch={"index_prefix": prefix}
        )


def cache_key(qs: QuerySet) -> str:
    """The set, the version of its built `role_rows` (a derivation change rebuilds the rows the
    arms read), the arm settings and the source of the code that builds arm bodies."""
    s = qs.settings.search
    built = DeltaStore.from_settings(qs.settings).version(ROLE_ROWS)
    parts = [qs.name, qs.fingerprint, qs.settings.elasticsearch.index_prefix, f"rows@{built}"]
    parts += [
        f"{name}={getattr(s.knobs if name in knob_names() else s, name)}" for name in ARM_SETTINGS
    ]
    for module in (
        ctxdb.search.arms,
        ctxdb.search.filters,
        ctxdb.search.names,
        ctxdb.search.service,
        ctxdb.search.sessions,
        ctxdb.search.subquestions,
        ctxdb.search.temporal,
        ctxdb.text,
    ):
        parts.append(hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def collect(service: SearchService, qs: QuerySet) -> list[Collected]:
    """Every query's per-arm rows, fetched as deep as a capped request fetches (so one
    collection serves the cap on and off)."""
    vectors: dict[str, QueryVector | None] = {}
    out = []
    for q in qs.queries:
        principal = Principal(user_id=q.user_id, tenant=q.tenant)
        text = service.focused_query(principal, q.request, q.request.query.strip(), qs.now)
        if text not in vectors:
            vectors[text] = service.embedder.embed(text) if service.embedder else None
        deep = q.request.model_copy(update={"knobs": KnobOverrides(cap_user_scope=True)})
        rows = service.run_arms(service.arm_bodies(principal, deep, text, None, qs.now))
        embedded = vectors[text]
        if embedded is not None:
            rows |= service.semantic_arm(
                principal, deep, text, embedded.values, qs.now, model=embedded.model
            )
        out.append(Collected(q, rows, text))
    return out


def collected_rows(service: SearchService, qs: QuerySet, fresh: bool) -> list[Collected]:
    """The cached rows of every query ({query id: ({arm: rows}, searched text)}), collected
    when missing."""
    path = CACHE / f"{qs.name}-{cache_key(qs)}.pkl"
    if path.exists() and not fresh:
        cached = pickle.loads(path.read_bytes())
        return [Collected(q, *cached[q.qid]) for q in qs.queries]
    started = time.monotonic()
    rows = collect(service, qs)
    typer.echo(f"{qs.name}: {len(rows)} queries collected in {time.monotonic() - started:.0f}s")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({c.query.qid: (c.rows, c.text) for c in rows}))
    return rows


# --- offline fusion: the library's own (`ctxdb.search.fusion`) on the cached rows -----------


@dataclass(frozen=True)
class Prepared(Candidates):
    """One query's candidates (`ctxdb.search.fusion.Candidates`, which any knobs score) with
    what the bench reads beside them: each arm's raw score, the labels, the scope, the query
    the text arms saw (without its time expression), the question each turn's user row answers,
    the texts of its best rows, and the service's default relevance floor."""

    scores: dict[Arm, np.ndarray] = field(default_factory=dict)
    relevant: frozenset[Key] = frozenset()
    kind: str = ""
    scope: str = "user"
    query: str = ""
    asked: dict[Key, str] = field(default_factory=dict)
    texts: dict[Key, list[str]] = field(default_factory=dict)
    floor: float = SearchKnobs().min_score


def prepare(c: Collected, now) -> Prepared:
    """The candidates of a collected query, as the service builds them (every turn's words
    counted up to the largest `brief_words`, so any knobs can score them)."""
    topic, hint = split_time_hint(c.text)
    window = hint.window(now) if hint else None
    cand = candidates(with_coverage(c.rows, topic), now, window, BRIEF_WORDS_MAX)
    return Prepared(
        **{f.name: getattr(cand, f.name) for f in fields(Candidates) if f.init},
        scores={
            arm: np.array([t[arm].score if arm in t else 0.0 for t in cand.rows]) for arm in ARMS
        },
        relevant=c.query.relevant,
        kind=c.query.kind,
        scope=c.query.request.scope,
        query=topic,
        asked={k: asked_of(t) for k, t in zip(cand.keys, cand.rows, strict=True)},
        texts={k: [r.text for r in t.values()] for k, t in zip(cand.keys, cand.rows, strict=True)},
    )


def label(knobs: SearchKnobs) -> str:
    """The knobs a sweep varies, in one line."""
    k = knobs
    cap = k.max_per_conversation if k.cap_user_scope else "off"
    return (
        f"sem={k.weight_semantic:g} lex={k.weight_lexical:g} tri={k.weight_trigram:g} "
        f"rec={k.weight_recency:g}/{k.recency_half_life_days:g}d cap={cap} k={k.rrf_k}"
        f" time={k.weight_time:g} cov={k.coverage_power:g} floor={k.min_score:g}"
        f" brief={k.brief_words}^{k.brief_power:g}"
        f"{' answers-first' if k.answers_first else ''}"
        f"{f' diversity={k.diversity:g}' if k.diversity else ''}"
    )


def fused_scores(p: Prepared, knobs: SearchKnobs) -> np.ndarray:
    """The final score of every candidate under `knobs` (the service's arithmetic)."""
    return scores(p, knobs).final


def rank_fast(p: Prepared, knobs: SearchKnobs, top_k: int = 25) -> list[Key]:
    """The top `top_k` turns under `knobs`, ranked by the service's own code
    (`ctxdb.search.fusion.ranked`)."""
    s = scores(p, knobs)
    return [p.keys[i] for i in ranked(p, knobs, s.final, s.rrf, top_k, p.query, p.scope).kept]


def score_config(prepared: list[Prepared], knobs: SearchKnobs) -> dict[str, dict[str, float]]:
    return summarize((p.kind, query_metrics(rank_fast(p, knobs), p.relevant)) for p in prepared)


def arm_alone(c: Collected, arm: Arm) -> list[Key]:
    return [r.key for r in dedup_turns(c.rows.get(arm, []))][:25]


def service_answers(service: SearchService, qs: QuerySet) -> list[list[Key]]:
    """SearchService.search's own ranking of every query (its defaults, its own arm depth)."""
    out = []
    for q in qs.queries:
        principal = Principal(user_id=q.user_id, tenant=q.tenant)
        hits = service.search(principal, q.request, now=qs.now).hits
        out.append([(h.conversation_id, h.turn_id) for h in hits])
    return out


def agreement(answers: list[list[Key]], service: SearchService, qs: QuerySet, preps) -> float:
    """Share of queries where the offline fusion of the cached (deeper) rows under the
    service's defaults ranks the top 25 exactly as the service did."""
    same = sum(
        answer == rank_fast(p, service.knobs(q.request))
        for answer, q, p in zip(answers, qs.queries, preps, strict=True)
    )
    return same / max(1, len(answers))


def evaluate(
    collected: list[Collected], prepared: list[Prepared], answers: list[list[Key]] | None
) -> dict[str, dict]:
    """Per kind metrics of each arm alone, the shipped fusion (offline) and the service's own
    answers under its defaults."""
    results: dict[str, dict] = {}
    for arm in ARMS:
        results[arm] = summarize(
            (c.query.kind, query_metrics(arm_alone(c, arm), c.query.relevant)) for c in collected
        )
    results["shipped"] = score_config(prepared, SHIPPED)
    results["rrf60"] = score_config(prepared, PLAIN_RRF)
    if answers is not None:
        results["fused"] = summarize(
            (c.query.kind, query_metrics(answer, c.query.relevant))
            for c, answer in zip(collected, answers, strict=True)
        )
    return results


def render(name: str, results: dict[str, dict]) -> str:
    header = f"{'kind':<20} {'system':<10} " + " ".join(f"{m:>8}" for m in METRICS) + f" {'n':>5}"
    lines = [f"== {name}", header]
    kinds = list(next(iter(results.values())))
    for kind in kinds:
        for system, by_kind in results.items():
            s = by_kind[kind]
            values = " ".join(f"{s[m]:>8.3f}" for m in METRICS)
            lines.append(f"{kind:<20} {system:<10} {values} {s['n']:>5}")
    return "\n".join(lines)


# --- sweep and cross-validation -------------------------------------------------------------


def grid() -> list[SearchKnobs]:
    """Text-arm weights relative to the semantic one (only ratios matter to the order), RRF k,
    recency weight and half-life, the time-window lift, the coverage power, and the cap (off;
    2 on a subset), each over plain RRF."""
    ratios = (0.25, 0.5, 0.75, 1.0, 1.5)
    recency = ((0.0, 7.0), (0.1, 30.0), (0.1, 180.0), (0.2, 7.0), (0.5, 180.0))

    def knobs(lex: float, tri: float, rec: float, hl: float, k: int, time: float, **more):
        changes = {
            "weight_lexical": lex,
            "weight_trigram": tri,
            "weight_recency": rec,
            "recency_half_life_days": hl,
            "rrf_k": k,
            "weight_time": time,
        }
        return PLAIN_RRF.model_copy(update=changes | more)

    return [
        knobs(lex, tri, rec, hl, k, time, coverage_power=cov)
        for lex, tri in itertools.product(ratios, ratios)
        for rec, hl in recency
        for k in (3, 5, 10, 20, 60)
        for time in (0.0, 0.5, 1.0, 2.0)
        for cov in (0.0, 1.0, 2.0)
    ] + [
        knobs(w, w, rec, hl, k, time, cap_user_scope=True, max_per_conversation=2)
        for w in (0.5, 1.0)
        for rec, hl in ((0.0, 7.0), (0.2, 7.0))
        for k in (5, 60)
        for time in (0.0, 1.0)
    ]


TOLERANCE = 0.01  # a config within 1 point of the best joint objective counts as as good


def imbalance(knobs: SearchKnobs) -> float:
    """How far the arm weights are from equal (the simpler, less fitted choice is 0)."""
    sem = knobs.weight_semantic
    return abs(knobs.weight_lexical - sem) + abs(knobs.weight_trigram - sem)


def objective(summary: dict[str, dict[str, float]]) -> float:
    return (summary["macro"]["any@10"] + summary["macro"]["ndcg@10"]) / 2


def fold_of(qid: str, folds: int) -> int:
    return zlib.crc32(qid.encode()) % folds


def cross_validate(prepared: dict[str, list[Prepared]], qids: dict[str, list[str]]) -> dict:
    """Leave-one-set-out and 5-fold selection over `grid()` (see the module docstring)."""
    configs = grid()
    folds = 5
    # per set, per config, per query metrics (so any split is a mean over a subset)
    per_query: dict[str, np.ndarray] = {}
    kinds: dict[str, list[str]] = {}
    for name, preps in prepared.items():
        kinds[name] = [p.kind for p in preps]
        table = np.zeros((len(configs), len(preps), 2))
        for ci, cfg in enumerate(configs):
            for qi, p in enumerate(preps):
                m = query_metrics(rank_fast(p, cfg), p.relevant)
                table[ci, qi] = (m["any@10"], m["ndcg@10"])
        per_query[name] = table

    def set_objective(name: str, mask: np.ndarray) -> np.ndarray:
        """Macro objective of every config over the queries in `mask`."""
        ks = np.array(kinds[name])
        per_kind = [
            per_query[name][:, mask & (ks == k)].mean(axis=1).mean(axis=1)
            for k in sorted(set(kinds[name]))
            if (mask & (ks == k)).any()
        ]
        return np.mean(per_kind, axis=0)

    def joint(masks: dict[str, np.ndarray]) -> np.ndarray:
        scores = [set_objective(n, m) for n, m in masks.items()]
        return np.mean([s / s.max() for s in scores], axis=0)

    everything = {n: np.ones(len(kinds[n]), dtype=bool) for n in prepared}
    full = {n: set_objective(n, m) for n, m in everything.items()}
    names = list(prepared)
    loso = {}
    for train in names:
        best = int(np.argmax(full[train]))
        loso[f"chosen on {train}"] = {
            "config": label(configs[best]),
            **{f"J {n}": round(float(full[n][best]), 4) for n in names},
        }
    fold_scores: dict[str, list[float]] = {n: [] for n in names}
    fold_choices = []

    def select(scores: np.ndarray) -> int:
        """The parsimony rule: most nearly equal weights within TOLERANCE of the best."""
        top = float(scores.max())
        near = [i for i in range(len(configs)) if scores[i] >= top - TOLERANCE]
        return min(near, key=lambda i: (imbalance(configs[i]), -scores[i]))

    for f in range(folds):
        test = {n: np.array([fold_of(q, folds) == f for q in qids[n]]) for n in names}
        picked = select(joint({n: ~test[n] for n in names}))
        fold_choices.append(label(configs[picked]))
        for n in names:
            fold_scores[n].append(float(set_objective(n, test[n])[picked]))
    overall = joint(everything)
    best = int(np.argmax(overall))
    chosen = select(overall)
    ranking = np.argsort(-overall)
    return {
        "configs": len(configs),
        "leave_one_set_out": loso,
        "five_fold": {
            "choices": fold_choices,
            **{
                f"J {n} (held-out folds)": round(float(np.mean(v)), 4)
                for n, v in fold_scores.items()
            },
        },
        "best": label(configs[best]),
        "best_joint": round(float(overall[best]), 4),
        "chosen": label(configs[chosen]),
        "chosen_joint": round(float(overall[chosen]), 4),
        "chosen_J": {n: round(float(full[n][chosen]), 4) for n in names},
        "best_J": {n: round(float(full[n].max()), 4) for n in names},
        "top10": [
            {"config": label(configs[i]), **{n: round(float(full[n][i]), 4) for n in names}}
            for i in ranking[:10]
        ],
    }


def _groups(overrides: list[str] | None, base: Settings) -> dict[str, dict[str, Any]]:
    """`--set group.field=value` overrides as {group: {field: value}} for `Settings.replace`;
    `search.<knob>` sets that knob over the configured ones (`CTXDB_SEARCH_KNOBS`)."""
    groups: dict[str, dict[str, Any]] = {}
    for override in overrides or []:
        key, value = override.split("=", 1)
        group, field = key.split(".", 1)
        if group == "search" and field in knob_names():
            knobs = groups.setdefault("search", {}).setdefault("knobs", {})
            knobs.update(base.search.knobs.model_dump() | knobs | {field: value})
        else:
            groups.setdefault(group, {})[field] = value
    return groups


def main(
    sets: Annotated[
        str,
        typer.Option(
            help="Comma-separated: generator, realistic, chitchat, chitchat-named, realtalk"
            " (left out where not built)."
        ),
    ] = "chitchat,chitchat-named,realtalk,realistic,generator",
    sweep: Annotated[bool, typer.Option(help="Grid and cross-validation of fusion.")] = False,
    variants: Annotated[
        bool, typer.Option(help="Fusion variants (fusion_variants.py) on every set.")
    ] = False,
    fresh: Annotated[bool, typer.Option(help="Re-query instead of the cache.")] = False,
    rederive: Annotated[
        bool, typer.Option(help="Derive every conversation again (after a derivation change).")
    ] = False,
    probes: Annotated[
        bool, typer.Option(help="Off-topic probes under each relevance floor (relevance_probes).")
    ] = False,
    service_check: Annotated[
        bool, typer.Option(help="Run every query through SearchService.search (the fused row).")
    ] = True,
    prefix_suffix: Annotated[str, typer.Option(help="Appended to each set's prefix.")] = "",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Setting override group.field=v.")
    ] = None,
) -> None:
    base: Settings = get_settings()
    base = base.replace(**_groups(overrides, base)) if overrides else base
    embedder = make_embedder(base.embedding)  # CTXDB_EMBEDDING_BACKEND; auto: ONNX fp32
    report: dict[str, Any] = {
        "settings": base.search.model_dump(mode="json"),
        "model_id": embedder.model_id,
        "sets": {},
    }
    prepared: dict[str, list[Prepared]] = {}
    qids: dict[str, list[str]] = {}
    probed: dict[str, list[float]] = {}
    for name in sets.split(","):
        try:
            qs = SETS[name](base)
        except FileNotFoundError as missing:  # a set built locally only (realtalk)
            typer.echo(f"{name}: left out, {missing}")
            continue
        suffixed(qs, base, prefix_suffix)
        built = build_memory(qs, embedder, full=rederive)
        typer.echo(f"{name}: {qs.turns} turns, {len(qs.queries)} queries, built in {built:.0f}s")
        service = SearchService(qs.settings, make_client(qs.settings), ModelQueryEmbedder(embedder))
        collected = collected_rows(service, qs, fresh)
        preps = [prepare(c, qs.now) for c in collected]
        default_knobs = service.knobs(SearchRequest(query="defaults", top_k=25))
        answers = service_answers(service, qs) if service_check else None
        results = evaluate(collected, preps, answers)
        typer.echo(render(name, results))
        same = agreement(answers, service, qs, preps) if answers else None
        if same is not None:
            typer.echo(f"{name}: offline fusion of the cached rows == the service on {same:.0%}\n")
        report["sets"][name] = {"turns": qs.turns, "offline_agreement": same, "results": results}
        prepared[name] = preps
        qids[name] = [q.qid for q in qs.queries]
        if probes:
            probed[name] = relevance_probes.probe_relevance(service, qs, qs.now)
    if probes:
        typer.echo(relevance_probes.render(probed))
        report["probes"] = probed
    if variants:

        def tweak(**changes: float) -> Callable[[Prepared], np.ndarray]:
            knobs = default_knobs.model_copy(update=changes)
            return lambda p: fused_scores(p, knobs)

        rows = fusion_variants.compare(prepared, tweak(), tweak, default_knobs.answers_first)
        typer.echo(fusion_variants.render(rows, list(prepared)))
        report["variants"] = rows
    if sweep and len(prepared) > 1:
        cv = cross_validate(prepared, qids)
        typer.echo(json.dumps(cv, indent=2))
        report["cross_validation"] = cv
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
