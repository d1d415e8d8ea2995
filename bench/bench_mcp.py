"""MCP `search_conversations` latency (p50/p95) against the same query through the Python API.

Memory is the synthetic index of `bench_search_latency.py` (topic texts plus filler, pool vectors
from the real model plus noise, one TurnLog per turn), built once per size and kept. One user's
token drives three paths with the same queries (paraphrases, exact strings, misspellings):

* Python API: `SearchService.search` in this process (query embedding, `_msearch`, fusion,
  TurnLog materialization);
* MCP over stdio: the SDK client talking to a `ctxdb mcp` subprocess;
* MCP over streamable HTTP: the SDK client talking to `/mcp` of a `ctxdb serve` subprocess.

Each query goes through the three in a rotating order, so all see the same load and caches. The
MCP figures are client wall time of `tools/call` (JSON-RPC, the server's token check, the same
search, bounded output and structured content, the client's parsing). The difference and ratio
to the Python API are computed from this run's own samples (target: MCP adds at most 15 ms at p50).

Run: `ELASTICSEARCH_URL=... .venv/bin/python bench/bench_mcp.py --rows 20000`.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx2
import typer
from bench_search_latency import TENANT, bench_queries, build_index, percentiles, row_docs
from bench_search_latency import vector_pool as make_pool
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from ctxdb.auth.credentials import Principal, TokenStore
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import get_settings

CTXDB = str(Path(sys.executable).with_name("ctxdb"))


def wait_http(url: str, process: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError("ctxdb serve exited during start-up")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout}s") from None
            time.sleep(0.3)


def difference(mcp: list[float], python: list[float]) -> dict[str, float]:
    """What MCP adds: the difference of the percentiles, their ratio, and the median of the
    per-query differences (the same query, moments apart: robust to load drifting in the run)."""
    a, b = percentiles(mcp), percentiles(python)
    paired = statistics.median(m - p for m, p in zip(mcp, python, strict=True))
    return {
        "p50_added_ms": round(a["p50_ms"] - b["p50_ms"], 1),
        "p95_added_ms": round(a["p95_ms"] - b["p95_ms"], 1),
        "p50_ratio": round(a["p50_ms"] / b["p50_ms"], 3),
        "paired_median_added_ms": round(paired * 1000, 1),
    }


def main(
    rows: Annotated[int, typer.Option(help="Role rows to index (synthetic).")] = 20_000,
    users: Annotated[int, typer.Option(help="Distinct users owning the rows.")] = 50,
    queries: Annotated[int, typer.Option(help="Measured queries per path.")] = 200,
    warmup: Annotated[int, typer.Option()] = 20,
    seed: Annotated[int, typer.Option()] = 7,
    port: Annotated[int, typer.Option(help="Port of the `ctxdb serve` subprocess.")] = 8766,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    prefix = f"bench-mcp-{rows}"
    settings = base.replace(home=base.home / prefix, elasticsearch={"index_prefix": prefix})
    client = make_client(settings)
    embedder = SentenceTransformerEmbedder(settings.embedding.model, batch_size=64)
    if not client.indices.exists_alias(name=alias_name(prefix, ROWS)):
        rng = random.Random(seed)
        pool_texts, pool = make_pool(embedder, rng)
        docs = row_docs(rows, users, pool_texts, pool, seed, datetime.now(UTC))
        typer.echo(f"indexed {build_index(client, prefix, docs)} documents")
    count = client.count(index=alias_name(prefix, ROWS))["count"]

    plan = bench_queries(random.Random(seed), users, warmup + queries)
    user = plan[0][0]
    principal = Principal(user_id=user, tenant=TENANT)
    token = TokenStore(settings.tokens_path).issue(user, tenant=TENANT, label="bench_mcp")
    service = SearchService(settings, client, ModelQueryEmbedder(embedder))
    env = {
        **os.environ,
        "CTXDB_HOME": str(settings.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    serve = subprocess.Popen(
        [CTXDB, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    samples: dict[str, list[float]] = {"python_api": [], "mcp_stdio": [], "mcp_http": []}

    async def measure() -> None:
        async with AsyncExitStack() as stack:
            stdio = await stack.enter_async_context(
                Client(
                    stdio_client(
                        StdioServerParameters(
                            command=CTXDB, args=["mcp"], env={**env, "CTXDB_TOKEN": token}
                        ),
                        errlog=subprocess.DEVNULL,
                    )
                )
            )
            http_client = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
            http = await stack.enter_async_context(
                Client(
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http_client)
                )
            )

            def through(mcp: Client) -> Callable[[str], Awaitable[Any]]:
                async def call(query: str) -> Any:
                    result = await mcp.call_tool(
                        "search_conversations", {"query": query, "top_k": 10}
                    )
                    if result.is_error:
                        raise RuntimeError(result.content[0].text)
                    return result

                return call

            async def python(query: str) -> Any:
                return service.search(principal, SearchRequest(query=query, top_k=10))

            paths = {"python_api": python, "mcp_stdio": through(stdio), "mcp_http": through(http)}
            names = list(paths)
            for i, (_, query) in enumerate(plan):
                order = names[i % 3 :] + names[: i % 3]
                for name in order:
                    started = time.perf_counter()
                    await paths[name](query)
                    elapsed = time.perf_counter() - started
                    if i >= warmup:
                        samples[name].append(elapsed)

    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", serve)
        anyio.run(measure)
    finally:
        serve.terminate()
        serve.wait(30)

    results: dict[str, Any] = {"rows": count, "user": user, "queries": queries}
    results |= {name: percentiles(values) for name, values in samples.items()}
    for name in ("mcp_stdio", "mcp_http"):
        results[f"{name}_vs_python"] = difference(samples[name], samples["python_api"])
    typer.echo(json.dumps(results, indent=2))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    typer.run(main)
