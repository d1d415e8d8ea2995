"""Search latency (p50/p95) of the Python API and the HTTP API at a given number of role rows.

The full pipeline embeds about 100-180 rows/s on this machine kind, so large sizes are built
synthetically and indexed directly: role-row documents mix the generator's topic texts with
filler words and a unique ticket id; vectors come from a pool of texts embedded by the real model,
each row taking a pool vector plus small Gaussian noise (renormalized), so the kNN graph has a
realistic, non-degenerate shape. One turn document (with a small TurnLog payload) is written per
turn so hits are materialized exactly as in production.

Queries are the topics' paraphrases, exact strings and misspellings, issued as random users
(each owning rows / users rows). Timings include query embedding, the _msearch of the three arms,
fusion and TurnLog materialization; the HTTP figures add uvicorn, JSON and token verification.
Python and HTTP calls alternate which goes first, so both see the same load and caches.

Run: `ELASTICSEARCH_URL=... .venv/bin/python bench/bench_search_latency.py --rows 100000`.
"""

from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer
import uvicorn
from elasticsearch import Elasticsearch, helpers

from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body, index_name, turn_doc_id
from ctxdb.sample.topics import TOPICS
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.serve.auth import Principal, TokenStore
from ctxdb.serve.http import create_app
from ctxdb.settings import get_settings
from ctxdb.text import stems, text_hash, trigrams, words

TENANT, APP = "bench", "chat"
TARGETS = ("user", "assistant", "summary", "attachment")
POOL = 1500


def topic_texts() -> list[str]:
    out = []
    for t in TOPICS:
        out += [*t.prompts, *t.followups, *t.steers, *t.answers, t.summary]
    return out


def synthetic_text(rng: random.Random, base: list[str], vocab: list[str]) -> str:
    filler = " ".join(rng.choices(vocab, k=rng.randint(4, 20)))
    return f"{rng.choice(base)} {filler} ticket T-{rng.getrandbits(32):08x}"


def vector_pool(
    embedder: SentenceTransformerEmbedder, rng: random.Random
) -> tuple[list[str], np.ndarray]:
    base = topic_texts()
    vocab = sorted({w for text in base for w in words(text) if len(w) > 3})
    texts = [synthetic_text(rng, base, vocab) for _ in range(POOL)]
    return texts, embedder.encode(texts)


def row_docs(
    rows: int, users: int, pool_texts: list[str], pool: np.ndarray, seed: int, now: datetime
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, doc) for `rows` role rows and their turns, spread over `users` users and 30 days."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    expires = (now + timedelta(days=365)).isoformat()
    made = turn_n = 0
    while made < rows:
        user = f"u{rng.randrange(users):05d}"
        conv = f"c{rng.getrandbits(64):016x}"
        start = now - timedelta(days=rng.uniform(0, 30))
        for ordinal in range(1, rng.randint(2, 6)):
            turn = f"t{turn_n:09d}"
            turn_n += 1
            ts = start + timedelta(minutes=ordinal * rng.uniform(1, 90))
            texts = []
            for target in TARGETS[: rng.randint(2, 4)]:
                j = rng.randrange(POOL)
                vec = pool[j] + nprng.normal(0, 0.02, pool.shape[1]).astype(np.float32)
                vec /= np.linalg.norm(vec)
                text = pool_texts[j]
                texts.append((target, text))
                yield (
                    ROWS,
                    {
                        "_id": f"{conv}:{turn}:{target}",
                        "row_id": f"{conv}:{turn}:{target}",
                        "tenant": TENANT,
                        "app": APP,
                        "agent": "helper",
                        "user_id": user,
                        "conversation_id": conv,
                        "turn_id": turn,
                        "role": "user" if target == "user" else "assistant",
                        "target": target,
                        "tags": [f"chat:{target}"],
                        "ref": f"conv:ar:turn_{turn}.{target}",
                        "path": f"conv:ar:turn_{turn}.{target}",
                        "visibility": "public",
                        "ordinal": ordinal,
                        "ts": ts.isoformat(),
                        "expires_at": expires,
                        "text": text,
                        "anchors_text": "",
                        "trigrams": trigrams(text),
                        "stems": stems(text),
                        "embedding": vec.tolist(),
                        "embedding_status": "ok",
                        "model_id": "all-MiniLM-L6-v2",
                        "text_hash": text_hash(text),
                    },
                )
                made += 1
            blocks = [
                {
                    "type": "user.prompt"
                    if t == "user"
                    else "assistant.completion"
                    if t == "assistant"
                    else "conv.working.summary",
                    "text": text,
                    "ts": ts.isoformat(),
                    "path": f"conv:ar:turn_{turn}.{t}",
                }
                for t, text in texts
            ]
            yield (
                TURNS,
                {
                    "_id": turn_doc_id(conv, turn),
                    "tenant": TENANT,
                    "app": APP,
                    "agent": "helper",
                    "user_id": user,
                    "conversation_id": conv,
                    "turn_id": turn,
                    "ordinal": ordinal,
                    "title": f"conversation {conv[:6]}",
                    "started_at": ts.isoformat(),
                    "ended_at": ts.isoformat(),
                    "last_activity_at": ts.isoformat(),
                    "expires_at": expires,
                    "payload": {"turn_id": turn, "blocks": blocks},
                },
            )
            if made >= rows:
                return


def build_index(
    client: Elasticsearch, prefix: str, docs: Iterator[tuple[str, dict]], forcemerge: bool = True
) -> int:
    """Create both indices (refresh off while loading), bulk load, refresh, optionally
    force-merge to one segment (without it, the index keeps its natural segments)."""
    for kind in (ROWS, TURNS):
        body = index_body(kind)
        body["settings"] = {**body["settings"], "refresh_interval": "-1"}
        client.indices.create(index=index_name(prefix, kind, 1), **body)
        client.indices.put_alias(index=index_name(prefix, kind, 1), name=alias_name(prefix, kind))
    actions = (
        {"_index": index_name(prefix, kind, 1), "_id": d.pop("_id"), "_source": d}
        for kind, d in docs
    )
    indexed = 0
    for ok, _ in helpers.streaming_bulk(
        client.options(request_timeout=120), actions, chunk_size=1000, max_retries=3
    ):
        indexed += ok
    for kind in (ROWS, TURNS):
        name = index_name(prefix, kind, 1)
        client.indices.put_settings(index=name, settings={"refresh_interval": "1s"})
        client.indices.refresh(index=name)
        if forcemerge:
            client.options(request_timeout=3600).indices.forcemerge(index=name, max_num_segments=1)
    return indexed


def percentiles(samples: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50_ms": round(qs[49] * 1000, 1),
        "p95_ms": round(qs[94] * 1000, 1),
        "mean_ms": round(statistics.fmean(samples) * 1000, 1),
        "n": len(samples),
    }


def bench_queries(rng: random.Random, users: int, n: int) -> list[tuple[str, str]]:
    texts = [q for t in TOPICS for q in (*t.queries, *t.exact, *t.misspelled)]
    return [(f"u{rng.randrange(users):05d}", rng.choice(texts)) for _ in range(n)]


def serve(app, port: int) -> uvicorn.Server:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


def main(
    rows: Annotated[int, typer.Option(help="Role rows to index.")] = 100_000,
    users: Annotated[int, typer.Option(help="Distinct users owning the rows.")] = 500,
    queries: Annotated[int, typer.Option(help="Measured queries per API.")] = 200,
    warmup: Annotated[int, typer.Option()] = 30,
    seed: Annotated[int, typer.Option()] = 5,
    port: Annotated[int, typer.Option()] = 8765,
    keep: Annotated[bool, typer.Option(help="Keep the indices for a re-run.")] = True,
    forcemerge: Annotated[bool, typer.Option(help="Force-merge to one segment.")] = True,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    prefix = f"bench-search-lat-{rows}"
    settings = base.replace(home=base.home / prefix, elasticsearch={"index_prefix": prefix})
    client = make_client(settings)
    embedder = SentenceTransformerEmbedder(settings.embedding.model, batch_size=64)
    now = datetime.now(UTC)
    build_s = 0.0
    if not client.indices.exists_alias(name=alias_name(prefix, ROWS)):
        started = time.monotonic()
        pool_texts, pool = vector_pool(embedder, random.Random(seed))
        docs = row_docs(rows, users, pool_texts, pool, seed, now)
        indexed = build_index(client, prefix, docs, forcemerge)
        build_s = time.monotonic() - started
        typer.echo(f"indexed {indexed} documents in {build_s:.0f}s")
    count = client.count(index=alias_name(prefix, ROWS))["count"]
    typer.echo(f"{prefix}: {count} role rows")

    service = SearchService(settings, client, ModelQueryEmbedder(embedder))
    rng = random.Random(seed)
    plan = bench_queries(rng, users, warmup + queries)
    store = TokenStore(settings.tokens_path)
    tokens = {user: store.issue(user, tenant=TENANT) for user, _ in plan}
    server = serve(create_app(settings, client, service.embedder), port)
    embed_s, python_s, http_s = [], [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        # the APIs alternate which goes first, so both see the same load and warm caches
        for i, (user, query) in enumerate(plan):
            principal = Principal(user_id=user, tenant=TENANT)
            calls = [
                lambda: service.search(principal, SearchRequest(query=query, top_k=10)),
                lambda: http.post(
                    "/v1/search",
                    json={"query": query, "top_k": 10},
                    headers={"Authorization": f"Bearer {tokens[user]}"},
                ).raise_for_status(),
            ]
            elapsed = {}
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                t0 = time.perf_counter()
                calls[which]()
                elapsed[which] = time.perf_counter() - t0
            t0 = time.perf_counter()
            service.embedder.embed_query(query)
            embedded = time.perf_counter() - t0
            if i >= warmup:
                python_s.append(elapsed[0])
                http_s.append(elapsed[1])
                embed_s.append(embedded)
    server.should_exit = True

    results = {
        "rows": count,
        "users": users,
        "build_s": round(build_s, 1),
        "forcemerged": forcemerge,
        "query_embedding": percentiles(embed_s),
        "python_api": percentiles(python_s),
        "http_api": percentiles(http_s),
    }
    typer.echo(json.dumps(results, indent=2))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2))
    if not keep:
        for kind in (ROWS, TURNS):
            client.indices.delete(index=index_name(prefix, kind, 1))


if __name__ == "__main__":
    typer.run(main)
