"""Types of the native landing scanner (native/src/lib.rs, built by pyo3 when cargo is there)."""

from typing import Any

CONTRACT_JSON: str
"""The contract compiled in: native/src/contract.json (`ctxdb.landing.native_contract`)."""

def scan_events(data: bytes, max_event_bytes: int, threads: int = 0) -> dict[str, Any]:
    """Validate every line of `data`; the dict's keys are described in native/src/lib.rs."""
