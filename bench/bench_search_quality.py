"""Search quality: recall@5, recall@10 and MRR of each arm alone and fused, on a labeled query set.

Memory is built by the real pipeline (generator -> landing -> derivation -> embedding -> indexing)
under its own home and index prefix. Queries come from the generator's ground truth (every Fact
names its user, conversation, turn and topic; every Topic carries paraphrases, exact strings and
misspellings):

  paraphrase      topic.queries                          relevant: the user's turns on the topic
  exact           topic.exact                            relevant: the user's turns containing it
  misspelled      topic.misspelled                       relevant: the user's turns on the topic
  role-targeted   topic.queries[0], targets=[assistant]  relevant: topic turns with an answer
                  topic.queries[1], targets=[user]       relevant: the user's turns on the topic
  conversation    topic.queries[2], scope=conversation   relevant: the topic's turns in it
  cross-conv      " ".join(topic.entities)               relevant: topic turns, user has >= 2
                                                         conversations on the topic
  exact-ref       a hosted file's conv:fi: ref           relevant: the one turn that produced it
  file-name       "where is <hosted file name>"          relevant: the user's turns hosting it
  temporal        no query, since/until around a turn    relevant: the user's turns in the window
  ordinal         first / last turn of a conversation    relevant: that turn

Every category weighs the same in the headline ("macro": the mean of the per-category means);
"all" is the plain mean over queries. Recall@k = |relevant in top k| / min(k, reachable), where
reachable counts at most `search_max_per_conversation` relevant turns per conversation (the cap
applies to every arm, so no ranking can do better). MRR uses the first relevant turn in the top
10 (0 when none). Each arm alone is ranked exactly as the service ranks it before fusion (best
row per turn, same filter, same cap); "fused" is the service's fusion of those same rows
(checked against the service's own answer on 100 queries); "fused-norecency" sets the recency
weight to 0.

Run: `ELASTICSEARCH_URL=... .venv/bin/python bench/bench_search_quality.py [--users 3
--conversations 600 --seed 3] [--grid] [--set search.lexical_min_match=1]
[--out bench/results/search_quality.json]`.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from ctxdb.contract.identity import Principal
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import TURNS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import Fact, Generated, generate_events, write_sample
from ctxdb.sample.topics import TOPICS, Topic
from ctxdb.search.arms import RowHit
from ctxdb.search.fusion import arm_weights, cap_per_conversation, dedup_turns, fuse
from ctxdb.search.models import ARMS, SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import Settings, get_settings
from ctxdb.storage.delta import DeltaStore

Key = tuple[str, str]
SYSTEMS = (*ARMS, "fused", "fused-norecency")
EXACT_REFS_PER_TOPIC = 2  # keeps the one-turn ref queries from outnumbering the other categories


@dataclass
class LabeledQuery:
    category: str
    user_id: str
    tenant: str
    request: SearchRequest
    relevant: set[Key]


@dataclass
class Scores:
    recall5: list[float] = field(default_factory=list)
    recall10: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)

    def add(self, ranked: Sequence[Key], relevant: set[Key], cap: int) -> None:
        per_conv: dict[str, int] = defaultdict(int)
        for conv, _ in relevant:
            per_conv[conv] += 1
        reachable = sum(min(n, cap) for n in per_conv.values())
        for k, out in ((5, self.recall5), (10, self.recall10)):
            found = len(set(ranked[:k]) & relevant)
            out.append(found / min(k, reachable))
        first = next((i for i, key in enumerate(ranked[:10], start=1) if key in relevant), None)
        self.rr.append(1.0 / first if first else 0.0)

    def summary(self) -> dict[str, float]:
        return {
            "recall@5": round(statistics.fmean(self.recall5), 4),
            "recall@10": round(statistics.fmean(self.recall10), 4),
            "mrr": round(statistics.fmean(self.rr), 4),
            "queries": len(self.rr),
        }


def build_memory(
    settings: Settings, generated: Generated, embedder: SentenceTransformerEmbedder
) -> float:
    """Land, derive, embed and index the sample (idempotent); returns seconds taken."""
    started = time.monotonic()
    landing = Path(settings.landing_uri)
    if not any(landing.glob("events-*")):
        write_sample(generated, landing, files_root=Path(settings.files))
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri)
    derive(store, settings)
    embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
    sync_live(store, make_client(settings), settings, model_id=embedder.model_id)
    return time.monotonic() - started


def _contains(fact: Fact, topic: Topic, text: str) -> bool:
    bodies = [fact.prompt, fact.answer, topic.summary if fact.adapter == "react" else ""]
    if fact.attachment and topic.attachment:
        bodies.append(topic.attachment[2])
    return any(text in b for b in bodies)


def labeled_queries(generated: Generated, rng: random.Random) -> list[LabeledQuery]:
    """The labeled query set (see the module docstring for the categories)."""
    topics = {t.key: t for t in TOPICS}
    by_user_topic: dict[tuple[str, str], list[Fact]] = defaultdict(list)
    for fact in generated.facts:
        by_user_topic[fact.user_id, fact.topic].append(fact)
    out: list[LabeledQuery] = []

    def add(category: str, facts: list[Fact], relevant: set[Key], **request) -> None:
        if relevant:
            out.append(
                LabeledQuery(
                    category,
                    facts[0].user_id,
                    facts[0].tenant,
                    SearchRequest(top_k=10, **request),
                    relevant,
                )
            )

    for (user, key), facts in sorted(by_user_topic.items()):
        topic = topics[key]
        turns = {(f.conversation_id, f.turn_id) for f in facts}
        for query in topic.queries:
            add("paraphrase", facts, turns, query=query)
        for query in topic.exact:
            add(
                "exact",
                facts,
                {(f.conversation_id, f.turn_id) for f in facts if _contains(f, topic, query)},
                query=query,
            )
        for query in topic.misspelled:
            add("misspelled", facts, turns, query=query)
        answered = {(f.conversation_id, f.turn_id) for f in facts if not f.error}
        add("role-targeted", facts, answered, query=topic.queries[0], targets=["assistant"])
        add(
            "role-targeted",
            facts,
            turns,
            query=topic.queries[1 % len(topic.queries)],
            targets=["user"],
        )
        conv = rng.choice(sorted({f.conversation_id for f in facts}))
        add(
            "conversation",
            facts,
            {t for t in turns if t[0] == conv},
            query=topic.queries[-1],
            scope="conversation",
            conversation_id=conv,
        )
        if len({f.conversation_id for f in facts}) >= 2:
            add("cross-conversation", facts, turns, query=" ".join(topic.entities))
        for fact in [f for f in facts if f.hosted_ref][:EXACT_REFS_PER_TOPIC]:
            add("exact-ref", [fact], {(fact.conversation_id, fact.turn_id)}, query=fact.hosted_ref)
        if topic.hosted_file:
            name = topic.hosted_file[0]
            add(
                "file-name",
                facts,
                {
                    (f.conversation_id, f.turn_id)
                    for f in facts
                    if f.hosted_ref and f.hosted_ref.endswith(name)
                },
                query=f"where is {name}",
            )
    return out


def catalog_queries(generated: Generated, rng: random.Random, n: int = 40) -> list[LabeledQuery]:
    """Temporal windows without a query and first/last ordinal lookups."""
    out = []
    by_conv: dict[str, list[Fact]] = defaultdict(list)
    for fact in generated.facts:
        by_conv[fact.conversation_id].append(fact)
    for fact in rng.sample(generated.facts, min(n, len(generated.facts))):
        since, until = fact.started_at - timedelta(hours=2), fact.started_at + timedelta(hours=2)
        relevant = {
            (f.conversation_id, f.turn_id)
            for f in generated.facts
            if f.user_id == fact.user_id and since <= f.started_at <= until
        }
        out.append(
            LabeledQuery(
                "temporal",
                fact.user_id,
                fact.tenant,
                SearchRequest(since=since, until=until, top_k=50),
                relevant,
            )
        )
        turns = sorted(by_conv[fact.conversation_id], key=lambda f: f.started_at)
        for ordinal, target in ((1, turns[0]), (-1, turns[-1])):
            out.append(
                LabeledQuery(
                    "ordinal",
                    fact.user_id,
                    fact.tenant,
                    SearchRequest(conversation_id=fact.conversation_id, ordinal=ordinal),
                    {(target.conversation_id, target.turn_id)},
                )
            )
    return out


@dataclass
class Collected:
    query: LabeledQuery
    rows: dict[str, list[RowHit]]


def collect(service: SearchService, queries: list[LabeledQuery]) -> list[Collected]:
    """Each query's per-arm ranked rows, from the service's own arm bodies and _msearch."""
    vectors: dict[str, list[float] | None] = {}
    now = datetime.now(UTC)
    out = []
    for q in queries:
        principal = Principal(user_id=q.user_id, tenant=q.tenant)
        if q.request.query not in vectors:
            vectors[q.request.query] = service.embedder.embed_query(q.request.query)
        bodies = service.arm_bodies(
            principal, q.request, q.request.query, vectors[q.request.query], now
        )
        out.append(Collected(q, service.run_arms(bodies)))
    return out


def capped(keys: Sequence[Key], cap: int, top_k: int) -> list[Key]:
    counts: dict[str, int] = defaultdict(int)
    out = []
    for conv, turn in keys:
        if counts[conv] < cap:
            counts[conv] += 1
            out.append((conv, turn))
    return out[:top_k]


def fused_keys(
    rows: dict[str, list[RowHit]],
    settings: Settings,
    w_sem: float,
    w_lex: float,
    w_rec: float,
    top_k: int,
) -> list[Key]:
    fused = fuse(
        rows,
        weights=arm_weights(w_sem, w_lex),
        recency_weight=w_rec,
        half_life_days=settings.search.recency_half_life_days,
        now=datetime.now(UTC),
        rrf_k=settings.search.rrf_k,
    )
    kept = cap_per_conversation(fused, settings.search.max_per_conversation, top_k)
    return [(f.conversation_id, f.turn_id) for f in kept]


def score(
    collected: list[Collected], settings: Settings, systems: dict[str, tuple | None]
) -> dict[str, dict]:
    """Metrics per category and system; a system is an arm (None) or fusion weights."""
    cap = settings.search.max_per_conversation
    scores: dict[str, dict[str, Scores]] = defaultdict(lambda: defaultdict(Scores))
    for c in collected:
        top_k = c.query.request.top_k
        for system, weights in systems.items():
            if weights is None:
                ranked = capped([r.key for r in dedup_turns(c.rows.get(system, []))], cap, top_k)
            else:
                ranked = fused_keys(c.rows, settings, *weights, top_k)
            scores[c.query.category][system].add(ranked, c.query.relevant, cap)
            scores["all"][system].add(ranked, c.query.relevant, cap)
    out = {cat: {sys: s.summary() for sys, s in by_sys.items()} for cat, by_sys in scores.items()}
    categories = [cat for cat in out if cat != "all"]
    out["macro"] = {
        system: {
            metric: round(statistics.fmean(out[cat][system][metric] for cat in categories), 4)
            for metric in ("recall@5", "recall@10", "mrr")
        }
        | {"queries": out["all"][system]["queries"]}
        for system in systems
    }
    return out


def service_agreement(service: SearchService, collected: list[Collected], n: int = 100) -> float:
    """Share of queries where the service's own answer equals the offline default fusion."""
    s = service.settings
    same = 0
    for c in collected[:n]:
        principal = Principal(user_id=c.query.user_id, tenant=c.query.tenant)
        live = [
            (h.conversation_id, h.turn_id) for h in service.search(principal, c.query.request).hits
        ]
        offline = fused_keys(
            c.rows,
            s,
            s.search.weight_semantic,
            s.search.weight_lexical,
            s.search.weight_recency,
            c.query.request.top_k,
        )
        same += live == offline
    return same / max(1, min(n, len(collected)))


def evaluate_catalog(service: SearchService, queries: list[LabeledQuery]) -> dict[str, dict]:
    scores: dict[str, Scores] = defaultdict(Scores)
    for q in queries:
        principal = Principal(user_id=q.user_id, tenant=q.tenant)
        hits = service.search(principal, q.request).hits
        scores[q.category].add(
            [(h.conversation_id, h.turn_id) for h in hits], q.relevant, cap=10**6
        )
    return {cat: s.summary() for cat, s in scores.items()}


def render(results: dict[str, dict]) -> str:
    lines = [f"{'category':<20} {'system':<16} {'R@5':>7} {'R@10':>7} {'MRR':>7} {'n':>5}"]
    for cat, by_sys in results.items():
        for system in SYSTEMS:
            if system in by_sys:
                s = by_sys[system]
                lines.append(
                    f"{cat:<20} {system:<16} {s['recall@5']:>7.3f} {s['recall@10']:>7.3f} "
                    f"{s['mrr']:>7.3f} {s['queries']:>5}"
                )
    return "\n".join(lines)


def _groups(overrides: list[str] | None) -> dict[str, dict[str, str]]:
    """`--set group.field=value` overrides as {group: {field: value}} for `Settings.replace`."""
    groups: dict[str, dict[str, str]] = {}
    for override in overrides or []:
        key, value = override.split("=", 1)
        group, field = key.split(".", 1)
        groups.setdefault(group, {})[field] = value
    return groups


def main(
    users: Annotated[int, typer.Option()] = 3,
    conversations: Annotated[int, typer.Option()] = 600,
    seed: Annotated[int, typer.Option()] = 3,
    prefix: Annotated[
        str, typer.Option(help="Index prefix of the bench memory.")
    ] = "bench-search-q3",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
    grid_search: Annotated[
        bool, typer.Option("--grid", help="Also score a grid of weights.")
    ] = False,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Setting override group.field=v.")
    ] = None,
) -> None:
    base = get_settings()
    home = base.home / prefix
    settings = base.replace(home=home, elasticsearch={"index_prefix": prefix}, **_groups(overrides))
    generated = generate_events(
        users=users, conversations=conversations, seed=seed, now=datetime(2026, 12, 1, tzinfo=UTC)
    )
    embedder = SentenceTransformerEmbedder(
        settings.embedding.model, batch_size=settings.embedding.batch_size
    )
    build_s = build_memory(settings, generated, embedder)
    typer.echo(f"memory: {len(generated.facts)} turns of {users} users, built in {build_s:.0f}s")
    client = make_client(settings)
    indexed = client.count(index=alias_name(prefix, TURNS))["count"]
    if indexed != len(generated.facts):
        raise SystemExit(
            f"{prefix} holds {indexed} turns, the sample has {len(generated.facts)}: it was built "
            "from another sample; pass a new --prefix"
        )
    service = SearchService(settings, client, ModelQueryEmbedder(embedder))
    rng = random.Random(seed)
    queries = labeled_queries(generated, rng)
    started = time.monotonic()
    collected = collect(service, queries)
    typer.echo(f"{len(queries)} labeled queries in {time.monotonic() - started:.0f}s\n")
    s = settings
    systems: dict[str, tuple | None] = {arm: None for arm in ARMS}
    systems["fused"] = (s.search.weight_semantic, s.search.weight_lexical, s.search.weight_recency)
    systems["fused-norecency"] = (s.search.weight_semantic, s.search.weight_lexical, 0.0)
    results = score(collected, settings, systems)
    typer.echo(render(results))
    agreement = service_agreement(service, collected)
    typer.echo(f"\nservice answer == offline fusion on {agreement:.0%} of 100 queries")
    grid = {}
    if grid_search:
        combos = {
            f"sem={a} lex={b} rec={c}": (a, b, c)
            for a in (1.0, 1.5, 2.0)
            for b in (0.5, 0.75, 1.0)
            for c in (0.0, 0.2, 0.5)
        }
        grid = {
            name: score(collected, settings, {name: w})["macro"][name] for name, w in combos.items()
        }
        for name, m in sorted(grid.items(), key=lambda kv: -kv[1]["recall@10"]):
            typer.echo(
                f"  {name:<28} R@5={m['recall@5']:.3f} R@10={m['recall@10']:.3f} MRR={m['mrr']:.3f}"
            )
    catalog = evaluate_catalog(service, catalog_queries(generated, rng))
    typer.echo("\ncatalog (no similarity): " + json.dumps(catalog))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        config = {
            k: v for k, v in settings.model_dump(mode="json").items() if k.startswith("search_")
        }
        out.write_text(
            json.dumps(
                {
                    "users": users,
                    "conversations": conversations,
                    "seed": seed,
                    "turns": len(generated.facts),
                    "settings": config,
                    "search": results,
                    "service_agreement": agreement,
                    "grid": grid,
                    "catalog": catalog,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    typer.run(main)
