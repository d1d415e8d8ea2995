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
  temporal        no query, since/until around a turn    relevant: the user's turns in the window
  ordinal         first / last turn of a conversation    relevant: that turn

Recall@k = |relevant in top k| / min(k, reachable), where reachable counts at most
`search_max_per_conversation` relevant turns per conversation (the cap applies to every arm, so
no ranking can do better). MRR uses the first relevant turn in the top 10 (0 when none). Each arm
alone is ranked exactly as the service ranks it before fusion (best row per turn, same filter,
same cap); "fused" is the service's answer; "fused-norecency" sets the recency weight to 0.

Run: `ELASTICSEARCH_URL=... .venv/bin/python bench/bench_search_quality.py [--users 12
--conversations 300 --seed 3] [--out bench/results/search_quality.json]`.
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

from ctxdb.auth import Principal
from ctxdb.delta import DeltaStore
from ctxdb.derive.run import derive
from ctxdb.embedding import SentenceTransformerEmbedder, embed_role_rows
from ctxdb.es.client import make_client
from ctxdb.generate import Fact, Generated, generate_events, write_sample
from ctxdb.generate_topics import TOPICS, Topic
from ctxdb.index.sync import sync_live
from ctxdb.landing import land
from ctxdb.search.fusion import cap_per_conversation, dedup_turns
from ctxdb.search.models import ARMS, SearchRequest, Weights
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import Settings, get_settings

Key = tuple[str, str]
SYSTEMS = (*ARMS, "fused", "fused-norecency")


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
    landing = Path(settings.landing)
    if not any(landing.glob("events-*")):
        write_sample(generated, landing, files_root=Path(settings.files))
    store = DeltaStore(settings.delta_uri, settings.delta_storage_options)
    land(store, settings.landing)
    derive(store, settings)
    embed_role_rows(store, embedder, batch_size=settings.embedding_batch_size)
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


def arm_rankings(
    service: SearchService, principal: Principal, request: SearchRequest
) -> dict[str, list[Key]]:
    """Each arm alone, ranked as the service ranks it before fusion (dedup + per-conversation cap)."""
    now = datetime.now(UTC)
    vector = service.embedder.embed_query(request.query) if service.embedder else None
    bodies = service.arm_bodies(principal, request, request.query, vector, now)
    ranked = service.run_arms(bodies)
    cap = service.settings.search_max_per_conversation
    out = {}
    for arm in ARMS:
        rows = dedup_turns(ranked.get(arm, []))
        keys, counts = [], defaultdict(int)
        for row in rows:
            if counts[row.conversation_id] < cap:
                counts[row.conversation_id] += 1
                keys.append(row.key)
        out[arm] = keys[: request.top_k]
    return out


def evaluate(service: SearchService, queries: list[LabeledQuery]) -> dict[str, dict]:
    cap = service.settings.search_max_per_conversation
    scores: dict[str, dict[str, Scores]] = defaultdict(lambda: defaultdict(Scores))
    for q in queries:
        principal = Principal(user_id=q.user_id, tenant=q.tenant)
        rankings = arm_rankings(service, principal, q.request)
        rankings["fused"] = [
            (h.conversation_id, h.turn_id) for h in service.search(principal, q.request).hits
        ]
        flat = q.request.model_copy(update={"weights": Weights(recency=0.0)})
        rankings["fused-norecency"] = [
            (h.conversation_id, h.turn_id) for h in service.search(principal, flat).hits
        ]
        for system, ranked in rankings.items():
            scores[q.category][system].add(ranked, q.relevant, cap)
            scores["all"][system].add(ranked, q.relevant, cap)
    return {cat: {sys: s.summary() for sys, s in by_sys.items()} for cat, by_sys in scores.items()}


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


def main(
    users: Annotated[int, typer.Option()] = 12,
    conversations: Annotated[int, typer.Option()] = 300,
    seed: Annotated[int, typer.Option()] = 3,
    prefix: Annotated[
        str, typer.Option(help="Index prefix of the bench memory.")
    ] = "bench-search-q",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    home = base.home / prefix
    settings = Settings(**{**base.model_dump(), "home": home, "index_prefix": prefix})
    generated = generate_events(
        users=users, conversations=conversations, seed=seed, now=datetime(2026, 12, 1, tzinfo=UTC)
    )
    embedder = SentenceTransformerEmbedder(
        settings.embedding_model, batch_size=settings.embedding_batch_size
    )
    build_s = build_memory(settings, generated, embedder)
    typer.echo(f"memory: {len(generated.facts)} turns of {users} users, built in {build_s:.0f}s")
    service = SearchService(settings, make_client(settings), ModelQueryEmbedder(embedder))
    rng = random.Random(seed)
    queries = labeled_queries(generated, rng)
    started = time.monotonic()
    results = evaluate(service, queries)
    typer.echo(f"{len(queries)} labeled queries in {time.monotonic() - started:.0f}s\n")
    typer.echo(render(results))
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
                    "catalog": catalog,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    typer.run(main)
