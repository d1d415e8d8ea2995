"""The command line starts lazily (issue 44 item 4): `ctxdb.cli.registry` names every command the
modules register, `ctxdb --help` lists them all without importing any command module, and a hook
or a light command imports none of the heavy stages. Each run is a fresh interpreter, as a user's
`ctxdb` is; nothing here measures time (bench/bench_cli_startup.py does)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from ctxdb.cli.registry import COMMANDS
from ctxdb.landing import partitions

ROOT = Path(__file__).resolve().parents[1]
CTXDB = str(Path(sys.executable).with_name("ctxdb"))
SESSION = ROOT / "tests" / "data" / "gemini" / "session-2025-10-11T13-00-2d9ea14f.json"
HEAVY = [
    "elasticsearch",
    "elastic_transport",
    "polars",
    "deltalake",
    "pyarrow",
    "numpy",
    "torch",
    "duckdb",
    "dagster",
]
REGISTERED = """
import inspect, json, pkgutil, importlib
import typer.main
import ctxdb.cli
from ctxdb.cli.app import Listed, app

def module(command):
    while command.callback is None:
        command = next(iter(command.commands.values()))
    return command.callback.__module__.removeprefix("ctxdb.cli.")

for info in pkgutil.iter_modules(ctxdb.cli.__path__):
    importlib.import_module(f"ctxdb.cli.{info.name}")
seen = {}
for name, command in typer.main.get_group(app).commands.items():
    if not isinstance(command, Listed):
        first = inspect.cleandoc(command.help or "").split("\\n\\n")[0]
        seen[name] = [module(command), " ".join(first.split())]
print(json.dumps(seen))
"""
MODULES_AFTER = """
import sys
from ctxdb.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    code = done.code
print("MODULES " + " ".join(sorted(sys.modules)), file=sys.stderr)
"""


def run(args: list[str], home: Path, stdin: str = "", *, wrap: bool = False) -> tuple[str, str]:
    """`ctxdb args` in a fresh process with its own home (and `HOME`, for `~/.gemini`); with
    `wrap`, through the same `main` plus a last stderr line naming every module loaded.
    """
    env = os.environ | {"CTXDB_HOME": str(home / "ctxdb"), "HOME": str(home), "COLUMNS": "250"}
    command = [sys.executable, "-c", MODULES_AFTER, *args] if wrap else [CTXDB, *args]
    cwd = home / "cwd"  # not `home`: its `ctxdb` folder would shadow the package for `-c`
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(
        command, env=env, input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd
    )
    return done.stdout, done.stderr


def loaded(stderr: str) -> set[str]:
    """The modules `MODULES_AFTER` reported, and the top-level package of each."""
    line = next(line for line in stderr.splitlines() if line.startswith("MODULES "))
    names = line.split()[1:]
    return set(names) | {name.split(".")[0] for name in names}


def registered() -> dict[str, list[str]]:
    """Every top-level command the modules register: its module and its help's first paragraph."""
    done = subprocess.run(
        [sys.executable, "-c", REGISTERED], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout)


def test_registry_names_what_each_module_registers() -> None:
    assert registered() == {name: [e.module, e.help] for name, e in COMMANDS.items()}


def test_help_lists_every_registered_command_with_its_help(tmp_path: Path) -> None:
    stdout, _ = run(["--help"], tmp_path)
    rows = {}
    for line in stdout.splitlines():
        cells = line.strip("│ ").split(None, 1)
        if len(cells) == 2:
            rows[cells[0]] = " ".join(cells[1].strip("│ ").split())
    for name, (_, help_line) in registered().items():
        assert rows.get(name) == help_line, name


def test_help_a_light_command_and_the_gemini_hook_load_nothing_heavy(tmp_path: Path) -> None:
    """`--help` loads no command module (nor pydantic); `tokens issue` issues a token without the
    search stack; the Gemini hook imports its session without Typer or any heavy stage."""
    stdout, stderr = run(["--help"], tmp_path, wrap=True)
    assert "conversations" in stdout
    modules = loaded(stderr)
    assert modules.isdisjoint([*HEAVY, "pydantic"]), modules & {*HEAVY, "pydantic"}
    assert modules.isdisjoint(f"ctxdb.cli.{entry.module}" for entry in COMMANDS.values())
    assert [m for m in modules if m.startswith("ctxdb.") and not m.startswith("ctxdb.cli")] == []
    stdout, stderr = run(["tokens", "issue", "--user", "ann", "--tenant", "t"], tmp_path, wrap=True)
    assert stdout.startswith("ctxdb_"), stderr
    assert loaded(stderr).isdisjoint(HEAVY), loaded(stderr) & set(HEAVY)

    chats = tmp_path / ".gemini" / "tmp" / "p" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(SESSION, chats / SESSION.name)
    payload = {
        "hook_event_name": "AfterAgent",
        "session_id": "s",
        "transcript_path": str(chats / SESSION.name),
    }
    stdout, stderr = run(["capture", "gemini", "hook"], tmp_path, json.dumps(payload), wrap=True)
    assert stdout == "{}\n"
    written = list((tmp_path / "ctxdb" / "landing" / "gemini_cli").rglob("*.jsonl"))
    day = partitions.name(datetime.now(UTC))
    assert [p.relative_to(p.parents[1]).as_posix() for p in written] == [
        f"{day}/{SESSION.stem}.jsonl"
    ]
    assert loaded(stderr).isdisjoint([*HEAVY, "typer"]), loaded(stderr) & {*HEAVY, "typer"}


def test_the_gemini_hook_with_a_hook_config_never_loads_the_settings(tmp_path: Path) -> None:
    """Given the hook config `claude-code install` writes, the Gemini hook imports the session
    to the same place without pydantic (the settings), as the Claude Code hook does."""
    (tmp_path / "proj").mkdir()
    stdout, _ = run(
        ["capture", "claude-code", "install", "--project", str(tmp_path / "proj")], tmp_path
    )
    config = tmp_path / "ctxdb" / "capture" / "claude_code" / "hook.json"
    assert f"hook config: {config}" in stdout
    chats = tmp_path / ".gemini" / "tmp" / "p" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(SESSION, chats / SESSION.name)
    payload = {"hook_event_name": "SessionEnd", "transcript_path": str(chats / SESSION.name)}
    args = ["capture", "gemini", "hook", f"--config={config}"]
    stdout, stderr = run(args, tmp_path, json.dumps(payload), wrap=True)
    assert stdout == "{}\n"
    written = list((tmp_path / "ctxdb" / "landing" / "gemini_cli").rglob("*.jsonl"))
    assert [p.relative_to(tmp_path).parts[3:] for p in written] == [
        ("import", partitions.name(datetime.now(UTC)), f"{SESSION.stem}.jsonl")
    ]
    assert loaded(stderr).isdisjoint([*HEAVY, "typer", "pydantic"])
    _, stderr = run(
        ["capture", "gemini", "hook", "--config", str(tmp_path / "none.json")], tmp_path
    )
    assert "none.json" in stderr


def test_a_hook_help_and_a_mistyped_command_still_go_through_typer(tmp_path: Path) -> None:
    stdout, _ = run(["capture", "gemini", "hook", "--help"], tmp_path)
    assert "AfterAgent" in stdout
    _, stderr = run(["conversatons"], tmp_path)
    assert "No such command 'conversatons'" in stderr and "conversations" in stderr
    _, stderr = run(["capture", "gemini", "hook", "--now"], tmp_path)
    assert "takes only --config FILE: --now" in stderr
