"""The labeled query sets of the search quality bench, each built through ctxdb's pipeline.

generator  `ctxdb.sample` (seed 3: 3 users, 600 conversations): queries from the generator's
           ground truth, one category per way of asking (see `generator_queries`).
realistic  `bench/data/realistic` (hand-written multi-session chats, `build_realistic_set.py`):
           the questions as written, relevant = their evidence turns, one category per kind.
chitchat   `bench/data/chitchat` (real chats between people, the BYU Chit-Chat Challenge corpus,
           `build_chitchat_set.py`): single-hop, temporal, multi-hop and open-domain questions.
realtalk   `bench/data/realtalk` (REALTALK: 21 days of real messaging between people, with the
           questions and evidence its authors labeled; built from a local clone by
           `build_realtalk_set.py`, not committed): the same four kinds.

Each set lands its events into its own home and index prefix (`landing -> derive -> embed ->
index`), with a ten-year retention so the fixed reference time of the set stays searchable.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ctxdb.embedding.model import Embedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import TURNS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import Fact, Generated, generate_events, write_sample
from ctxdb.sample.topics import TOPICS, Topic
from ctxdb.search.models import SearchRequest
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore

Key = tuple[str, str]
REALISTIC = Path(__file__).parent / "data" / "realistic"
CHITCHAT = Path(__file__).parent / "data" / "chitchat"
REALTALK = Path(__file__).parent / "data" / "realtalk"
EXACT_REFS_PER_TOPIC = 2  # keeps the one-turn ref queries from outnumbering the other categories
RETENTION_DAYS = 3650
TOP_K = 25  # every query asks for 25 turns; @5 and @10 read the head of that list


@dataclass(frozen=True)
class LabeledQuery:
    qid: str
    kind: str
    user_id: str
    tenant: str
    request: SearchRequest
    relevant: frozenset[Key]


@dataclass
class QuerySet:
    name: str
    settings: Settings
    now: datetime
    fingerprint: str
    queries: list[LabeledQuery]
    write_landing: Callable[[Settings], None]
    turns: int


def set_settings(base: Settings, prefix: str) -> Settings:
    """Settings of one set: its own home and index prefix, retention long enough to keep it."""
    return base.replace(
        home=base.home / prefix,
        elasticsearch={"index_prefix": prefix},
        retention={"days": RETENTION_DAYS},
    )


def build_memory(qs: QuerySet, embedder: Embedder, full: bool = False) -> float:
    """Land, derive (every conversation again when `full`), embed and index the set
    (idempotent); returns seconds taken."""
    started = time.monotonic()
    settings = qs.settings
    landing = Path(settings.landing_uri)
    if not any(landing.glob("events-*")):
        qs.write_landing(settings)
    store = DeltaStore.from_settings(settings)
    land(store, settings.landing_uri)
    derive(store, settings, full=full)
    embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
    sync_live(store, make_client(settings), settings, model_id=embedder.model_id)
    indexed = make_client(settings).count(
        index=alias_name(settings.elasticsearch.index_prefix, TURNS)
    )
    if indexed["count"] != qs.turns:
        raise SystemExit(
            f"{qs.name}: the index holds {indexed['count']} turns, the set has {qs.turns}; "
            "remove its home and indices or pass another prefix"
        )
    return time.monotonic() - started


# --- realistic set -------------------------------------------------------------------------


def realistic_set(
    base: Settings, data: Path = REALISTIC, prefix: str = "", name: str = "realistic"
) -> QuerySet:
    """A set of chats with labeled questions (`events.jsonl`, `questions.jsonl`,
    `manifest.json` in `data`); the prefix carries a hash of the events so edits rebuild."""
    events = (data / "events.jsonl").read_bytes()
    manifest = json.loads((data / "manifest.json").read_text())
    fingerprint = hashlib.sha256(events).hexdigest()[:10]
    short = {"realistic": "real", "chitchat": "chat", "realtalk": "rtalk"}.get(name, name)
    settings = set_settings(base, prefix or f"bench-{short}-{fingerprint}")
    queries = []
    for line in (data / "questions.jsonl").read_text().splitlines():
        q = json.loads(line)
        queries.append(
            LabeledQuery(
                q["id"],
                q["kind"],
                q["user_id"],
                q["tenant"],
                SearchRequest(query=q["question"], top_k=TOP_K),
                frozenset((e["conversation_id"], e["turn_id"]) for e in q["evidence"]),
            )
        )

    def write(settings: Settings) -> None:
        landing = Path(settings.landing_uri)
        landing.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data / "events.jsonl", landing / "events-00000.jsonl")

    return QuerySet(
        name,
        settings,
        datetime.fromisoformat(manifest["now"]),
        fingerprint,
        queries,
        write,
        manifest["turns"],
    )


# --- generator set -------------------------------------------------------------------------

GENERATOR_NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _contains(fact: Fact, topic: Topic, text: str) -> bool:
    bodies = [fact.prompt, fact.answer, topic.summary if fact.adapter == "react" else ""]
    if fact.attachment and topic.attachment:
        bodies.append(topic.attachment[2])
    return any(text in b for b in bodies)


def generator_queries(generated: Generated, rng: random.Random) -> list[LabeledQuery]:
    """The generator's labeled queries:

    paraphrase      topic.queries                          relevant: the user's turns on the topic
    exact           topic.exact                            relevant: the user's turns containing it
    misspelled      topic.misspelled                       relevant: the user's turns on the topic
    role-targeted   topic.queries[0], targets=[assistant]  relevant: topic turns with an answer
                    topic.queries[1], targets=[user]       relevant: the user's turns on the topic
    conversation    topic.queries[-1], scope=conversation  relevant: the topic's turns in it
    cross-conv      " ".join(topic.entities)               relevant: topic turns, user has >= 2
                                                           conversations on the topic
    exact-ref       a hosted file's conv:fi: ref           relevant: the one turn that produced it
    file-name       "where is <hosted file name>"          relevant: the user's turns hosting it
    """
    topics = {t.key: t for t in TOPICS}
    by_user_topic: dict[tuple[str, str], list[Fact]] = defaultdict(list)
    for fact in generated.facts:
        by_user_topic[fact.user_id, fact.topic].append(fact)
    out: list[LabeledQuery] = []

    def add(kind: str, facts: list[Fact], relevant: set[Key], **request) -> None:
        if relevant:
            qid = f"gen-{len(out):04d}"
            out.append(
                LabeledQuery(
                    qid,
                    kind,
                    facts[0].user_id,
                    facts[0].tenant,
                    SearchRequest(top_k=TOP_K, **request),
                    frozenset(relevant),
                )
            )

    for (_user, key), facts in sorted(by_user_topic.items()):
        topic = topics[key]
        turns = {(f.conversation_id, f.turn_id) for f in facts}
        for query in topic.queries:
            add("paraphrase", facts, turns, query=query)
        for query in topic.exact:
            keys = {(f.conversation_id, f.turn_id) for f in facts if _contains(f, topic, query)}
            add("exact", facts, keys, query=query)
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
            hosting = {
                (f.conversation_id, f.turn_id)
                for f in facts
                if f.hosted_ref and f.hosted_ref.endswith(name)
            }
            add("file-name", facts, hosting, query=f"where is {name}")
    return out


def chitchat_set(base: Settings) -> QuerySet:
    """Real conversations between people (`bench/data/chitchat`, `build_chitchat_set.py`):
    questions the partners asked, labeled with the user's answer turns."""
    return realistic_set(base, CHITCHAT, name="chitchat")


def realtalk_set(base: Settings) -> QuerySet:
    """Real messaging between people with their authors' questions (`bench/data/realtalk`,
    built locally by `build_realtalk_set.py`; its source carries no license, so it is not
    committed)."""
    if not (REALTALK / "questions.jsonl").exists():
        raise FileNotFoundError(
            f"{REALTALK} is not built: clone https://github.com/danny911kr/REALTALK and run "
            ".venv/bin/python bench/build_realtalk_set.py PATH/REALTALK"
        )
    return realistic_set(base, REALTALK, name="realtalk")


def generator_set(
    base: Settings, users: int = 3, conversations: int = 600, seed: int = 3, prefix: str = ""
) -> QuerySet:
    generated = generate_events(
        users=users, conversations=conversations, seed=seed, now=GENERATOR_NOW
    )
    fingerprint = f"u{users}c{conversations}s{seed}"
    settings = set_settings(base, prefix or f"bench-gen-{fingerprint}")

    def write(settings: Settings) -> None:
        write_sample(generated, Path(settings.landing_uri), files_root=Path(settings.files))

    return QuerySet(
        "generator",
        settings,
        GENERATOR_NOW,
        fingerprint,
        generator_queries(generated, random.Random(seed)),
        write,
        len(generated.facts),
    )
