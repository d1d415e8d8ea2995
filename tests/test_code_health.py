"""Code health: no function in `ctxdb/`, `assets/` or `pipelines/` runs past 60 lines (issue 28,
issue 42), and each Dagster package says what enters and leaves it, as each ctxdb stage does.

A function's length is counted from its `def` line to its last line (`ast` `end_lineno`), nested
functions counted on their own as well as inside their parent.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "ctxdb"
PACKAGES = ("ctxdb", "assets", "pipelines")
MAX_LINES = 60


def long_functions(root: Path, limit: int) -> list[str]:
    """`path:line name (N lines)` for every function or method under `root` longer than `limit`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        functions = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        where = path.relative_to(root.parent)
        for node in sorted(functions, key=lambda f: f.lineno):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_exceeds_the_limit(package: str) -> None:
    assert long_functions(ROOT / package, MAX_LINES) == []


@pytest.mark.parametrize("package", ["assets", "pipelines"])
def test_dagster_packages_say_what_enters_and_leaves(package: str) -> None:
    """The package says its in and out (as `tests/test_layout.py` asks of each ctxdb stage), and
    each of its modules opens with a docstring."""
    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text()))
    assert doc and "In:" in doc and "out:" in doc
    silent = [
        path.name
        for path in sorted((ROOT / package).glob("*.py"))
        if not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert silent == []


def test_the_count_finds_a_long_function(tmp_path: Path) -> None:
    """The check itself sees a long function, a long method and an async one, and counts from
    `def` to the last line."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    (pkg / "fits.py").write_text(f"def fits():\n{body}")
    (pkg / "long.py").write_text(
        f"def long():\n{body}    return 0\n\n\n"
        f"class C:\n    def method(self):\n{body.replace('    ', '        ')}        return 0\n\n\n"
        f"async def waits():\n{body}    return 0\n"
    )
    method = MAX_LINES + 5  # `long`, two blank lines, `class C:`
    waits = method + MAX_LINES + 3
    assert long_functions(pkg, MAX_LINES) == [
        f"pkg/long.py:1 long ({MAX_LINES + 1} lines)",
        f"pkg/long.py:{method} method ({MAX_LINES + 1} lines)",
        f"pkg/long.py:{waits} waits ({MAX_LINES + 1} lines)",
    ]
