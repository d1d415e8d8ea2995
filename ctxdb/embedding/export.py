"""ONNX exports of the local sentence-transformers model, cached on disk by a hash of its weights.

The export is the whole sentence-transformers pipeline of all-MiniLM-L6-v2 (its modules.json:
Transformer -> mean Pooling -> Normalize) as one graph: token ids and attention mask in, the
L2-normalized mean of the token states over the mask out. It is exported once with
`torch.onnx.export` (dynamic batch and sequence axes), fused with ONNX Runtime's BERT optimizer
(attention, skip layer norm, bias GELU), and optionally quantized to dynamic int8 (per-channel
weights). Each result lives in `<cache_dir>/<key>/model.onnx`, the key hashing the weights, the
export settings and the versions of the tools that wrote it, so changed weights or settings
export anew and nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EXPORT_VERSION = 1  # bump when the exported graph changes
OPSET = 17
MODEL_FILE = "model.onnx"
META_FILE = "export.json"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "tokenizer.json")


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/ctxdb/onnx (~/.cache/ctxdb/onnx when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ctxdb" / "onnx"


def weights_digest(model_dir: str | Path) -> str:
    """sha256 of the model's weight, config and tokenizer files (cached per file identity)."""
    files = [Path(model_dir) / name for name in _WEIGHT_FILES]
    stamps = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists())
    if not stamps:
        raise FileNotFoundError(f"no model weights under {model_dir}")
    return _digest(stamps)


@lru_cache(maxsize=8)
def _digest(stamps: tuple[tuple[str, int, int], ...]) -> str:
    sha = hashlib.sha256()
    for path, _, _ in stamps:
        sha.update(Path(path).name.encode())
        with open(path, "rb") as fh:
            sha.update(hashlib.file_digest(fh, "sha256").digest())
    return sha.hexdigest()


def export_settings(quantize: bool) -> dict[str, Any]:
    """What, besides the weights, determines the exported file."""
    return {
        "export_version": EXPORT_VERSION,
        "opset": OPSET,
        "fusion": "bert",
        "quantize": "dynamic-int8-per-channel" if quantize else None,
        "onnxruntime": version("onnxruntime"),
        "torch": version("torch").split("+")[0],
    }


def export_key(digest: str, settings: dict[str, Any]) -> str:
    """Cache key of one export: the weights digest and the export settings."""
    blob = json.dumps({"weights": digest, **settings}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def export_onnx(model_dir: str, out: Path) -> None:
    """Export the model with mean pooling and L2 normalization into one fp32 ONNX graph."""
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

    class Pooled(torch.nn.Module):
        """sentence-transformers' Transformer -> Pooling(mean) -> Normalize."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            states = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    dummy = torch.ones(2, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS} | {"embedding": {0: "batch"}}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(),
            (dummy, dummy, torch.zeros_like(dummy)),
            str(out),
            input_names=list(INPUTS),
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )


def fuse_bert(path: Path, out: Path, num_heads: int, hidden_size: int) -> None:
    """ONNX Runtime's transformer fusions (attention, embed/skip layer norm, bias GELU)."""
    from onnxruntime.transformers.optimizer import optimize_model

    fused = optimize_model(
        str(path), model_type="bert", num_heads=num_heads, hidden_size=hidden_size, opt_level=0
    )
    fused.save_model_to_file(str(out))


def quantize_int8(path: Path, out: Path) -> None:
    """Dynamic int8 quantization, weights per channel (much closer to fp32 than per tensor)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(path),
        str(out),
        weight_type=QuantType.QInt8,
        per_channel=True,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def _model_shape(model_dir: str) -> tuple[int, int]:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config["num_attention_heads"]), int(config["hidden_size"])


def ensure_export(model_dir: str, cache_dir: Path, *, quantize: bool = False) -> Path:
    """Path of the cached export for `model_dir` (fp32, or int8 when `quantize`), exporting it
    first when the cache has none for these weights and settings."""
    settings = export_settings(quantize)
    digest = weights_digest(model_dir)
    target = cache_dir / export_key(digest, settings)
    if (target / MODEL_FILE).exists():
        return target / MODEL_FILE
    source = ensure_export(model_dir, cache_dir) if quantize else None
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=cache_dir))
    try:
        if source is not None:
            log.info("quantizing %s to int8 into %s", source, target)
            quantize_int8(source, work / MODEL_FILE)
        else:
            log.info("exporting %s to ONNX into %s", model_dir, target)
            export_onnx(model_dir, work / "raw.onnx")
            fuse_bert(work / "raw.onnx", work / MODEL_FILE, *_model_shape(model_dir))
            (work / "raw.onnx").unlink()
        meta = {"model_dir": model_dir, "weights_sha256": digest, **settings}
        (work / META_FILE).write_text(json.dumps(meta, indent=2))
        try:
            work.rename(target)
        except OSError:
            if not (target / MODEL_FILE).exists():  # not a concurrent export that won the race
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target / MODEL_FILE
