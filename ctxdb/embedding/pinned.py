"""The ONNX Runtime embedder of a model shipped as a pinned jar (`registry.py`): the jar's graph
gives token states, pooled here (CLS or mean over the mask) and L2-normalized.

Texts are cleaned, tokenized with the jar's `tokenizer.json` (truncated to the model window),
sorted by token length into batches, and returned in input order, as `runtime.OnnxEmbedder`
does. There is no fallback: a model that cannot be fetched leaves the rows pending.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxdb.embedding.model import EmbedderUnavailable
from ctxdb.embedding.registry import (
    MODEL_FILE,
    ModelFetchError,
    ModelSpec,
    ensure_model,
)
from ctxdb.embedding.runtime import (
    backend_model_id,
    encode_sorted,
    load_session,
    load_tokenizer,
    usable_cores,
)


def pool(states: np.ndarray, mask: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """One vector per sequence from token `states` (batch x tokens x dims): the [CLS] state or
    the mean over the attention mask, L2-normalized when the model says so."""
    if spec.pooling == "cls":
        vectors = states[:, 0, :]
    else:
        weights = mask[:, :, None].astype(np.float32)
        vectors = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    if spec.normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return np.asarray(vectors, dtype=np.float32)


class PinnedOnnxEmbedder:
    """A registered model's jar graph on ONNX Runtime (`backend`: onnx fp32 or onnx-int8)."""

    def __init__(
        self,
        spec: ModelSpec,
        backend: str,
        *,
        batch_size: int = 64,
        threads: int = 0,
        models_dir: Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if spec.backends.get(backend) is None:
            raise ValueError(f"{spec.name} does not ship for the {backend!r} backend")
        self.spec, self.backend, self.batch_size = spec, backend, batch_size
        self.threads = threads or usable_cores()
        self.models_dir = models_dir
        self.model_dir: Path | None = None
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def model_id(self) -> str:
        return backend_model_id(self.spec.name, self.backend)

    @property
    def dims(self) -> int:
        return self.spec.dims

    @property
    def query_instruction(self) -> str:
        return self.spec.query_instruction

    def load(self) -> None:
        """Fetch (first time only) and open the graph; EmbedderUnavailable when it cannot."""
        if self._session is not None:
            return
        try:
            self.model_dir = ensure_model(self.spec.name, self.backend, self.models_dir)
            self._tokenizer = load_tokenizer(str(self.model_dir), self.spec.max_tokens)
            self._session = load_session(str(self.model_dir / MODEL_FILE), self.threads)
        except ModelFetchError as exc:
            raise EmbedderUnavailable(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - a broken graph or tokenizer: one line
            raise EmbedderUnavailable(
                f"cannot load {self.model_id}: {type(exc).__name__}: {str(exc)[:300]}"
            ) from exc

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized vectors in input order, computed in length-sorted batches."""
        self.load()
        return encode_sorted(self._tokenizer, texts, self.dims, self.batch_size, self._run_batch)

    def _run_batch(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": tokens, "attention_mask": mask, "token_type_ids": 0 * tokens}
        return pool(self._session.run(None, feeds)[0], mask, self.spec)
