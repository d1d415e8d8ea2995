"""A benchmark's result as the scripts hand it over: indented JSON on stdout and, when asked, in
a file (for bench/HISTORY.md's tables and later comparisons)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_report(report: dict[str, Any], path: Path | None) -> None:
    """Print `report` as indented JSON and write it to `path` too, when one is given."""
    text = json.dumps(report, indent=2)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    print(text)  # noqa: T201 (benchmark output)
