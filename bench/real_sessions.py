"""The real public sessions of tests/data (Claude Code, Codex CLI, Gemini CLI; each folder's
SOURCE.md names where they come from) built into a memory the way a user builds it: every import
command of the README, then `ctxdb land`, `ctxdb derive` and `ctxdb jobs run memory_job`, each a
real `ctxdb` process. tests/test_real_sessions.py and bench/real_sessions_eval.py share it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CTXDB = Path(sys.executable).with_name("ctxdb")

IMPORTS = [
    ["import", "claude-code", str(DATA / "claude_code")],
    ["import", "codex", str(DATA / "codex")],
    ["import", "gemini", str(DATA / "gemini")],
]
"""The import commands, one per host, over each host's whole fixture folder."""
PIPELINE = [["land"], ["derive"], ["jobs", "run", "memory_job"]]


@dataclass(frozen=True)
class Step:
    """One `ctxdb` command as run: its arguments, exit status and output."""

    args: list[str]
    returncode: int
    output: str


def environment(home: Path, index_prefix: str, es_url: str) -> dict[str, str]:
    """The environment of every command: its own ctxdb home and index prefix, no DAGSTER_HOME
    (the job then runs in `<home>/dagster`, as for a user)."""
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    return env | {
        "CTXDB_HOME": str(home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": index_prefix,
        "ELASTICSEARCH_URL": es_url,
        "CTXDB_ES_CACHE_DIR": str(home / "es-cache"),
    }


def run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 1800) -> Step:
    """Run one `ctxdb` command to its end."""
    done = subprocess.run(
        [str(CTXDB), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    return Step(args, done.returncode, done.stdout + done.stderr)


def build(env: dict[str, str], cwd: Path) -> list[Step]:
    """Import every host's fixtures (finished at once: `--settle-s 0`), land, derive and run the
    main job; stops at the first command that fails (its step is the last one returned)."""
    steps: list[Step] = []
    for args in [*(a + ["--settle-s", "0"] for a in IMPORTS), *PIPELINE]:
        steps.append(run(args, env, cwd))
        if steps[-1].returncode != 0:
            break
    return steps
