"""The search service's own time (issue 44 item 5): `SearchService.search` with its defaults
against the raw work it cannot avoid, the query embedding plus one `_msearch` of its three arms,
query by query in alternating order, in one run.

    .venv/bin/python bench/bench_search_overhead.py --sets realtalk,chitchat --rounds 3

Each labeled set is built through the pipeline as the quality bench builds it (reused when
built). Per query and round: the service's search (default request, `top_k` 5, no query cache, so
every search embeds) and the raw path (the same model's encode, then the service's own three arm
bodies in one `_msearch`), the first of the two alternating. Printed per set: p50/p95 of each,
the ratio of the p50s, the load average, and where the service's own time goes (a cProfile of the
service searches, cumulative seconds per function of `ctxdb/`, the arms' `_msearch` and the
encode excluded by reading them apart).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated

import typer
from bench_search_quality import SETS
from search_quality_sets import LabeledQuery, QuerySet, build_memory

from ctxdb.contract.identity import Principal
from ctxdb.embedding.backends import make_embedder
from ctxdb.embedding.ids import parse_model_id
from ctxdb.index.client import make_client
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import ModelQueryEmbedder, SearchService, resolved
from ctxdb.settings import Settings, get_settings


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def raw_search(service: SearchService, query: LabeledQuery) -> Callable[[], object]:
    """The raw path of one query: the model's encode and one `_msearch` of the service's arms."""
    principal = Principal(user_id=query.user_id, tenant=query.tenant)
    request = SearchRequest(query=query.request.query)
    assert service.embedder is not None

    def run() -> object:
        embedder = resolved(service.embedder.embedder)  # type: ignore[attr-defined]
        instruction = getattr(embedder, "query_instruction", "")  # as the service embeds
        vector = [float(x) for x in embedder.encode([instruction + request.query])[0]]
        now = datetime.now(UTC)
        model = parse_model_id(embedder.model_id)[0]
        bodies = service.arm_bodies(principal, request, request.query, vector, now, model)
        return service.run_arms(bodies)

    return run


def service_search(service: SearchService, query: LabeledQuery) -> Callable[[], object]:
    principal = Principal(user_id=query.user_id, tenant=query.tenant)
    request = SearchRequest(query=query.request.query)
    return lambda: service.search(principal, request)


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def measure(qs: QuerySet, service: SearchService, rounds: int) -> dict[str, list[float]]:
    """Milliseconds of the service's search and of the raw path, alternating which goes first."""
    times: dict[str, list[float]] = {"service": [], "raw": []}
    pairs = [(service_search(service, q), raw_search(service, q)) for q in qs.queries]
    for round_ in range(rounds):
        for n, (svc, raw) in enumerate(pairs):
            if (n + round_) % 2:
                times["raw"].append(timed(raw))
                times["service"].append(timed(svc))
            else:
                times["service"].append(timed(svc))
                times["raw"].append(timed(raw))
    return times


def profile(qs: QuerySet, service: SearchService, top: int) -> None:
    """Cumulative time per `ctxdb` function over one pass of the service's searches."""
    calls = [service_search(service, q) for q in qs.queries]
    profiler = cProfile.Profile()
    profiler.enable()
    for call in calls:
        call()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = [
        (cumulative, f"{file.split('/ctxdb/', 1)[-1]}:{line} {name}")
        for (file, line, name), (_, _, _, cumulative, _) in stats.stats.items()  # type: ignore[attr-defined]
        if "/ctxdb/" in file
    ]
    per_search = 1000 / len(calls)
    for cumulative, where in sorted(rows, reverse=True)[:top]:
        typer.echo(f"  {cumulative * per_search:7.2f} ms/search  {where}")


def main(
    sets: Annotated[str, typer.Option(help="Comma-separated labeled sets.")] = "realtalk",
    rounds: Annotated[int, typer.Option(help="Passes over each set's queries.")] = 3,
    top: Annotated[int, typer.Option(help="Functions listed by the profile.")] = 25,
) -> None:
    base: Settings = get_settings()
    embedder = make_embedder(base.embedding)
    for name in sets.split(","):
        qs = SETS[name](base)
        build_memory(qs, embedder)
        client = make_client(qs.settings)
        service = SearchService(qs.settings, client, ModelQueryEmbedder(embedder, cache_size=0))
        measure(qs, service, 1)  # warm: model, node caches, connections
        load = os.getloadavg()[0]
        times = measure(qs, service, rounds)
        svc, raw = times["service"], times["raw"]
        typer.echo(
            f"{name}: {len(qs.queries)} queries x {rounds}, load {load:.1f} -> "
            f"{os.getloadavg()[0]:.1f}\n"
            f"  service p50 {statistics.median(svc):.1f} p95 {percentile(svc, 0.95):.1f} ms; "
            f"raw arms + embedding p50 {statistics.median(raw):.1f} "
            f"p95 {percentile(raw, 0.95):.1f} ms; "
            f"ratio p50 {statistics.median(svc) / statistics.median(raw):.2f}x"
        )
        profile(qs, service, top)


if __name__ == "__main__":
    typer.run(main)
