"""The ONNX Runtime embedder: the exported all-MiniLM-L6-v2 graph behind the `Embedder` protocol.

Texts are cleaned and tokenized like sentence-transformers does (the model's own tokenizer.json,
truncated to its 256-token window), sorted by token length so each batch pads little, run through
one ONNX Runtime session (all graph optimizations, sequential execution, one intra-op thread per
usable core), and returned in input order. When the export or the session cannot be had, it logs
one line and falls back to the torch embedder, whose model id it then reports, so the vectors of
different backends are never stored under one id.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ctxdb.embedding.export import default_cache_dir, ensure_export
from ctxdb.embedding.ids import backend_model_id
from ctxdb.embedding.model import DEFAULT_MODEL, SentenceTransformerEmbedder, resolve_model_path
from ctxdb.text import clean_text

log = logging.getLogger(__name__)


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@lru_cache(maxsize=4)
def load_session(path: str, threads: int) -> Any:
    """One ONNX Runtime CPU session per (export, threads) and process."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


@lru_cache(maxsize=4)
def load_tokenizer(model_dir: str, max_length: int) -> Any:
    """The model's fast tokenizer, truncating to `max_length` tokens (specials included)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def max_seq_length(model_dir: str) -> int:
    """The sentence-transformers window (sentence_bert_config.json), 256 for all-MiniLM-L6-v2."""
    import json

    config = Path(model_dir) / "sentence_bert_config.json"
    return int(json.loads(config.read_text())["max_seq_length"]) if config.exists() else 256


def length_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Indices of the inputs in batches of `batch_size`, shortest first (little padding)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def encode_sorted(
    tokenizer: Any,
    texts: Sequence[str],
    dims: int,
    batch_size: int,
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """Vectors of `texts` in input order: tokenized once, then run in batches of similar length
    (`run(tokens, mask)` gives one batch's vectors), so padding stays short."""
    if not texts:
        return np.zeros((0, dims), dtype=np.float32)
    ids = [e.ids for e in tokenizer.encode_batch([clean_text(t) for t in texts])]
    out = np.empty((len(ids), dims), dtype=np.float32)
    for batch in length_batches([len(seq) for seq in ids], batch_size):
        out[batch] = run(*pad_batch([ids[i] for i in batch]))
    return out


def pad_batch(ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(input ids, attention mask) right-padded with 0 to the batch's longest sequence."""
    width = max(len(seq) for seq in ids)
    tokens = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    for row, seq in enumerate(ids):
        tokens[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return tokens, mask


class OnnxEmbedder:
    """all-MiniLM-L6-v2 exported to ONNX (fp32, or dynamic int8 when `quantize`), falling back to
    torch when the export or its session fails. The backend is resolved on first use."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        quantize: bool = False,
        batch_size: int = 64,
        threads: int = 0,
        cache_dir: Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name = model_name
        self.quantize = quantize
        self.batch_size = batch_size
        self.threads = threads or usable_cores()
        self.cache_dir = cache_dir or default_cache_dir()
        self.backend = "onnx-int8" if quantize else "onnx"
        self.export_path: Path | None = None
        self._session: Any = None
        self._tokenizer: Any = None
        self._fallback: SentenceTransformerEmbedder | None = None
        self._takes_token_types = True

    @property
    def model_id(self) -> str:
        self._resolve()
        return backend_model_id(self.model_name, self.active_backend)

    @property
    def active_backend(self) -> str:
        """The backend in use: this one, or torch after a fallback."""
        self._resolve()
        return "torch" if self._fallback is not None else self.backend

    @property
    def dims(self) -> int:
        self._resolve()
        if self._fallback is not None:
            return self._fallback.dims
        return int(self._session.get_outputs()[0].shape[-1])

    def load(self) -> None:
        self._resolve()
        if self._fallback is not None:
            self._fallback.load()

    def _resolve(self) -> None:
        """Export (or find the cached export), open its session; on failure fall back to torch."""
        if self._session is not None or self._fallback is not None:
            return
        try:
            model_dir = resolve_model_path(self.model_name)
            self.export_path = ensure_export(model_dir, self.cache_dir, quantize=self.quantize)
            self._tokenizer = load_tokenizer(model_dir, max_seq_length(model_dir))
            self._session = load_session(str(self.export_path), self.threads)
            names = {i.name for i in self._session.get_inputs()}
            self._takes_token_types = "token_type_ids" in names
        except Exception as exc:  # noqa: BLE001 - logged; the torch backend takes over
            log.warning(
                "%s backend unavailable (%s: %s); falling back to torch",
                self.backend,
                type(exc).__name__,
                str(exc).splitlines()[0][:300] if str(exc) else "",
            )
            self._fallback = SentenceTransformerEmbedder(
                self.model_name, batch_size=self.batch_size
            )

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized vectors in input order, computed in length-sorted batches."""
        self._resolve()
        if self._fallback is not None:
            return self._fallback.encode(texts)
        return encode_sorted(self._tokenizer, texts, self.dims, self.batch_size, self._run_batch)

    def _run_batch(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": tokens, "attention_mask": mask}
        if self._takes_token_types:
            feeds["token_type_ids"] = np.zeros_like(tokens)
        return self._session.run(None, feeds)[0]
