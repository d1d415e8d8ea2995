"""The embedding group (`CTXDB_EMBEDDING_*`): the model that embeds role rows and its runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class EmbeddingSettings(GroupSettings):
    """The sentence-transformers model that embeds role rows, and the runtime that runs it."""

    model_config = group_config("CTXDB_EMBEDDING_")

    model: str = Field(
        default="all-MiniLM-L6-v2",
        description="Embedding model: all-MiniLM-L6-v2, bge-small-en-v1.5 (ctxdb/embedding/"
        "registry.py), or a local sentence-transformers directory.",
    )
    batch_size: int = Field(default=64)
    dims: int = Field(default=384)
    device: str = Field(default="cpu", description="torch device of the embedder.")
    backend: Literal["auto", "torch", "onnx", "onnx-int8"] = Field(
        default="auto",
        description="Embedder runtime: torch, ONNX Runtime fp32, or ONNX Runtime dynamic int8;"
        " auto keeps the one a memory's vectors were made with, ONNX fp32 for a new memory.",
    )
    threads: int = Field(
        default=0,
        ge=0,
        description="Intra-op threads of the embedder, torch or ONNX Runtime (0: torch's default,"
        " ONNX Runtime one per usable core); 1 when shards embed in parallel processes.",
    )
    prefill_min_texts: int | None = Field(
        default=None,
        ge=0,
        description="From this many texts to embed, a run over every shard first fills the"
        " vector cache in one parallel step per shard (asset embedding_prefill; 0: never)."
        " Unset: 2000 in a code location whose executor sends steps to workers (Celery),"
        " never in the default one, whose steps share one machine's cores.",
    )
    cache_dir: Path | None = Field(
        default=None,
        description="Where models shipped as Maven jars are unpacked (models/) and ONNX exports"
        " are cached (onnx/) (default: $XDG_CACHE_HOME/ctxdb).",
    )
