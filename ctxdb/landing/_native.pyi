"""Types of the native landing scanner (native/src/lib.rs, built by pyo3 when cargo is there)."""

from typing import Any

SUMMARY_MAX_CHARS: int
SUMMARY_MAX_REFS: int
REF_MAX_CHARS: int
ANCHORS_MAX: int
ANCHOR_MAX_CHARS: int
PAYLOAD_MAX_DEPTH: int
EARLIEST_MICROS: int
LATEST_MICROS: int

def scan_events(data: bytes, max_event_bytes: int, threads: int = 0) -> dict[str, Any]:
    """Validate every line of `data`; the dict's keys are described in native/src/lib.rs."""
