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

Run: `ELASTICSEARCH_URL=... .venv/bin/python bench/bench_search_latency.py --rows 100000`. Queries
are embedded by the configured backend (`CTXDB_EMBEDDING_BACKEND`: torch, onnx, onnx-int8; auto,
the default: the backend of an index built before, else ONNX fp32).

Index layout options (issue 15): `--index-type` (hnsw, int8_hnsw, bbq_hnsw), `--routing` (user:
every document routed by its user, searches touch one shard), `--sort` (user: every segment sorted
by user and conversation; builds without it keep their old names), `--shards`; `--users` or
`--heavy-users` (few users owning many rows each); `--forcemerge` measures a one-segment index,
`--live-sync` measures while a background writer bulk-indexes new rows.
`--asked` (issue 29) gives every user row after a conversation's first turn a `context`: the
previous turn's assistant text cut to 300 characters (the pipeline keeps only its last question,
so this is the pessimistic size), its stems and trigrams indexed with the text as the pipeline
does; `--compare-asked` then times, query by query in alternating order, the Python API as
shipped against the query before issue 29 (lexical arm without `context`, `answers_first` off);
`--compare-knob names` the same for every query asked about a person by a name no row holds,
with `focus_names` on (one more request, the name counts: `ctxdb.search.names`) and off, and
`--compare-knob split` for every query made a compound question, `split_questions` on and off,
and `--compare-knob brief` for every query with `brief_power` at its default and 0.
The build is kept and reused by later runs of the same layout and users (`--build-only` just
builds it). Queries run in bursts;
every burst records the load average; Elasticsearch's own `took` (summed over a search's requests:
text arms, kNN arm, TurnLog fetch) and the query embedding time are reported apart from the
end-to-end figures. `--recall-users` compares the kNN arm's top 10 with the exact top 10 (numpy over
the same vectors, kept beside the build).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer
import uvicorn
from elasticsearch import Elasticsearch, helpers
from elasticsearch.serializer import OrjsonSerializer

from ctxdb.auth.credentials import Principal, TokenStore
from ctxdb.embedding.backends import make_embedder
from ctxdb.embedding.model import Embedder
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_name, turn_doc_id
from ctxdb.index.routing import USER, routing_key
from ctxdb.index.versions import create_index, finish_bulk_load
from ctxdb.sample.topics import TOPICS
from ctxdb.search import arms
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService, index_model_ids
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


def vector_pool(embedder: Embedder, rng: random.Random) -> tuple[list[str], np.ndarray]:
    base = topic_texts()
    vocab = sorted({w for text in base for w in words(text) if len(w) > 3})
    texts = [synthetic_text(rng, base, vocab) for _ in range(POOL)]
    return texts, embedder.encode(texts)


class VectorLog:
    """Every indexed row's vector and user, kept beside the build (float32 memmap) so the kNN
    arm's recall can be checked against an exact search over the same vectors."""

    def __init__(self, folder: Path, prefix: str, rows: int, dims: int = 384) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.base = folder / prefix
        self.vectors = np.lib.format.open_memmap(
            f"{self.base}.vectors.npy", mode="w+", dtype=np.float32, shape=(rows, dims)
        )
        self.users: list[str] = []
        self.ids: list[str] = []

    def add(self, doc_id: str, user: str, vector: np.ndarray) -> None:
        self.vectors[len(self.ids)] = vector
        self.ids.append(doc_id)
        self.users.append(user)

    def close(self) -> None:
        self.vectors.flush()
        np.save(f"{self.base}.users.npy", np.array(self.users))
        np.save(f"{self.base}.ids.npy", np.array(self.ids))


def load_vectors(folder: Path, prefix: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    base = folder / prefix
    if not Path(f"{base}.ids.npy").exists():
        return None
    return (
        np.load(f"{base}.vectors.npy", mmap_mode="r"),
        np.load(f"{base}.users.npy"),
        np.load(f"{base}.ids.npy"),
    )


def row_docs(
    rows: int,
    users: list[str],
    pool_texts: list[str],
    pool: np.ndarray,
    seed: int,
    now: datetime,
    vectors: VectorLog | None = None,
    asked: bool = False,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, doc) for `rows` role rows and their turns, spread over `users` and 30 days.

    The pool texts' derived fields (trigrams, stems, hash) are computed once per text; with
    `asked`, a user row after the first turn carries the previous turn's assistant text as
    `context`, its stems and trigrams taken over both (module docstring)."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    expires = (now + timedelta(days=365)).isoformat()
    derived = [
        {"trigrams": trigrams(t), "stems": stems(t), "text_hash": text_hash(t)} for t in pool_texts
    ]
    made = turn_n = 0
    while made < rows:
        user = rng.choice(users)
        conv = f"c{rng.getrandbits(64):016x}"
        start = now - timedelta(days=rng.uniform(0, 30))
        answered = ""
        for ordinal in range(1, rng.randint(2, 6)):
            turn = f"t{seed}-{turn_n:09d}"
            turn_n += 1
            identity = {
                "tenant": TENANT,
                "app": APP,
                "agent": "helper",
                "user_id": user,
                "conversation_id": conv,
                "turn_id": turn,
            }
            ts = start + timedelta(minutes=ordinal * rng.uniform(1, 90))
            texts = []
            for target in TARGETS[: rng.randint(2, 4)]:
                if made >= rows:
                    break
                j = rng.randrange(POOL)
                vec = pool[j] + nprng.normal(0, 0.02, pool.shape[1]).astype(np.float32)
                vec /= np.linalg.norm(vec)
                text = pool_texts[j]
                texts.append((target, text))
                context = answered if target == "user" else ""
                fields = derived[j]
                if context:
                    both = f"{text} {context}"
                    fields = {**fields, "trigrams": trigrams(both), "stems": stems(both)}
                doc_id = f"{conv}:{turn}:{target}"
                if vectors is not None:
                    vectors.add(doc_id, user, vec)
                yield (
                    ROWS,
                    {
                        "_id": doc_id,
                        "row_id": doc_id,
                        **identity,
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
                        "context": context,
                        **fields,
                        "embedding": vec,
                        "embedding_status": "ok",
                        "model_id": "all-MiniLM-L6-v2",
                    },
                )
                made += 1
            answered = next((t for r, t in texts if r == "assistant"), "")[:300] if asked else ""
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
                    **identity,
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


def bulk_actions(
    prefix: str, docs: Iterator[tuple[str, dict]], routed: bool, version: int = 1
) -> Iterator[dict[str, Any]]:
    for kind, doc in docs:
        action = {
            "_index": index_name(prefix, kind, version),
            "_id": doc.pop("_id"),
            "_source": doc,
        }
        if routed:
            action["routing"] = routing_key(doc["user_id"])
        yield action


def build_index(
    client: Elasticsearch, prefix: str, docs: Iterator[tuple[str, dict]], layout: dict[str, Any]
) -> int:
    """Create both indices with `layout` (refresh off, no replicas while loading), bulk load on
    two threads, then restore refresh and make everything searchable."""
    for kind in (ROWS, TURNS):
        create_index(
            client,
            prefix,
            kind,
            1,
            dims=384,
            model_id="all-MiniLM-L6-v2",
            with_alias=True,
            bulk_load=True,
            layout=layout,
        )
    indexed = 0
    actions = bulk_actions(prefix, docs, layout["routing"] == USER)
    for ok, item in helpers.parallel_bulk(
        client, actions, thread_count=2, chunk_size=1000, queue_size=4
    ):
        if not ok:
            raise RuntimeError(f"bulk item failed: {item}")
        indexed += 1
        if indexed % 200_000 == 0:
            typer.echo(f"  {indexed} documents, load {os.getloadavg()[0]:.1f}")
    for kind in (ROWS, TURNS):
        finish_bulk_load(client, index_name(prefix, kind, 1), kind)
    return indexed


def bulk_client(url: str) -> Elasticsearch:
    """A client for the loads: orjson serializes the numpy vectors directly (several times
    faster than JSON-encoding float lists)."""
    return Elasticsearch(url, serializer=OrjsonSerializer(), request_timeout=300)


def forcemerge(client: Elasticsearch, prefix: str) -> float:
    """Merge both indices to one segment per shard; seconds taken."""
    started = time.monotonic()
    for kind in (ROWS, TURNS):
        client.options(request_timeout=7200).indices.forcemerge(
            index=index_name(prefix, kind, 1), max_num_segments=1
        )
    return time.monotonic() - started


def index_costs(client: Elasticsearch, prefix: str) -> dict[str, Any]:
    """Store size, segment count and dense-vector off-heap sizes of the rows index, and the
    node's heap in use."""
    name = index_name(prefix, ROWS, 1)
    stats = client.indices.stats(index=name, metric="store,segments,dense_vector").body
    total = stats["indices"][name]["primaries"]
    node = next(iter(client.nodes.stats(metric="jvm").body["nodes"].values()))
    return {
        "store_bytes": total["store"]["size_in_bytes"],
        "segments": total["segments"]["count"],
        "segments_memory_bytes": total["segments"].get("memory_in_bytes"),
        "dense_vector": total.get("dense_vector"),
        "heap_used_bytes": node["jvm"]["mem"]["heap_used_in_bytes"],
        "heap_max_bytes": node["jvm"]["mem"]["heap_max_in_bytes"],
    }


def percentiles(samples: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50_ms": round(qs[49] * 1000, 1),
        "p95_ms": round(qs[94] * 1000, 1),
        "mean_ms": round(statistics.fmean(samples) * 1000, 1),
        "n": len(samples),
    }


def bench_queries(rng: random.Random, users: list[str], n: int) -> list[tuple[str, str]]:
    texts = [q for t in TOPICS for q in (*t.queries, *t.exact, *t.misspelled)]
    return [(rng.choice(users), rng.choice(texts)) for _ in range(n)]


def serve(app, port: int) -> uvicorn.Server:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


class TookRecorder:
    """The Elasticsearch client as SearchService sees it, noting each response's `took` (ms)
    so the server's own time can be told from the client's."""

    def __init__(self, client: Elasticsearch) -> None:
        self._client = client
        self.took_ms = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def msearch(self, **kwargs: Any) -> Any:
        response = self._client.msearch(**kwargs)
        self.took_ms += response["took"]
        return response

    def search(self, **kwargs: Any) -> Any:
        response = self._client.search(**kwargs)
        self.took_ms += response["took"]
        return response


def write_live(
    url: str,
    prefix: str,
    routed: bool,
    rate: int,
    docs: Iterator[tuple[str, dict]],
    stop: Any,
    written: Any,
) -> None:
    """`rate` new role rows (with their turns) bulk-indexed per second through the alias, routed
    like the build, until `stop` is set; refresh stays at its 1 s interval."""
    client = bulk_client(url)
    actions = bulk_actions(prefix, docs, routed)
    while not stop.is_set():
        tick = time.monotonic()
        chunk = [a for _, a in zip(range(rate), actions, strict=False)]
        for ok, _ in helpers.streaming_bulk(client, chunk, chunk_size=500):
            written.value += ok
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


class LiveWriter:
    """A background sync in its own process (as the indexer runs apart from the search
    service), started and writing before the measurement begins."""

    def __init__(self, *args: Any) -> None:
        context = multiprocessing.get_context("fork")
        self.stop = context.Event()
        self.written = context.Value("q", 0)
        self.process = context.Process(
            target=write_live, args=(*args, self.stop, self.written), daemon=True
        )
        self.seconds = 0.0

    def __enter__(self) -> LiveWriter:
        self.process.start()
        self.started = time.monotonic()
        while self.written.value == 0:
            if not self.process.is_alive():
                raise RuntimeError("the live writer stopped before writing")
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join(60)
        self.seconds = time.monotonic() - self.started


def knn_recall(
    service: SearchService,
    vectors: tuple[np.ndarray, np.ndarray, np.ndarray],
    users: list[str],
    queries: list[str],
    now: datetime,
) -> dict[str, float]:
    """Mean share of the exact top 10 (numpy dot products over the user's own vectors) that the
    semantic arm's top 10 holds, with the production k and num_candidates."""
    matrix, owners, ids = vectors
    recalls = []
    for user in users:
        mine = np.flatnonzero(owners == user)
        own = np.asarray(matrix[mine])
        principal = Principal(user_id=user, tenant=TENANT)
        for query in queries:
            embedded = service.embedder.embed(query)
            vector = embedded.values
            body = service.arm_bodies(
                principal, SearchRequest(query=query, top_k=10), query, vector, now, embedded.model
            )["semantic"]
            got = service.run_arms({"semantic": body})["semantic"][:10]
            exact = set(ids[mine[np.argsort(-(own @ np.asarray(vector, dtype=np.float32)))[:10]]])
            recalls.append(
                len(exact & {f"{h.conversation_id}:{h.turn_id}:{h.target}" for h in got}) / 10
            )
    return {"recall_at_10": round(statistics.fmean(recalls), 4), "n": len(recalls)}


def measure(
    service: SearchService,
    recorder: TookRecorder,
    plan: list[tuple[str, str]],
    tokens: dict[str, str],
    port: int,
    warmup: int,
    burst: int,
    pause_s: float,
) -> dict[str, Any]:
    """Every planned query through the Python and the HTTP API (alternating which goes first),
    in bursts of `burst` separated by `pause_s`; the load average is noted per burst."""
    embed_s, python_s, http_s, took_s, loads = [], [], [], [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        for i, (user, query) in enumerate(plan):
            if i >= warmup and (i - warmup) % burst == 0:
                time.sleep(pause_s)
                loads.append(os.getloadavg()[0])
            principal = Principal(user_id=user, tenant=TENANT)
            calls = [
                lambda p=principal, q=query: service.search(p, SearchRequest(query=q, top_k=10)),
                lambda q=query, u=user: http.post(
                    "/v1/search",
                    json={"query": q, "top_k": 10},
                    headers={"Authorization": f"Bearer {tokens[u]}"},
                ).raise_for_status(),
            ]
            elapsed = {}
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                recorder.took_ms = 0
                t0 = time.perf_counter()
                calls[which]()
                elapsed[which] = time.perf_counter() - t0
                if which == 0:
                    took = recorder.took_ms / 1000
            t0 = time.perf_counter()
            service.embedder.embedder.encode([query])
            embedded = time.perf_counter() - t0
            if i >= warmup:
                python_s.append(elapsed[0])
                http_s.append(elapsed[1])
                embed_s.append(embedded)
                took_s.append(took)
    return {
        "load_avg_1m": {
            "min": round(min(loads), 2),
            "median": round(statistics.median(loads), 2),
            "max": round(max(loads), 2),
        },
        "query_embedding": percentiles(embed_s),
        "es_took": percentiles(took_s),
        "python_api": percentiles(python_s),
        "http_api": percentiles(http_s),
    }


def report(results: dict[str, Any], out: Path | None, echo: bool = True) -> None:
    """Print the results (unless `echo` is off) and write them to `out` as JSON."""
    if echo:
        typer.echo(json.dumps(results, indent=2))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2))


@contextmanager
def before_asked() -> Iterator[None]:
    """The lexical arm's fields as before issue 29 (no `context`), restored on exit."""
    shipped = arms.LEXICAL_FIELDS
    arms.LEXICAL_FIELDS = [f for f in shipped if f != "context"]
    try:
        yield
    finally:
        arms.LEXICAL_FIELDS = shipped


def alternate(
    plan: list[tuple[str, str]],
    warmup: int,
    burst: int,
    pause_s: float,
    runs: dict[str, Callable[[Principal, str], object]],
) -> dict[str, Any]:
    """p50/p95 of each planned query under the two `runs` (shipped first in `runs`),
    alternating which goes first, with their ratios."""
    timed: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i, (user, query) in enumerate(plan):
        if i >= warmup and (i - warmup) % burst == 0:
            time.sleep(pause_s)
        principal = Principal(user_id=user, tenant=TENANT)
        for which in names if i % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            runs[which](principal, query)
            if i >= warmup:
                timed[which].append(time.perf_counter() - t0)
    out: dict[str, Any] = {name: percentiles(samples) for name, samples in timed.items()}
    shipped, before = names
    out["p95_ratio"] = round(out[shipped]["p95_ms"] / out[before]["p95_ms"], 3)
    out["p50_ratio"] = round(out[shipped]["p50_ms"] / out[before]["p50_ms"], 3)
    return out


def compare_asked(
    service: SearchService, plan: list[tuple[str, str]], warmup: int, burst: int, pause_s: float
) -> dict[str, Any]:
    """Python API p50/p95 of each planned query as shipped and as before issue 29 (lexical arm
    without `context`, `answers_first` off)."""

    def shipped(principal: Principal, query: str) -> object:
        return service.search(principal, SearchRequest(query=query, top_k=10))

    def before(principal: Principal, query: str) -> object:
        with before_asked():
            request = SearchRequest(query=query, top_k=10, knobs={"answers_first": False})
            return service.search(principal, request)

    return alternate(plan, warmup, burst, pause_s, {"shipped": shipped, "before": before})


def compare_knob(
    service: SearchService,
    plan: list[tuple[str, str]],
    timing: tuple[int, int, float],
    template: str,
    knob: str,
    values: tuple[Any, Any] = (True, False),
) -> dict[str, Any]:
    """Python API p50/p95 of each planned query written into `template` with the request field
    `knob` on and off (`values`: its value on, then off; `timing`: warmup, burst, pause)."""

    def asked(value: Any) -> Callable[[Principal, str], object]:
        def run(principal: Principal, query: str) -> object:
            knobs = {} if value is None else {knob: value}  # None: the knob's default
            fields: dict[str, Any] = {"query": template.format(query), "top_k": 10, "knobs": knobs}
            return service.search(principal, SearchRequest(**fields))

        return run

    return alternate(plan, *timing, {"on": asked(values[0]), "off": asked(values[1])})


KNOB_COMPARISONS: dict[str, tuple[str, str, tuple[Any, Any]]] = {
    # a person named by a name no row holds: one more request, the name counts (names.py)
    "names": ("what did Alex say about: {}", "focus_names", (True, False)),
    # a compound question: one more embedding and kNN search per part (subquestions.py)
    "split": (
        "what did I say about {}, and what did I decide about it?",
        "split_questions",
        (True, False),
    ),
    # brief turns scaled down (the default power) or not: words counted per candidate turn
    "brief": ("{}", "brief_power", (None, 0.0)),
}


def main(
    rows: Annotated[int, typer.Option(help="Role rows to index.")] = 100_000,
    users: Annotated[int, typer.Option(help="Distinct users owning the rows.")] = 500,
    heavy_users: Annotated[
        int, typer.Option(help="Instead of --users: this few users own all rows (e.g. 20).")
    ] = 0,
    index_type: Annotated[str, typer.Option(help="hnsw, int8_hnsw or bbq_hnsw.")] = "int8_hnsw",
    routing: Annotated[str, typer.Option(help="user (route by user) or none.")] = "user",
    shards: Annotated[int, typer.Option(help="Primary shards.")] = 2,
    sort: Annotated[
        str, typer.Option(help="user (index sorted by user and conversation) or none.")
    ] = "user",
    fanout: Annotated[
        bool, typer.Option(help="Search without routing (every shard) even on a routed index.")
    ] = False,
    queries: Annotated[int, typer.Option(help="Measured queries per API.")] = 200,
    warmup: Annotated[int, typer.Option()] = 30,
    burst: Annotated[int, typer.Option(help="Queries per burst.")] = 25,
    pause_s: Annotated[float, typer.Option(help="Pause between bursts.")] = 2.0,
    seed: Annotated[int, typer.Option()] = 5,
    port: Annotated[int, typer.Option()] = 8765,
    forcemerge_first: Annotated[
        bool, typer.Option("--forcemerge/--no-forcemerge", help="Force-merge before measuring.")
    ] = False,
    live_sync: Annotated[
        bool, typer.Option(help="Measure while a background writer bulk-indexes new rows.")
    ] = False,
    live_rate: Annotated[int, typer.Option(help="Rows per second the live writer adds.")] = 500,
    recall_users: Annotated[int, typer.Option(help="Users whose kNN recall is checked.")] = 0,
    recall_queries: Annotated[int, typer.Option(help="Queries per user in the recall check.")] = 10,
    build_only: Annotated[bool, typer.Option(help="Build (or reuse) and stop.")] = False,
    recall_only: Annotated[bool, typer.Option(help="Stop after the recall check.")] = False,
    vectors_dir: Annotated[Path, typer.Option(help="Where the build's vectors are kept.")] = Path(
        "/tmp/ctxdb-es-bench/vectors"
    ),
    keep: Annotated[bool, typer.Option(help="Keep the indices for a re-run.")] = True,
    asked: Annotated[
        bool, typer.Option(help="User rows carry the question they answer (module docstring).")
    ] = False,
    compare: Annotated[
        bool,
        typer.Option("--compare-asked", help="Time the query as shipped against before issue 29."),
    ] = False,
    knobs: Annotated[
        list[str] | None,
        typer.Option(
            "--compare-knob",
            help="Time queries with a request knob on and off: names (focus_names on queries"
            " naming a person), split (split_questions on compound questions) or brief"
            " (brief_power at its default and 0).",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    owners = heavy_users or users
    prefix = f"bench-lat-{rows}-{owners}u-{index_type}-{routing}-{shards}s"
    prefix += "-sorted" if sort == USER else ""
    prefix += "-asked" if asked else ""
    layout = {"routing": routing, "vector_index": index_type, "shards": shards, "sort": sort}
    settings = base.replace(home=base.home / prefix, elasticsearch={"index_prefix": prefix})
    client = make_client(settings)
    stored = index_model_ids(client, settings)  # `auto`: the backend of an index built before
    embedder = make_embedder(settings.embedding, batch_size=64, stored_ids=stored)
    now = datetime.now(UTC)
    user_ids = [f"u{i:05d}" for i in range(owners)]
    building = not client.indices.exists_alias(name=alias_name(prefix, ROWS))
    if building or live_sync:  # the row texts and vectors come from the pool
        pool_texts, pool = vector_pool(embedder, random.Random(seed))
    results: dict[str, Any] = {"rows": rows, "users": owners, "layout": layout, "fanout": fanout}
    results["asked"] = asked
    results["query_embedding_model_id"] = embedder.model_id
    results["knn_oversample"] = settings.search.knn_oversample
    if building:
        started = time.monotonic()
        load_before = os.getloadavg()[0]
        log = VectorLog(vectors_dir, prefix, rows)
        docs = row_docs(rows, user_ids, pool_texts, pool, seed, now, log, asked)
        indexed = build_index(bulk_client(settings.elasticsearch.url), prefix, docs, layout)
        log.close()
        results["build"] = {
            "seconds": round(time.monotonic() - started, 1),
            "documents": indexed,
            "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
        typer.echo(f"built {prefix}: {results['build']}")
    if forcemerge_first:
        results["forcemerge_s"] = round(forcemerge(client, prefix), 1)
    results["rows_indexed"] = client.count(index=alias_name(prefix, ROWS))["count"]
    results["costs"] = index_costs(client, prefix)
    typer.echo(json.dumps(results, indent=2))
    if build_only:
        return

    recorder = TookRecorder(client)
    service = SearchService(settings, recorder, ModelQueryEmbedder(embedder, cache_size=0))  # type: ignore[arg-type]
    app = create_app(settings, client, ModelQueryEmbedder(embedder, cache_size=0))
    if fanout:  # the comparison: every shard searched, as without routing
        service.routing.routed = lambda alias: False
        app.state.service.routing.routed = lambda alias: False
    rng = random.Random(seed)
    if recall_users:
        vectors = load_vectors(vectors_dir, prefix)
        if vectors is not None:
            # the topics' queries, then their prompts and follow-ups (the rows' base texts)
            texts = [q for t in TOPICS for q in (*t.queries, *t.prompts, *t.followups)]
            asked = rng.sample(texts, min(recall_queries, len(texts)))
            results["knn_recall"] = knn_recall(
                service, vectors, rng.sample(user_ids, recall_users), asked, now
            )
            typer.echo(f"kNN recall: {results['knn_recall']}")
    if recall_only:
        report(results, out, echo=False)
        return
    plan = bench_queries(rng, user_ids, warmup + queries)
    if compare:
        results["asked_comparison"] = compare_asked(service, plan, warmup, burst, pause_s)
    for knob in knobs or []:
        template, field, values = KNOB_COMPARISONS[knob]
        timing = (warmup, burst, pause_s)
        results[f"{knob}_comparison"] = compare_knob(service, plan, timing, template, field, values)
    if compare or knobs:
        report(results, out)
        return
    store = TokenStore(settings.tokens_path)
    tokens = {user: store.issue(user, tenant=TENANT) for user in dict.fromkeys(u for u, _ in plan)}
    server = serve(app, port)
    try:
        if live_sync:
            live_docs = row_docs(10**9, user_ids, pool_texts, pool, seed + 1000, now)
            args = (settings.elasticsearch.url, prefix, routing == USER, live_rate, live_docs)
            with LiveWriter(*args) as w:
                results.update(
                    measure(service, recorder, plan, tokens, port, warmup, burst, pause_s)
                )
            results["live_sync"] = {
                "rows_written": w.written.value,
                "rows_per_s": round(w.written.value / max(w.seconds, 1e-9), 1),
            }
        else:
            results.update(measure(service, recorder, plan, tokens, port, warmup, burst, pause_s))
    finally:
        server.should_exit = True
    results["live_sync_on"] = live_sync
    report(results, out)
    if not keep:
        for kind in (ROWS, TURNS):
            client.indices.delete(index=index_name(prefix, kind, 1))


if __name__ == "__main__":
    typer.run(main)
