"""Embedding models side by side (issue 43 item 5): all-MiniLM-L6-v2 on ONNX Runtime fp32
(today's default) and int8, bge-small-en-v1.5 fp32 and int8 (the Maven jars), same texts.

    .venv/bin/python bench/bench_embed_models.py --rows 600 --rounds 3 \
        --out bench/results/embed_models.json

Texts: `--rows` role rows sampled from the REALTALK and chitchat sets (their homes are landed and
derived first when they have no role rows; `--prefix-suffix` reads the homes the quality bench
built under that suffix). Each round runs, in a rotated order, every model's bare encode and the
embedding stage (`embed_role_rows` over the same rows as role rows of a fresh Delta store);
medians of rows/s, each against MiniLM's, and the load average (the machine is shared). Then the
query embedding as the search service does it (one query per call, the model's query form):
`--queries` questions of the same sets, each embedded by every model in a rotated order; p50/p95
milliseconds per model.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from bench_embed_backends import set_rows, stage_seconds
from bench_search_quality import suffixed
from search_quality_sets import chitchat_set, realtalk_set

from ctxdb.embedding.backends import make_embedder
from ctxdb.settings import get_settings

MODELS = {
    "minilm-onnx": ("all-MiniLM-L6-v2", "onnx"),
    "minilm-onnx-int8": ("all-MiniLM-L6-v2", "onnx-int8"),
    "bge-onnx": ("bge-small-en-v1.5", "onnx"),
    "bge-onnx-int8": ("bge-small-en-v1.5", "onnx-int8"),
}


def main(
    rows: Annotated[int, typer.Option(help="Texts per measurement.")] = 600,
    rounds: Annotated[int, typer.Option(help="Interleaved rounds (medians reported).")] = 3,
    queries: Annotated[int, typer.Option(help="Questions embedded one at a time.")] = 200,
    batch_size: Annotated[int, typer.Option(help="Texts per model batch.")] = 64,
    prefix_suffix: Annotated[str, typer.Option(help="Read the sets' homes with this suffix.")] = "",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    frames, questions = [], []
    for make in (realtalk_set, chitchat_set):
        qs = make(base)
        suffixed(qs, base, prefix_suffix)
        frames.append(set_rows(qs))
        questions += [q.request.query for q in qs.queries]
    sample = pl.concat(frames, how="diagonal_relaxed").sample(n=rows, seed=43)
    texts = sample.get_column("text").to_list()
    embedders: dict[str, Any] = {}
    for label, (model, backend) in MODELS.items():
        settings = base.embedding.model_copy(update={"model": model, "backend": backend})
        embedders[label] = make_embedder(settings, batch_size=batch_size)
        embedders[label].encode(texts[:batch_size])  # load and warm up, untimed
    names = list(MODELS)
    rates: dict[str, list[float]] = {f"{m}/{k}": [] for m in names for k in ("bare", "stage")}
    loads = []
    for r in range(rounds):
        for label in names[r % len(names) :] + names[: r % len(names)]:
            started = time.perf_counter()
            embedders[label].encode(texts)
            rates[f"{label}/bare"].append(len(texts) / (time.perf_counter() - started))
            rates[f"{label}/stage"].append(
                len(texts) / stage_seconds(embedders[label], sample, batch_size)
            )
            loads.append(os.getloadavg()[0])
        typer.echo(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()))
    med = {k: statistics.median(v) for k, v in rates.items()}
    report = {
        "query_ms": query_latency(embedders, questions, queries),
        "rows": len(texts),
        "rounds": rounds,
        "rows_per_s_median": {k: round(v, 1) for k, v in med.items()},
        "vs_minilm": {
            k: round(v / med[f"minilm-onnx/{k.split('/')[1]}"], 3) for k, v in med.items()
        },
        "load_average_1m": [
            round(min(loads), 2),
            round(statistics.median(loads), 2),
            round(max(loads), 2),
        ],
    }
    typer.echo(json.dumps(report, indent=2))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))


def query_latency(embedders: dict[str, Any], questions: list[str], n: int) -> dict[str, Any]:
    """p50/p95 milliseconds of embedding one question, per model, the models rotated per
    question so that each sees the same load."""
    sample = [questions[i * len(questions) // n] for i in range(min(n, len(questions)))]
    names = list(embedders)
    took: dict[str, list[float]] = {name: [] for name in names}
    for i, question in enumerate(sample):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            started = time.perf_counter()
            embedder = embedders[name]
            embedder.encode([getattr(embedder, "query_instruction", "") + question])
            took[name].append((time.perf_counter() - started) * 1000)
    return {
        name: {
            "p50": round(statistics.median(ms), 2),
            "p95": round(sorted(ms)[round(0.95 * (len(ms) - 1))], 2),
        }
        for name, ms in took.items()
    }


if __name__ == "__main__":
    typer.run(main)
