"""Embedding of role rows: cache hits, status per row, batch retry, bad input, model failure.

Real Delta tables in tmp_path and the real all-MiniLM-L6-v2 model.
"""

from __future__ import annotations

import logging

import numpy as np
import polars as pl
import pytest
from conftest_index import role_rows, write_rows

from ctxdb.embedding.cache import BATCHES_PER_CALL
from ctxdb.embedding.model import EmbedderUnavailable, SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.storage.tables import EMBEDDINGS, ROW_EMBEDDINGS
from ctxdb.text import clean_text

pytestmark = pytest.mark.model


def statuses(delta_store) -> dict[str, str]:
    frame = delta_store.read(ROW_EMBEDDINGS)
    return dict(zip(frame["row_id"], frame["embedding_status"], strict=True))


def test_identical_texts_embedded_once_and_rerun_hits_cache(delta_store, embedder):
    write_rows(
        delta_store, role_rows(["the openpyxl timezone bug", "the openpyxl timezone bug", "b"])
    )
    first = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (first.to_process, first.embedded, first.cache_hits) == (3, 2, 0)
    assert delta_store.read(EMBEDDINGS).height == 2
    assert set(statuses(delta_store).values()) == {"ok"}

    second = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (second.to_process, second.embedded) == (0, 0)

    write_rows(delta_store, role_rows(["b", "c"], start=3))
    third = embed_role_rows(delta_store, embedder, batch_size=8)
    assert (third.to_process, third.cache_hits, third.embedded) == (2, 1, 1)
    assert delta_store.read(EMBEDDINGS).height == 3


def test_changed_model_id_embeds_again(delta_store, embedder):
    write_rows(delta_store, role_rows(["alpha beta", "gamma delta"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    other = SentenceTransformerEmbedder(batch_size=8, model_id="all-MiniLM-L6-v2@other")
    report = embed_role_rows(delta_store, other, batch_size=8)
    assert report.embedded == 2
    cache = delta_store.read(EMBEDDINGS)
    assert sorted(cache["model_id"].unique()) == ["all-MiniLM-L6-v2", "all-MiniLM-L6-v2@other"]
    assert set(delta_store.read(ROW_EMBEDDINGS)["model_id"]) == {"all-MiniLM-L6-v2@other"}


def test_vectors_are_normalized_384d_and_match_bare_encode(delta_store, embedder):
    text = "A spreadsheet with broken dates after the timezone conversion"
    write_rows(delta_store, role_rows([text]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    vector = np.array(delta_store.read(EMBEDDINGS)["vector"][0].to_list())
    bare = embedder.model.encode([text], normalize_embeddings=True)[0]
    assert vector.shape == (384,)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-4)
    assert float(vector @ bare) == pytest.approx(1.0, abs=1e-4)


class RecordingEmbedder:
    """Delegates to the real model and records every text it was asked to encode."""

    def __init__(self, inner: SentenceTransformerEmbedder) -> None:
        self.inner, self.model_id, self.seen = inner, inner.model_id, []

    @property
    def dims(self) -> int:
        return self.inner.dims

    def load(self) -> None:
        self.inner.load()

    def encode(self, texts):
        self.seen.extend(texts)
        return self.inner.encode(texts)


def test_empty_and_whitespace_text_never_sent_to_model(delta_store, embedder):
    write_rows(delta_store, role_rows(["", "   \n\t ", "real words here"]))
    recording = RecordingEmbedder(embedder)
    report = embed_role_rows(delta_store, recording, batch_size=8)
    assert recording.seen == ["real words here"]
    assert report.skipped == 2
    assert statuses(delta_store) == {"c1-r0": "skipped", "c1-r1": "skipped", "c1-r2": "ok"}
    assert embed_role_rows(delta_store, recording, batch_size=8).to_process == 0


def test_long_text_truncated_to_the_token_window(embedder):
    long_text = " ".join(f"word{i}" for i in range(3000))
    (cut,) = embedder.truncate([long_text])
    assert long_text.startswith(cut) and len(cut) < len(long_text)
    tokens = embedder.model.tokenizer(cut, add_special_tokens=False)["input_ids"]
    assert len(tokens) == embedder.max_tokens
    full, truncated = (
        embedder.encode([long_text]),
        embedder.model.encode([cut], normalize_embeddings=True),
    )
    assert float(full[0] @ truncated[0]) == pytest.approx(1.0, abs=1e-4)


def test_control_characters_and_lone_surrogates_are_cleaned(delta_store, embedder):
    assert clean_text("a\x00b\x1bc\ud800d\te\n") == "a b c?d\te\n"
    vectors = embedder.encode(["bad \ud83d bytes \x00 and \x07 bells"])
    assert vectors.shape == (1, 384) and np.isfinite(vectors).all()
    write_rows(delta_store, role_rows(["null \x00 byte and escape \x1b[31m red"]))
    assert embed_role_rows(delta_store, embedder, batch_size=8).embedded == 1


class PoisonedEmbedder(RecordingEmbedder):
    """Stands in for a model that fails on one particular input (a failing-component test):
    any call containing a poisoned text raises; everything else goes to the real model."""

    def __init__(self, inner, poison: set[str]) -> None:
        super().__init__(inner)
        self.poison = poison

    def encode(self, texts):
        if self.poison & set(texts):
            raise RuntimeError("model crashed on this input")
        return super().encode(texts)


def test_failed_batch_retried_row_by_row_and_failed_rows_retried_later(delta_store, embedder):
    write_rows(delta_store, role_rows(["good one", "poison pill", "good two", "good three"]))
    poisoned = PoisonedEmbedder(embedder, {"poison pill"})
    report = embed_role_rows(delta_store, poisoned, batch_size=8)
    assert (report.embedded, report.failed) == (3, 1)
    frame = delta_store.read(ROW_EMBEDDINGS).filter(pl.col("row_id") == "c1-r1")
    assert frame["embedding_status"][0] == "failed"
    assert "model crashed" in frame["error"][0] and frame["attempts"][0] == 1
    assert statuses(delta_store)["c1-r0"] == "ok"

    poisoned.poison = set()
    retry = embed_role_rows(delta_store, poisoned, batch_size=8)
    assert (retry.to_process, retry.embedded) == (1, 1)
    assert statuses(delta_store)["c1-r1"] == "ok"


def test_model_that_cannot_load_leaves_rows_pending_then_catches_up(
    delta_store, embedder, tmp_path
):
    write_rows(delta_store, role_rows(["one row", "two rows"]))
    broken = SentenceTransformerEmbedder(model_name=str(tmp_path / "no-such-model"))
    with pytest.raises(EmbedderUnavailable):
        broken.load()
    report = embed_role_rows(delta_store, broken, batch_size=8)
    assert report.pending == 2 and report.error
    assert set(statuses(delta_store).values()) == {"pending"}
    fixed = SentenceTransformerEmbedder(model_id=broken.model_id, batch_size=8)
    assert embed_role_rows(delta_store, fixed, batch_size=8).embedded == 2
    assert set(statuses(delta_store).values()) == {"ok"}


def test_a_failing_call_is_retried_batch_by_batch_then_row_by_row(delta_store, embedder):
    texts = [f"{'sentence ' * (i + 1)}end" for i in range(12)]  # distinct lengths: a fixed order
    write_rows(delta_store, role_rows(texts))
    calls: list[int] = []
    poisoned = PoisonedEmbedder(embedder, {texts[5]})
    encode = poisoned.encode
    poisoned.encode = lambda batch: calls.append(len(batch)) or encode(batch)
    report = embed_role_rows(delta_store, poisoned, batch_size=4)
    assert (report.embedded, report.failed) == (11, 1)
    assert calls == [12, 4, 4, 1, 1, 1, 1, 4]
    assert statuses(delta_store)["c1-r5"] == "failed"


def test_progress_is_logged(delta_store, embedder, caplog):
    write_rows(delta_store, role_rows([f"text number {i:02d}" for i in range(20)]))
    with caplog.at_level(logging.INFO, logger="ctxdb.embedding.stage"):
        embed_role_rows(delta_store, embedder, batch_size=1, progress_every_s=0)
    progress = [r.getMessage() for r in caplog.records if "rows/s" in r.getMessage()]
    assert progress[0].startswith(f"embedded {BATCHES_PER_CALL}/20")
    assert progress[-1].startswith("embedded 20/20")


def test_deleted_role_rows_lose_their_status(delta_store, embedder):
    write_rows(delta_store, role_rows(["keep me", "drop me"]))
    embed_role_rows(delta_store, embedder, batch_size=8)
    delta_store.delete("role_rows", "row_id = 'c1-r1'")
    embed_role_rows(delta_store, embedder, batch_size=8)
    assert list(statuses(delta_store)) == ["c1-r0"]
