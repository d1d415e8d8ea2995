"""The ONNX Runtime embedding backends against torch: the export and its cache, vectors, order,
fallback, and model ids that keep the vectors of different backends apart.

Real all-MiniLM-L6-v2 weights, real exports (into a per-module cache directory), real Delta.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest_index import role_rows, turn_tables, write_rows
from deltalake import write_deltalake

from ctxdb.embedding import export
from ctxdb.embedding.backends import (
    MatchedEmbedder,
    make_embedder,
    memory_embedder,
    resolve_backend,
)
from ctxdb.embedding.ids import backend_model_id
from ctxdb.embedding.model import (
    DEFAULT_MODEL,
    EmbedderUnavailable,
    SentenceTransformerEmbedder,
    resolve_model_path,
)
from ctxdb.embedding.runtime import OnnxEmbedder, length_batches
from ctxdb.embedding.stage import embed_role_rows, stored_model_ids
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.index.versions import alias_target, ensure_index, index_meta
from ctxdb.search.service import (
    ModelQueryEmbedder,
    default_embedder,
    index_matched_embedder,
    index_model_ids,
)
from ctxdb.settings import EmbeddingSettings
from ctxdb.storage.tables import EMBEDDINGS, ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA

pytestmark = pytest.mark.model

TEXTS = [
    "the openpyxl timezone bug",
    "How do I convert a pandas dataframe column from UTC to Europe/Berlin without losing rows?",
    "ok",
    "Résumé of the Q3 budget meeting: travel costs 12% over plan; action items for Zoë.",
    "control\x07chars and a lone surrogate \ud800 are cleaned first",
    " ".join(f"word{i} spreadsheet" for i in range(400)),  # longer than the 256-token window
    "short",
    "a medium length sentence about deploying the search server behind a proxy",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ONNX export cache: `onnx/` under the embedding group's `cache_dir`."""
    return tmp_path_factory.mktemp("ctxdb-cache") / "onnx"


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return SentenceTransformerEmbedder().encode(TEXTS)


@pytest.fixture(scope="module")
def fp32(cache_dir: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(cache_dir=cache_dir, batch_size=3)
    embedder.load()
    return embedder


@pytest.fixture(scope="module")
def int8(cache_dir: Path) -> OnnxEmbedder:
    embedder = OnnxEmbedder(cache_dir=cache_dir, quantize=True, batch_size=3)
    embedder.load()
    return embedder


def exports(cache_dir: Path) -> list[Path]:
    return sorted(p for p in cache_dir.iterdir() if (p / export.MODEL_FILE).exists())


def test_fp32_vectors_match_torch(fp32: OnnxEmbedder, torch_vectors: np.ndarray) -> None:
    assert fp32.active_backend == "onnx"
    vectors = fp32.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (vectors * torch_vectors).sum(axis=1).min() >= 0.9999


def test_int8_vectors_stay_close_to_torch(int8: OnnxEmbedder, torch_vectors: np.ndarray) -> None:
    """Per-channel dynamic int8: every vector within cos 0.95 of torch, 0.985 on average
    (measured: mean 0.993, min 0.988 over 500 generator role rows; the 2-letter "ok": 0.962)."""
    assert int8.active_backend == "onnx-int8"
    cos = (int8.encode(TEXTS) * torch_vectors).sum(axis=1)
    assert cos.min() >= 0.95 and cos.mean() >= 0.985


def test_export_is_cached_and_reused(
    fp32: OnnxEmbedder, int8: OnnxEmbedder, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fp32.export_path != int8.export_path
    assert exports(cache_dir) == sorted([fp32.export_path.parent, int8.export_path.parent])
    meta = json.loads((fp32.export_path.parent / export.META_FILE).read_text())
    assert meta["weights_sha256"] == export.weights_digest(resolve_model_path(DEFAULT_MODEL))

    def no_export(*args: object) -> None:  # a spy: any call here would be a second export
        raise AssertionError("exported again")

    monkeypatch.setattr(export, "export_onnx", no_export)
    monkeypatch.setattr(export, "quantize_int8", no_export)
    again = OnnxEmbedder(cache_dir=cache_dir, quantize=True)
    assert again.model_id == backend_model_id(DEFAULT_MODEL, "onnx-int8")
    assert again.export_path == int8.export_path


def test_changed_weights_export_again(fp32: OnnxEmbedder, cache_dir: Path, tmp_path: Path) -> None:
    """A copy of the model whose config differs has another weights hash: a new export."""
    copy = tmp_path / "model"
    shutil.copytree(resolve_model_path(DEFAULT_MODEL), copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(config | {"ctxdb_test": 1}))
    assert export.weights_digest(copy) != export.weights_digest(resolve_model_path(DEFAULT_MODEL))
    before = exports(cache_dir)
    path = export.ensure_export(str(copy), cache_dir)
    assert path.parent not in before and exports(cache_dir) == sorted([*before, path.parent])


def test_length_buckets_return_vectors_in_input_order(fp32: OnnxEmbedder) -> None:
    batches = length_batches([5, 1, 4, 1, 3], 2)
    assert [b.tolist() for b in batches] == [[1, 3], [4, 2], [0]]
    shuffled = [TEXTS[i] for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    together = fp32.encode(shuffled)
    alone = np.vstack([fp32.encode([text]) for text in shuffled])
    assert (together * alone).sum(axis=1).min() >= 0.9999
    assert fp32.encode([]).shape == (0, 384)


def test_failed_export_falls_back_to_torch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    torch_vectors: np.ndarray,
) -> None:
    def broken_export(*args: object) -> None:  # a fake: this test is about the exporter failing
        raise RuntimeError("exporter exploded")

    monkeypatch.setattr(export, "export_onnx", broken_export)
    embedder = OnnxEmbedder(cache_dir=tmp_path / "empty-cache")
    with caplog.at_level(logging.WARNING, logger="ctxdb.embedding.runtime"):
        assert embedder.model_id == DEFAULT_MODEL  # the torch id: its vectors are torch's
    assert embedder.active_backend == "torch"
    warnings = [r for r in caplog.records if r.name == "ctxdb.embedding.runtime"]
    assert len(warnings) == 1 and "exporter exploded" in warnings[0].getMessage()
    assert (embedder.encode(TEXTS) * torch_vectors).sum(axis=1).min() >= 0.99999
    assert not any((tmp_path / "empty-cache").glob("*/model.onnx"))


def test_backends_never_share_cached_vectors(delta_store, fp32: OnnxEmbedder, embedder) -> None:
    """Switching backend re-embeds every text under its own model id; nothing is reused."""
    ids = {backend_model_id(DEFAULT_MODEL, b) for b in ("torch", "onnx", "onnx-int8")}
    assert ids == {DEFAULT_MODEL, f"{DEFAULT_MODEL}+onnx", f"{DEFAULT_MODEL}+onnx-int8"}
    write_rows(delta_store, role_rows(["the openpyxl timezone bug", "budget meeting notes"]))
    first = embed_role_rows(delta_store, embedder, batch_size=8)
    second = embed_role_rows(delta_store, fp32, batch_size=8)
    assert (first.embedded, second.embedded, second.cache_hits) == (2, 2, 0)
    cached = delta_store.read(EMBEDDINGS).group_by("model_id").len()
    assert dict(cached.iter_rows()) == {DEFAULT_MODEL: 2, f"{DEFAULT_MODEL}+onnx": 2}
    status = delta_store.read(ROW_EMBEDDINGS)
    assert status.get_column("model_id").unique().to_list() == [f"{DEFAULT_MODEL}+onnx"]
    assert embed_role_rows(delta_store, fp32, batch_size=8).embedded == 0


def test_settings_pick_the_backend(cache_dir: Path) -> None:
    onnx = make_embedder(EmbeddingSettings(backend="onnx-int8", cache_dir=cache_dir.parent))
    assert isinstance(onnx, OnnxEmbedder) and onnx.quantize and onnx.cache_dir == cache_dir
    torch = make_embedder(EmbeddingSettings(backend="torch"))
    assert isinstance(torch, SentenceTransformerEmbedder)
    default = make_embedder(EmbeddingSettings())  # auto, with no vectors yet: ONNX fp32
    assert isinstance(default, OnnxEmbedder) and not default.quantize
    with pytest.raises(ValueError, match="unknown embedding backend"):
        make_embedder(EmbeddingSettings().model_copy(update={"backend": "tensorrt"}))


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ((), "onnx"),
        (("torch",), "torch"),
        (("onnx-int8",), "onnx-int8"),
        (("torch", "onnx"), "onnx"),
        (("torch", "onnx-int8"), "onnx-int8"),
    ],
)
def test_auto_keeps_the_backend_of_the_memory(stored: tuple[str, ...], expected: str) -> None:
    ids = {backend_model_id(DEFAULT_MODEL, b) for b in stored} | {"another-model+onnx"}
    assert resolve_backend("auto", DEFAULT_MODEL, ids) == expected
    assert resolve_backend("torch", DEFAULT_MODEL, ids) == "torch"
    on_gpu = "torch" if not stored else expected  # ONNX Runtime runs here on the CPU only
    assert resolve_backend("auto", DEFAULT_MODEL, ids, device="cuda") == on_gpu


def test_auto_never_re_embeds_a_torch_memory(delta_store, embedder, cache_dir: Path) -> None:
    auto = EmbeddingSettings(cache_dir=cache_dir.parent, batch_size=8)
    assert stored_model_ids(delta_store, [DEFAULT_MODEL]) == set()
    assert isinstance(memory_embedder(auto, delta_store), OnnxEmbedder)
    write_rows(delta_store, role_rows(["the openpyxl timezone bug", "budget meeting notes"]))
    assert embed_role_rows(delta_store, embedder, batch_size=8).embedded == 2  # built with torch
    assert stored_model_ids(delta_store, [DEFAULT_MODEL]) == {DEFAULT_MODEL}
    kept = memory_embedder(auto, delta_store)
    assert isinstance(kept, SentenceTransformerEmbedder) and kept.model_id == DEFAULT_MODEL
    write_rows(delta_store, role_rows(["a third row"], start=2))
    report = embed_role_rows(delta_store, kept, batch_size=8)
    assert (report.to_process, report.embedded) == (1, 1)

    onnx = memory_embedder(auto.model_copy(update={"backend": "onnx"}), delta_store)
    assert embed_role_rows(delta_store, onnx, batch_size=8).embedded == 3  # an explicit switch
    assert stored_model_ids(delta_store, [DEFAULT_MODEL]) == {f"{DEFAULT_MODEL}+onnx"}
    assert isinstance(memory_embedder(auto, delta_store), OnnxEmbedder)


def test_model_ids_are_read_from_the_data_when_the_log_has_no_statistics(delta_store) -> None:
    statuses = pl.DataFrame(
        {
            "row_id": ["r1", "r2"],
            "model_id": [DEFAULT_MODEL, DEFAULT_MODEL],
            "text_hash": ["h1", "h2"],
            "embedding_status": ["ok", "ok"],
            "error": [None, None],
            "attempts": [0, 0],
            "updated_at": [datetime.now(UTC)] * 2,
            "expires_at": [None, None],
        }
    ).to_arrow()
    write_deltalake(
        delta_store.uri(ROW_EMBEDDINGS),
        statuses.cast(ROW_EMBEDDINGS_SCHEMA),
        configuration={"delta.dataSkippingNumIndexedCols": "1"},  # statistics of row_id only
    )
    files = pl.DataFrame(delta_store.table(ROW_EMBEDDINGS).get_add_actions(flatten=True))
    assert "min.model_id" not in files.columns
    assert stored_model_ids(delta_store, [DEFAULT_MODEL]) == {DEFAULT_MODEL}


def test_search_embeds_queries_on_the_backend_of_the_live_index(
    settings, es, cache_dir: Path, embedder, torch_vectors: np.ndarray
) -> None:
    auto = settings.replace(embedding={"cache_dir": cache_dir.parent})
    matched = index_matched_embedder(auto, es)
    assert isinstance(matched.inner, OnnxEmbedder)  # provisional: no index yet
    ensure_index(es, auto.elasticsearch.index_prefix, ROWS, dims=384, model_id=DEFAULT_MODEL)
    matched.load()  # the next query finds the index built with torch
    assert isinstance(matched.inner, SentenceTransformerEmbedder)
    query = default_embedder(auto, es).embed_query(TEXTS[1])
    assert float(np.dot(query, torch_vectors[1])) == pytest.approx(1.0, abs=1e-6)

    down = make_client(auto.replace(elasticsearch={"url": "http://127.0.0.1:9", "max_retries": 0}))
    with pytest.raises(EmbedderUnavailable, match="cannot read the index's model id"):
        index_matched_embedder(auto, down).load()
    assert ModelQueryEmbedder(index_matched_embedder(auto, down)).embed_query("q") is None


def test_a_switch_of_backend_moves_the_index_and_the_query_embedder_with_it(
    delta_store, settings, es, embedder, fp32: OnnxEmbedder, cache_dir: Path
) -> None:
    """A torch memory, moved to ONNX by one run with the backend set: the sync records the new
    model id in the live index, so `auto` then embeds queries with ONNX as well."""
    auto = settings.replace(embedding={"cache_dir": cache_dir.parent})
    write_rows(delta_store, role_rows(TEXTS[:3]))
    turn_tables(delta_store, 3)
    for model in (embedder, fp32):  # torch first, then one run with CTXDB_EMBEDDING_BACKEND=onnx
        embed_role_rows(delta_store, model, batch_size=8)
        sync_live(delta_store, es, auto, model_id=model.model_id)
        live = alias_target(es, alias_name(auto.elasticsearch.index_prefix, ROWS))
        assert index_meta(es, live)["model_id"] == model.model_id
        assert index_model_ids(es, auto) == {model.model_id}
    assert memory_embedder(auto.embedding, delta_store).model_id == fp32.model_id
    assert isinstance(index_matched_embedder(auto, es).inner, OnnxEmbedder)


def test_a_switch_back_takes_every_row_back(delta_store, embedder, fp32: OnnxEmbedder) -> None:
    """torch, then ONNX, then torch again: the last run finds statuses of another model id and
    takes every row back (from the cache), not only the rows changed since torch's old
    watermark."""
    write_rows(delta_store, role_rows(TEXTS[:4]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    assert embed_role_rows(delta_store, fp32, batch_size=8).embedded == 4
    write_rows(delta_store, role_rows(["one row more"], start=4))
    back = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (back.to_process, back.cache_hits, back.embedded) == (5, 4, 1)
    statuses = delta_store.read(ROW_EMBEDDINGS)
    assert statuses.get_column("model_id").unique().to_list() == [DEFAULT_MODEL]
    assert stored_model_ids(delta_store) == {DEFAULT_MODEL}
    assert embed_role_rows(delta_store, embedder, batch_size=8).to_process == 0


def test_a_recheck_neither_holds_queries_nor_drops_the_loaded_model(cache_dir: Path) -> None:
    """The stored ids are read by one thread while the others keep embedding with the loaded
    model; a failed read keeps that model. The `stored_ids` callables stand in for the index on
    purpose: this test is about reading the index's model id being slow, then failing."""
    onnx_id = backend_model_id(DEFAULT_MODEL, "onnx")
    settings = EmbeddingSettings(cache_dir=cache_dir.parent)
    matched = MatchedEmbedder(settings, lambda: {onnx_id}, recheck_s=0.0)
    loaded = matched.resolved()
    assert loaded.model_id == onnx_id

    looking, release = threading.Event(), threading.Event()

    def slow() -> set[str]:
        looking.set()
        assert release.wait(30)
        return {onnx_id}

    matched.stored_ids = slow
    checker = threading.Thread(target=matched.resolved)
    checker.start()
    try:
        assert looking.wait(30)
        assert matched.resolved() is loaded  # not held by the look in flight
    finally:
        release.set()
        checker.join()

    def failing() -> set[str]:
        raise EmbedderUnavailable("the node is down")

    matched.stored_ids = failing
    assert matched.resolved() is loaded
    assert ModelQueryEmbedder(matched).embed("where is the cabin") is not None
