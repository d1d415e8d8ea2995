"""Model ids: the names vectors are stored and indexed under (model name plus backend).

Plain strings, no model stack: search builds its kNN filter from them without loading numpy or
a runtime.
"""

from __future__ import annotations

BACKENDS = ("torch", "onnx", "onnx-int8")


def backend_model_id(model_name: str, backend: str) -> str:
    """The id vectors are stored and indexed under: the model name, plus the backend unless it
    is torch (whose id stays the plain model name, so existing caches stay valid)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown embedding backend {backend!r}; expected one of {BACKENDS}")
    return model_name if backend == "torch" else f"{model_name}+{backend}"


def parse_model_id(model_id: str) -> tuple[str, str]:
    """(model name, backend) of a stored model id: the inverse of `backend_model_id`."""
    name, _, backend = model_id.rpartition("+")
    return (name, backend) if name and backend in BACKENDS else (model_id, "torch")


def same_model_ids(model_name: str) -> list[str]:
    """Every id `model_name`'s vectors may be stored under: its backends embed alike."""
    return [backend_model_id(model_name, backend) for backend in BACKENDS]
