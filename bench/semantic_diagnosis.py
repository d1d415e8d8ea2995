"""The semantic arm alone on every set: approximate against exact kNN, and what text is embedded.

Each set must already be built (`bench_search_quality.py` builds and caches it). Per query, as
the turn's owner and with the service's own row filter:

  knn        the service's kNN body (int8_hnsw, num_candidates as configured): its cached rows
  knn-wide   the same kNN with num_candidates 5,000 (more than any user's rows): the graph
             search visits every row the filter admits
  plain      (below) brute-force cosine on float vectors of the same text: exact kNN
  <variant>  the rows the filter admits, re-embedded with another text per row and ranked by
             brute-force cosine here (the query embedded as the service embeds it):
               plain    the row's own text (what the pipeline embeds; checks the harness)
               prev     the previous turn of the conversation (both sides), then the row
               header   "<date>, <role>:" before the row's text (session date and speaker)
               asked    a user row after a turn whose answer asks something: the last question
                        of that answer, then the row (the reply to a question carries it)
               max      the better of `plain` and `prev` per row (two vectors per row)
               session  `plain` plus 0.5 x the cosine of the row's session vector (the
                        normalised mean of the session's row vectors): session-level expansion
               chunks   the best of `plain` and the vectors of a long row's further pieces
                        (`CHUNK_WORDS` words each, from word `CHUNK_WORDS` on): what the
                        model's window cuts off a long row, embedded apart
               mean     one vector per row: the normalised sum of `plain` and a long row's
                        further pieces' vectors (what `chunks` sees, without extra vectors)

Rows of a turn collapse to the turn's best row, as the service ranks an arm. Also counted: rows
of more than 190 words, about where the model's 256-token window truncates them.

Run: `.venv/bin/python bench/semantic_diagnosis.py [--sets chitchat,realistic,generator]
[--prefix-suffix -ctx]`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from bench_search_quality import CACHE, SETS, arm_alone, collected_rows, suffixed
from elasticsearch import helpers
from search_quality_metrics import query_metrics, summarize

from ctxdb.contract.identity import Principal
from ctxdb.embedding.backends import make_embedder
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.search.filters import row_filter
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import get_settings

Key = tuple[str, str]
VARIANTS = ("plain", "prev", "header", "asked")
WIDE = 5000
SESSION_WEIGHT = 0.5
LONG_WORDS = 190  # about the 254 content tokens of the model's window
CHUNK_WORDS = 150
ROW_FIELDS = ["conversation_id", "turn_id", "target", "ts", "text"]


def cached_vectors(embedder, set_name: str, variant: str, texts: list[str]) -> np.ndarray:
    """The texts' vectors, kept under bench/results/cache by a hash of the texts."""
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"semantic-{set_name}-{variant}-{embedder.model_id}-{digest}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.encode(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def all_rows(client, alias: str) -> dict[str, dict[str, Any]]:
    hits = helpers.scan(client, index=alias, query={"query": {"match_all": {}}}, _source=ROW_FIELDS)
    return {h["_id"]: h["_source"] for h in hits}


def row_texts(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Each variant's text of every row (see the module docstring)."""
    turns: dict[Key, dict[str, str]] = defaultdict(dict)
    started: dict[Key, str] = {}
    for r in rows.values():
        key = (r["conversation_id"], r["turn_id"])
        turns[key].setdefault(r["target"], r["text"] or "")
        started[key] = min(started.get(key, r["ts"]), r["ts"])
    previous: dict[Key, Key | None] = {}
    by_conv: dict[str, list[Key]] = defaultdict(list)
    for key in turns:
        by_conv[key[0]].append(key)
    for keys in by_conv.values():
        keys.sort(key=lambda k: (started[k], k[1]))
        for before, key in zip([None, *keys], keys, strict=False):
            previous[key] = before

    def both(key: Key | None) -> str:
        if key is None:
            return ""
        t = turns[key]
        return "\n".join(x for x in (t.get("user", ""), t.get("assistant", "")) if x)

    out: dict[str, dict[str, str]] = {v: {} for v in VARIANTS}
    for rid, r in rows.items():
        key = (r["conversation_id"], r["turn_id"])
        text = r["text"] or ""
        out["plain"][rid] = text
        out["prev"][rid] = "\n".join(x for x in (both(previous[key]), text) if x)
        asked = last_question(turns[previous[key]].get("assistant", "")) if previous[key] else ""
        out["asked"][rid] = f"{asked}\n{text}" if asked and r["target"] == "user" else text
        day = r["ts"][:10]
        out["header"][rid] = f"{day}, {r['target']}: {text}"
    return out


def last_question(text: str) -> str:
    """The last sentence of `text` that ends with a question mark ("" when none)."""
    found = re.findall(r"[^.!?\n]*\?", text)
    return found[-1].strip() if found else ""


def tail_chunks(texts: list[str]) -> tuple[list[int], list[str]]:
    """(row index, piece) of every row's words past the first `CHUNK_WORDS`, in pieces of
    `CHUNK_WORDS`."""
    owners, pieces = [], []
    for i, text in enumerate(texts):
        words = text.split()
        for start in range(CHUNK_WORDS, len(words), CHUNK_WORDS):
            owners.append(i)
            pieces.append(" ".join(words[start : start + CHUNK_WORDS]))
    return owners, pieces


def session_vectors(vectors: np.ndarray, convs: list[str]) -> np.ndarray:
    """Per row, the normalised mean of its conversation's row vectors (a session-level row)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, conv in enumerate(convs):
        groups[conv].append(i)
    out = np.empty_like(vectors)
    for members in groups.values():
        mean = vectors[members].mean(axis=0)
        out[members] = mean / (np.linalg.norm(mean) or 1.0)
    return out


def wide_knn(client, alias: str, vector: list[float], filt: dict) -> list[Key]:
    """The service's kNN body with num_candidates raised to WIDE (more than any user's rows:
    the graph search then visits every row the filter admits)."""
    knn = {
        "field": "embedding",
        "query_vector": vector,
        "k": 200,
        "num_candidates": WIDE,
        "filter": filt,
    }
    hits = client.search(index=alias, knn=knn, size=200, source=["conversation_id", "turn_id"])
    keys = [
        (h["_source"]["conversation_id"], h["_source"]["turn_id"]) for h in hits["hits"]["hits"]
    ]
    return list(dict.fromkeys(keys))[:25]


def allowed_ids(client, alias: str, filt: dict) -> list[str]:
    hits = helpers.scan(client, index=alias, query={"query": filt}, _source=False)
    return [h["_id"] for h in hits]


def main(
    sets: Annotated[str, typer.Option(help="Comma-separated set names.")] = (
        "chitchat,realistic,generator"
    ),
    prefix_suffix: Annotated[str, typer.Option(help="Appended to each set's prefix.")] = "",
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON.")] = None,
) -> None:
    base = get_settings()
    embedder = make_embedder(base.embedding)
    report: dict[str, Any] = {"model_id": embedder.model_id, "sets": {}}
    for name in sets.split(","):
        qs = SETS[name](base)
        suffixed(qs, base, prefix_suffix)
        client = make_client(qs.settings)
        alias = alias_name(qs.settings.elasticsearch.index_prefix, ROWS)
        service = SearchService(qs.settings, client, ModelQueryEmbedder(embedder))
        collected = collected_rows(service, qs, fresh=False)
        rows = all_rows(client, alias)
        texts = row_texts(rows)
        long_rows = {
            v: sum(len(t.split()) > LONG_WORDS for t in texts[v].values()) for v in VARIANTS
        }
        ids = list(rows)
        index = {rid: i for i, rid in enumerate(ids)}
        vectors = {
            v: cached_vectors(embedder, name, v, [texts[v][r] or " " for r in ids])
            for v in VARIANTS
        }
        keys = [(rows[r]["conversation_id"], rows[r]["turn_id"]) for r in ids]
        session_of = session_vectors(vectors["plain"], [k[0] for k in keys])
        owners, pieces = tail_chunks([texts["plain"][r] for r in ids])
        tails = cached_vectors(embedder, name, "chunks", pieces) if pieces else None
        owner_of = np.array(owners, dtype=np.int64)
        mean = vectors["plain"].copy()
        if tails is not None:
            np.add.at(mean, owner_of, tails)
        mean /= np.linalg.norm(mean, axis=1, keepdims=True)
        filters: dict[str, np.ndarray] = {}
        results: dict[str, list] = defaultdict(list)
        for c in collected:
            q = c.query
            principal = Principal(user_id=q.user_id, tenant=q.tenant)
            filt = row_filter(principal, q.request, qs.now)
            fkey = json.dumps(filt, sort_keys=True)
            if fkey not in filters:
                filters[fkey] = np.array([index[i] for i in allowed_ids(client, alias, filt)])
            rows_in = filters[fkey]
            qv = np.asarray(service.embedder.embed_query(c.text), dtype=np.float32)
            results["knn"].append((q.kind, query_metrics(arm_alone(c, "semantic"), q.relevant)))
            wide = wide_knn(client, alias, qv.tolist(), filt)
            results["knn-wide"].append((q.kind, query_metrics(wide, q.relevant)))
            sims = {v: vectors[v][rows_in] @ qv for v in VARIANTS}
            sims["max"] = np.maximum(sims["plain"], sims["prev"])
            sims["session"] = sims["plain"] + SESSION_WEIGHT * (session_of[rows_in] @ qv)
            best = vectors["plain"] @ qv
            if tails is not None:
                np.maximum.at(best, owner_of, tails @ qv)
            sims["chunks"] = best[rows_in]
            sims["mean"] = mean[rows_in] @ qv
            for variant, sim in sims.items():
                ranked = [keys[rows_in[i]] for i in np.argsort(-sim, kind="stable")]
                top = list(dict.fromkeys(ranked))[:25]
                results[variant].append((q.kind, query_metrics(top, q.relevant)))
        summary = {v: summarize(r) for v, r in results.items()}
        report["sets"][name] = {
            "rows": len(rows),
            f"rows over {LONG_WORDS} words": long_rows,
            "summary": summary,
        }
        typer.echo(f"== {name}: {len(rows)} rows; over {LONG_WORDS} words: {long_rows}")
        for variant, s in summary.items():
            a = s["all"]
            per_kind = " ".join(f"{k}={s[k]['any@10']:.3f}" for k in s if k not in ("all", "macro"))
            typer.echo(
                f"{variant:<7} any@5 {a['any@5']:.3f} any@10 {a['any@10']:.3f} any@25 "
                f"{a['any@25']:.3f} all@10 {a['all@10']:.3f} ndcg@10 {a['ndcg@10']:.3f} | "
                f"{per_kind}"
            )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
