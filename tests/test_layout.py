"""The core package's layout: stages import only down the data path, and none imports Dagster."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "ctxdb"

# The data path, bottom to top: a module may import its own stage and any stage below it.
# `settings`, `text` and `errors` (a failure as one line, for the CLI and the pipelines' logs)
# are the shared base; lifecycle, sample and capture sit above the serving stack; elastic (the
# administration of every Elasticsearch index: replicas, one-shard creation) sits beside storage,
# below every stage that keeps an index; coordination (lease, fencing) and node (the embedded
# Elasticsearch node, which the index only reaches over HTTP) sit just above storage, auth and
# pack (the context pack) between search and serve; the CLI is on top of everything.
RANK = {
    "settings": 0,
    "text": 0,
    "errors": 0,
    "storage": 1,
    "elastic": 1,
    "coordination": 2,
    "node": 2,
    "contract": 3,
    "landing": 4,
    "record": 5,
    "embedding": 6,
    "index": 7,
    "search": 8,
    "auth": 9,
    "pack": 9,
    "serve": 10,
    "lifecycle": 11,
    "sample": 11,
    "capture": 11,
    "cli": 12,
}
TOP_LEVEL_MODULES = {"__init__.py", "text.py", "errors.py"}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "ctxdb" else None


def _imported_modules(path: Path) -> list[str]:
    """Every ctxdb module a file imports, at module level or inside functions."""
    modules = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ctxdb":
                modules += [f"ctxdb.{alias.name}" for alias in node.names]
            else:
                modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
    return [m for m in modules if m.startswith("ctxdb.")]


def wrong_way_imports(root: Path) -> list[str]:
    """`file -> module` for each import that runs up the data path (or into an unknown stage)."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if len(relative.parts) == 1:
            continue
        source = relative.parts[0]
        for module in _imported_modules(path):
            target = _stage(module)
            if target is None or target.startswith("_"):
                continue
            if target not in RANK or source not in RANK or RANK[target] > RANK[source]:
                problems.append(f"{relative} -> {module}")
            elif RANK[target] == RANK[source] and target != source and RANK[source] > 0:
                problems.append(f"{relative} -> {module}")
    return problems


def test_imports_run_down_the_data_path() -> None:
    assert wrong_way_imports(CORE) == []


def test_the_check_catches_an_import_running_the_wrong_way(tmp_path: Path) -> None:
    (tmp_path / "record").mkdir()
    (tmp_path / "record" / "run.py").write_text(
        "def f():\n    from ctxdb.search.service import SearchService\n"
    )
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "run.py").write_text("from ctxdb.record import turns\n")
    assert wrong_way_imports(tmp_path) == [
        "landing/run.py -> ctxdb.record",
        "record/run.py -> ctxdb.search.service",
    ]


def _module_name(path: Path, root: Path) -> str:
    return ".".join(("ctxdb", *path.relative_to(root).with_suffix("").parts)).removesuffix(
        ".__init__"
    )


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the ctxdb modules it imports (`from pkg import mod` names the module itself)."""
    modules = {_module_name(path, root): path for path in root.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    targets.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def import_cycle(root: Path) -> list[str]:
    """One cycle of module imports (at module level or inside functions), or [] when none."""
    try:
        list(graphlib.TopologicalSorter(import_graph(root)).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_module_imports_itself_through_others() -> None:
    assert import_cycle(CORE) == []


def test_the_cycle_check_catches_a_function_level_cycle(tmp_path: Path) -> None:
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "a.py").write_text("from ctxdb.auth import b\n")
    (tmp_path / "auth" / "b.py").write_text("def f():\n    from ctxdb.auth.a import x\n")
    assert sorted(set(import_cycle(tmp_path))) == ["ctxdb.auth.a", "ctxdb.auth.b"]


def test_auth_imports_neither_search_nor_index() -> None:
    """Auth raises the shared `SearchUnavailable` (`ctxdb.errors`) and receives its
    Elasticsearch client from the caller."""
    imported = {
        module for path in (CORE / "auth").rglob("*.py") for module in _imported_modules(path)
    }
    assert {m for m in imported if _stage(m) in ("search", "index")} == set()


def test_node_imports_nothing_above_it() -> None:
    """The embedded node (its errors included) sits below the index layer that talks to it."""
    imported = {
        _stage(module)
        for path in (CORE / "node").rglob("*.py")
        for module in _imported_modules(path)
    }
    assert RANK["node"] < RANK["index"]
    assert {stage for stage in imported if stage and RANK[stage] > RANK["node"]} == set()


def test_top_level_holds_only_the_shared_base_beside_the_stages() -> None:
    top = {p.name for p in CORE.iterdir() if p.suffix == ".py"}
    assert top == TOP_LEVEL_MODULES
    stages = {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert stages <= set(RANK)


@pytest.mark.parametrize(
    "stage", sorted(p.name for p in CORE.iterdir() if (p / "__init__.py").exists())
)
def test_every_stage_says_what_enters_and_leaves(stage: str) -> None:
    doc = ast.get_docstring(ast.parse((CORE / stage / "__init__.py").read_text()))
    assert doc and "In:" in doc and "out:" in doc


def test_core_package_never_imports_dagster() -> None:
    """Import every ctxdb module in a fresh interpreter; Dagster must not be loaded by any."""
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in CORE.rglob("*.py")
    )
    script = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
