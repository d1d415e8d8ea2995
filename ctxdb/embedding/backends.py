"""The configured embedder: torch (sentence-transformers) or ONNX Runtime fp32 / int8, or `auto`:
the backend a memory already embeds with, ONNX Runtime fp32 for a new one. Models shipped as
pinned jars (`registry.py`) run on ONNX Runtime only."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence

import numpy as np

from ctxdb.embedding.ids import BACKENDS, backend_model_id, parse_model_id
from ctxdb.embedding.model import Embedder, EmbedderUnavailable, SentenceTransformerEmbedder
from ctxdb.embedding.pinned import PinnedOnnxEmbedder
from ctxdb.embedding.registry import model_spec
from ctxdb.embedding.runtime import OnnxEmbedder
from ctxdb.embedding.stage import stored_model_ids
from ctxdb.settings import EmbeddingSettings
from ctxdb.storage.delta import DeltaStore

log = logging.getLogger(__name__)

AUTO = "auto"
AUTO_PREFERENCE = ("onnx", "onnx-int8", "torch")  # when a memory holds vectors of several


def resolve_backend(
    backend: str, model_name: str, stored_ids: Collection[str], device: str = "cpu"
) -> str:
    """`backend`, or for `auto` the one whose model id the memory's vectors already carry
    (ONNX fp32 first when several do), and for a new memory ONNX fp32 on the CPU, torch on any
    other device (the ONNX backend runs on the CPU only).

    `auto` never re-embeds an existing memory: one built with torch stays on torch. A model
    that ships for some backends only (`registry.py`) gets one of those."""
    spec = model_spec(model_name)
    offered = [b for b in AUTO_PREFERENCE if spec is None or b in spec.backends]
    if backend != AUTO:
        if backend not in BACKENDS:
            raise ValueError(f"unknown embedding backend {backend!r}; expected auto or {BACKENDS}")
        if backend not in offered:
            raise ValueError(f"{model_name} does not run on {backend!r}; it runs on {offered}")
        return backend
    stored = [b for b in offered if backend_model_id(model_name, b) in stored_ids]
    if stored:
        return stored[0]
    return offered[0] if device == "cpu" or "torch" not in offered else "torch"


def make_embedder(
    settings: EmbeddingSettings,
    *,
    model_name: str | None = None,
    batch_size: int | None = None,
    stored_ids: Collection[str] = (),
) -> Embedder:
    """The embedder `settings.backend` names (CTXDB_EMBEDDING_BACKEND), loaded on first use;
    `stored_ids` are the model ids of the memory's vectors, which `auto` keeps to."""
    name = model_name or settings.model
    backend = resolve_backend(settings.backend, name, stored_ids, settings.device)
    size = batch_size or settings.batch_size
    spec = model_spec(name)
    if spec is not None and spec.backends.get(backend) is not None:
        models_dir = settings.cache_dir / "models" if settings.cache_dir else None
        return PinnedOnnxEmbedder(
            spec, backend, batch_size=size, threads=settings.threads, models_dir=models_dir
        )
    if backend == "torch":
        return SentenceTransformerEmbedder(
            name, batch_size=size, device=settings.device, threads=settings.threads
        )
    return OnnxEmbedder(
        name,
        quantize=backend == "onnx-int8",
        batch_size=size,
        threads=settings.threads,
        cache_dir=settings.cache_dir / "onnx" if settings.cache_dir else None,
    )


def memory_embedder(
    settings: EmbeddingSettings,
    store: DeltaStore,
    *,
    model_name: str | None = None,
    batch_size: int | None = None,
) -> Embedder:
    """The embedder for the memory in `store`: with `auto`, on the backend its vectors of the
    model already have."""
    name = model_name or settings.model
    stored = stored_model_ids(store, [name]) if settings.backend == AUTO else ()
    return make_embedder(settings, model_name=name, batch_size=batch_size, stored_ids=stored)


class MatchedEmbedder:
    """The model and backend the stored vectors were made with, for a reader that cannot look
    at the Delta memory (search reads the live index instead): queries are embedded by the model
    of the index they search, whatever the settings now name.

    `stored_ids` returns the model ids of the stored vectors (raising `EmbedderUnavailable`
    when it cannot tell). Before any vectors exist the configured model serves provisionally and
    every load looks again; once ids are found they are looked at again every `recheck_s`
    seconds, so a reindex to another model (`ctxdb index reindex --model`) is followed by a
    running service without a restart. A query embedded in the few seconds before that look
    cannot meet vectors of the other model: the kNN arm filters on the query's `model_id`."""

    def __init__(
        self,
        settings: EmbeddingSettings,
        stored_ids: Callable[[], Collection[str]],
        *,
        batch_size: int = 1,
        recheck_s: float = 5.0,
    ) -> None:
        self.settings, self.stored_ids, self.batch_size = settings, stored_ids, batch_size
        self.recheck_s = recheck_s
        self._current: Embedder | None = None
        self._choice: tuple[str, str] | None = None
        self._checked_at: float | None = None
        self._checking = threading.Lock()

    @property
    def inner(self) -> Embedder:
        if self._current is None:
            self.load()
        assert self._current is not None
        return self._current

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dims(self) -> int:
        return self.inner.dims

    @property
    def query_instruction(self) -> str:
        return str(getattr(self.inner, "query_instruction", ""))

    def choice(self, stored: Collection[str]) -> tuple[str, str]:
        """(model, backend) of the stored vectors, else the configured model on its backend."""
        s = self.settings
        if stored:
            return parse_model_id(sorted(stored)[0])
        return s.model, resolve_backend(s.backend, s.model, (), s.device)

    def load(self) -> None:
        self.resolved()

    def resolved(self) -> Embedder:
        """The embedder of the stored vectors, loaded: one object for a query's model id, its
        instruction and its vector, even while a recheck swaps the model for the next query."""
        current = self._current
        if current is None or self._recheck_due():
            current = self._recheck(wait=current is None)
        current.load()
        return current

    def _recheck(self, wait: bool) -> Embedder:
        """Look at the stored ids again and switch when they name another model. One thread
        looks at a time; once a model is loaded the others do not wait for that look (or for the
        next model's load) but keep the current model. A failed look keeps the current model
        until the next one; with none yet, it raises."""
        if not self._checking.acquire(blocking=wait):
            assert self._current is not None
            return self._current
        try:
            current = self._current
            if current is not None and not self._recheck_due():
                return current  # another thread just looked
            try:
                stored = self.stored_ids()
            except EmbedderUnavailable as exc:
                if current is None:
                    raise
                log.warning("keeping %s: cannot read the index's model id: %s", self._choice, exc)
                self._checked_at = time.monotonic()
                return current
            choice = self.choice(stored)
            if current is None or choice != self._choice:
                model, backend = choice
                chosen = self.settings.model_copy(update={"model": model, "backend": backend})
                current = make_embedder(chosen, batch_size=self.batch_size)
                current.load()
                self._current, self._choice = current, choice
            self._checked_at = time.monotonic() if stored else None
            return current
        finally:
            self._checking.release()

    def _recheck_due(self) -> bool:
        checked = self._checked_at
        return checked is None or time.monotonic() - checked >= self.recheck_s

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode(texts)
