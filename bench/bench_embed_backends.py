"""Embedding backends side by side (issue 17 item 2): torch, ONNX Runtime fp32, ONNX int8.

    .venv/bin/python bench/bench_embed_backends.py --rows 1500 --rounds 3 \
        --out bench/results/embed_backends.json

Texts: the role rows of the two labeled sets of the search quality bench (`search_quality_sets`;
each set's home is landed and derived first when it has no role rows; no Elasticsearch needed).

Speed: `--rows` texts sampled from both sets, in `--rounds` rounds; each round runs, in a rotated
order, every backend's bare encode (torch: the sentence-transformers `model.encode`; ONNX: the
embedder's `encode`) and the embedding stage (`embed_role_rows` over the same rows as role rows of
a fresh Delta store). Medians of rows/s, ratios against torch's bare encode and against the
backend's own bare encode, and the load average (the machine is shared).

Quality: per set, every row and query embedded by each backend; rows ranked by cosine to the query
(the semantic arm alone, in the query's user, scope and targets; a turn scores its best row); the
share of queries whose top-10 turns are identical to torch's (also counting lists that differ only
between turns whose torch scores tie within 1e-6), and any@10 per backend.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import polars as pl
import torch
import typer
from search_quality_sets import QuerySet, generator_set, realistic_set

from ctxdb.embedding.backends import make_embedder
from ctxdb.embedding.ids import backend_model_id
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.settings import Settings, get_settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, ROLE_ROWS_SCHEMA

BACKENDS = ("torch", "onnx", "onnx-int8")
DEFAULT_TARGETS = ["user", "assistant", "summary", "notes", "attachment"]
TOP = 10
TIE = 1e-6  # torch scores closer than this are ties (fp32 noise between equally similar turns)


def set_rows(qs: QuerySet) -> pl.DataFrame:
    """The set's role rows with non-blank text (landed and derived when the home has none)."""
    store = DeltaStore.from_settings(qs.settings)
    if not store.exists(ROLE_ROWS):
        if not any(Path(qs.settings.landing_uri).glob("events-*")):
            qs.write_landing(qs.settings)
        land(store, qs.settings.landing_uri)
        derive(store, qs.settings)
    rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA)
    return rows.filter(pl.col("text").str.strip_chars().str.len_chars() > 0)


def embedders(base: Settings, batch_size: int) -> dict[str, Any]:
    """One loaded embedder per backend (exports come from the on-disk cache after the first)."""
    out = {}
    for backend in BACKENDS:
        embedder = make_embedder(
            base.embedding.model_copy(update={"backend": backend}), batch_size=batch_size
        )
        embedder.load()
        if embedder.model_id != backend_model_id(base.embedding.model, backend):
            raise SystemExit(f"{backend}: fell back to torch ({embedder.model_id})")
        out[backend] = embedder
    return out


def bare_encode(backend: str, embedder: Any, texts: list[str], batch_size: int) -> np.ndarray:
    """The backend without ctxdb around it: torch's `model.encode`, the ONNX embedder's encode."""
    if backend == "torch":
        return embedder.model.encode(
            texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
    return embedder.encode(texts)


def stage_seconds(embedder: Any, rows: pl.DataFrame, batch_size: int) -> float:
    """Seconds of `embed_role_rows` over `rows` as the role rows of a fresh Delta store."""
    with tempfile.TemporaryDirectory(prefix="bench-embed-backends-") as root:
        store = DeltaStore(root)
        store.append(ROLE_ROWS, rows, ROLE_ROWS_SCHEMA)
        started = time.perf_counter()
        report = embed_role_rows(store, embedder, batch_size=batch_size)
        seconds = time.perf_counter() - started
    if report.embedded != rows.get_column("text_hash").n_unique():
        raise SystemExit(f"stage embedded {report.embedded} of {rows.height}: {report}")
    return seconds


def speed(
    embedders_: dict[str, Any], rows: pl.DataFrame, rounds: int, batch_size: int
) -> dict[str, Any]:
    """Rows/s per backend of bare encode and stage, interleaved in rotated rounds."""
    texts = rows.get_column("text").to_list()
    for backend, embedder in embedders_.items():  # warm-up, untimed
        bare_encode(backend, embedder, texts[:batch_size], batch_size)
    rates: dict[str, list[float]] = {f"{b}/{k}": [] for b in BACKENDS for k in ("bare", "stage")}
    loads = []
    for r in range(rounds):
        order = BACKENDS[r % 3 :] + BACKENDS[: r % 3]
        for backend in order:
            started = time.perf_counter()
            bare_encode(backend, embedders_[backend], texts, batch_size)
            rates[f"{backend}/bare"].append(len(texts) / (time.perf_counter() - started))
            seconds = stage_seconds(embedders_[backend], rows, batch_size)
            rates[f"{backend}/stage"].append(len(texts) / seconds)
            loads.append(os.getloadavg()[0])
        typer.echo(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()))
    med = {k: statistics.median(v) for k, v in rates.items()}
    torch_bare = med["torch/bare"]
    return {
        "rows": len(texts),
        "rounds": rounds,
        "rows_per_s_median": {k: round(v, 1) for k, v in med.items()},
        "rows_per_s_all": {k: [round(x, 1) for x in v] for k, v in rates.items()},
        "bare_vs_torch": {b: round(med[f"{b}/bare"] / torch_bare, 3) for b in BACKENDS},
        "stage_vs_torch": {b: round(med[f"{b}/stage"] / torch_bare, 3) for b in BACKENDS},
        "stage_vs_own_bare": {b: round(med[f"{b}/stage"] / med[f"{b}/bare"], 3) for b in BACKENDS},
        "load_average_1m": {
            "median": round(statistics.median(loads), 2),
            "min": round(min(loads), 2),
            "max": round(max(loads), 2),
        },
    }


def gemm_gflops(seconds: float = 2.0, size: int = 2048) -> dict[str, float]:
    """This machine's fp32 GEMM rate (GFLOP/s) in torch (MKL) and in ONNX Runtime (MLAS), on the
    threads the backends use: the ceiling each backend's dense layers run against, which decides
    the ONNX / torch ratio more than anything ctxdb does (MKL takes its AVX2 path on AMD CPUs)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    a = np.random.default_rng(0).random((size, size), dtype=np.float32)
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [size, size]) for n in "abc"]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "g", spec[:2], spec[2:]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    t = torch.from_numpy(a)
    runs = {"torch": lambda: t @ t, "onnxruntime": lambda: session.run(None, {"a": a, "b": a})}
    out = {}
    for name, run in runs.items():
        run()
        started, count = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            run()
            count += 1
        out[name] = round(2 * size**3 * count / (time.perf_counter() - started) / 1e9, 1)
    return out


def ranked_turns(
    rows: pl.DataFrame, vectors: np.ndarray, query: np.ndarray, q: Any
) -> tuple[list[tuple[str, str]], dict[tuple[str, str], float]]:
    """Top turns by cosine (best row per turn) inside the query's user, scope and targets, and
    every such turn's score."""
    request = q.request
    mask = (rows.get_column("tenant") == q.tenant) & (rows.get_column("user_id") == q.user_id)
    if request.scope == "conversation" and request.conversation_id:
        mask &= rows.get_column("conversation_id") == request.conversation_id
    mask &= rows.get_column("target").is_in(request.targets or DEFAULT_TARGETS)
    idx = np.flatnonzero(mask.to_numpy())
    scores = vectors[idx] @ query
    frame = pl.DataFrame(
        {
            "conversation_id": rows.get_column("conversation_id").gather(idx),
            "turn_id": rows.get_column("turn_id").gather(idx),
            "score": scores,
            "i": idx,
        }
    )
    best = (
        frame.group_by("conversation_id", "turn_id")
        .agg(pl.col("score").max(), pl.col("i").min())
        .sort(["score", "i"], descending=[True, False])
    )
    score = {(c, t): float(v) for c, t, v, _ in best.iter_rows()}
    return [(c, t) for c, t, _, _ in best.head(TOP).iter_rows()], score


def same_up_to_ties(
    top: list[tuple[str, str]], reference: list[tuple[str, str]], score: dict, tie: float
) -> bool:
    """The lists agree at every rank, or differ only between turns whose reference scores are
    within `tie` (float noise between equally similar turns)."""
    return len(top) == len(reference) and all(
        a == b or abs(score.get(a, -2.0) - score[b]) < tie
        for a, b in zip(top, reference, strict=True)
    )


def quality(qs: QuerySet, embedders_: dict[str, Any], batch_size: int) -> dict[str, Any]:
    """Top-10 identity with torch and any@10 per backend, on one labeled set."""
    rows = set_rows(qs)
    texts = rows.get_column("text").to_list()
    queries = [q.request.query for q in qs.queries]
    tops: dict[str, list[list[tuple[str, str]]]] = {}
    scores: list[dict[tuple[str, str], float]] = []
    for backend, embedder in embedders_.items():
        vectors = bare_encode(backend, embedder, texts, batch_size)
        qvec = bare_encode(backend, embedder, queries, batch_size)
        ranked = [ranked_turns(rows, vectors, qvec[i], q) for i, q in enumerate(qs.queries)]
        tops[backend] = [top for top, _ in ranked]
        if backend == "torch":
            scores = [score for _, score in ranked]
    any10 = {
        b: statistics.fmean(
            bool(set(top) & q.relevant) for top, q in zip(t, qs.queries, strict=True)
        )
        for b, t in tops.items()
    }
    out: dict[str, Any] = {"rows": rows.height, "queries": len(qs.queries)}
    for backend in BACKENDS[1:]:
        same_list = [a == b for a, b in zip(tops[backend], tops["torch"], strict=True)]
        same_set = [set(a) == set(b) for a, b in zip(tops[backend], tops["torch"], strict=True)]
        tied = [
            same_up_to_ties(a, b, score, TIE)
            for a, b, score in zip(tops[backend], tops["torch"], scores, strict=True)
        ]
        out[backend] = {
            "top10_identical_share": round(statistics.fmean(same_list), 4),
            "top10_identical_up_to_ties_share": round(statistics.fmean(tied), 4),
            "top10_same_set_share": round(statistics.fmean(same_set), 4),
            "any@10": round(any10[backend], 4),
            "any@10_delta_points": round(100 * (any10[backend] - any10["torch"]), 2),
        }
    out["torch"] = {"any@10": round(any10["torch"], 4)}
    return out


def main(
    rows: Annotated[int, typer.Option(help="Texts per speed measurement.")] = 1500,
    rounds: Annotated[int, typer.Option(help="Interleaved rounds (medians reported).")] = 3,
    batch_size: Annotated[int, typer.Option(help="Texts per model batch.")] = 64,
    sets: Annotated[str, typer.Option(help="Comma-separated: generator, realistic.")] = (
        "generator,realistic"
    ),
    skip_quality: Annotated[bool, typer.Option(help="Speed only.")] = False,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    query_sets = [
        realistic_set(base) if n == "realistic" else generator_set(base) for n in sets.split(",")
    ]
    embedders_ = embedders(base, batch_size)
    pool = pl.concat([set_rows(qs) for qs in query_sets]).unique("text_hash", keep="first")
    sample = pool.sample(min(rows, pool.height), seed=17, shuffle=True)
    report: dict[str, Any] = {
        "cores": os.cpu_count(),
        "threads": {
            b: getattr(e, "threads", torch.get_num_threads()) for b, e in embedders_.items()
        },
        "batch_size": batch_size,
        "gemm_gflops": gemm_gflops(),
        "speed": speed(embedders_, sample, rounds, batch_size),
    }
    typer.echo(f"fp32 GEMM GFLOP/s on this machine: {report['gemm_gflops']}")
    typer.echo(json.dumps(report["speed"], indent=2))
    if not skip_quality:
        report["quality"] = {qs.name: quality(qs, embedders_, batch_size) for qs in query_sets}
        typer.echo(json.dumps(report["quality"], indent=2))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
