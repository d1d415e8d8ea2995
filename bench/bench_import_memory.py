"""Peak memory of the real CLI importing one large session file (issue 41, item 3). Not a test.

    .venv/bin/python bench/bench_import_memory.py --mb 1024 300
    .venv/bin/python bench/bench_import_memory.py --mb 200 --hosts codex gemini-json

Each file is made from a real fixture (tests/data/*/SOURCE.md) by repeating its turns with fresh
ids until it reaches the size asked for: a Codex rollout (`codex`), a Gemini CLI session document
(`gemini-json`) and its JSONL form (`gemini-jsonl`), a Claude Code transcript (`claude-code`), and
the same Gemini document through the hook (`gemini-hook`, `ctxdb capture gemini hook` with an
AfterAgent payload; a session over the hook's `MAX_SESSION_BYTES`, 64 MiB, is left to the
importer, and the row says so). Each is imported by the installed `ctxdb` command in a fresh
home, as a user runs it; the peak RSS is the child's own (`os.wait4`), interpreter included.
Target: under 400 MB for a 1 GB file and for a 300 MB one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CTXDB = str(Path(sys.executable).with_name("ctxdb"))
CODEX = DATA / "codex" / "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl"
GEMINI = DATA / "gemini" / "session-2026-01-16T11-01-file-ops-37b7abef.json"
CLAUDE = DATA / "claude_code" / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"
ID_KEYS = ("turn_id", "call_id", "id", "uuid", "parentUuid", "tool_use_id")


def _renamed(value: Any, round_: int) -> Any:
    """`value` with every id-like string (keys in `ID_KEYS`) given the suffix `-r<round_>`."""
    if isinstance(value, dict):
        return {
            k: f"{v}-r{round_}" if k in ID_KEYS and isinstance(v, str) else _renamed(v, round_)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_renamed(v, round_) for v in value]
    return value


def _rounds(items: list[Any], target: int) -> Iterator[bytes]:
    """Encoded copies of `items`, round after round with fresh ids, until `target` bytes."""
    written, round_ = 0, 0
    while written < target:
        for item in items:
            data = json.dumps(_renamed(item, round_), ensure_ascii=False).encode()
            written += len(data) + 2
            yield data
        round_ += 1


def codex_file(folder: Path, target: int) -> Path:
    lines = [json.loads(x) for x in CODEX.read_bytes().splitlines()]
    path = folder / "sessions" / CODEX.name
    path.parent.mkdir(parents=True)
    with path.open("wb") as file:
        file.write(json.dumps(lines[0]).encode() + b"\n")  # session_meta once
        for data in _rounds(lines[1:], target):
            file.write(data + b"\n")
    return path


def claude_file(folder: Path, target: int) -> Path:
    lines = [json.loads(x) for x in CLAUDE.read_bytes().splitlines()]
    path = folder / "projects" / "-workspace" / CLAUDE.name
    path.parent.mkdir(parents=True)
    with path.open("wb") as file:
        for data in _rounds(lines, target):
            file.write(data + b"\n")
    return path


def _gemini_path(folder: Path, suffix: str) -> Path:
    path = folder / "home" / ".gemini" / "tmp" / "p" / "chats" / f"{GEMINI.stem}{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def gemini_json_file(folder: Path, target: int) -> Path:
    session = json.loads(GEMINI.read_bytes())
    messages = session.pop("messages")
    path = _gemini_path(folder, ".json")
    with path.open("wb") as file:
        file.write(json.dumps(session).encode()[:-1] + b', "messages": [\n')
        for i, data in enumerate(_rounds(messages, target)):
            file.write((b",\n" if i else b"") + data)
        file.write(b"\n]}\n")
    return path


def gemini_jsonl_file(folder: Path, target: int) -> Path:
    session = json.loads(GEMINI.read_bytes())
    messages = session.pop("messages")
    path = _gemini_path(folder, ".jsonl")
    with path.open("wb") as file:
        file.write(json.dumps(session).encode() + b"\n")
        for data in _rounds(messages, target):
            file.write(data + b"\n")
    return path


def run(command: list[str], env: dict[str, str], stdin: bytes = b"") -> tuple[int, float, str]:
    """Run `command`; its exit code, peak RSS in MB (its own, from `wait4`) and output tail."""
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=out, stderr=out)
        assert child.stdin is not None
        child.stdin.write(stdin)
        child.stdin.close()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return child.returncode, usage.ru_maxrss / 1024, out.read().decode()[-300:]


Case = tuple[Callable[[Path, int], Path], Callable[[Path], tuple[list[str], bytes]]]
CASES: dict[str, Case] = {
    "codex": (codex_file, lambda p: ([CTXDB, "capture", "codex", "import", str(p)], b"")),
    "gemini-json": (
        gemini_json_file,
        lambda p: ([CTXDB, "capture", "gemini", "import", str(p)], b""),
    ),
    "gemini-jsonl": (
        gemini_jsonl_file,
        lambda p: ([CTXDB, "capture", "gemini", "import", str(p)], b""),
    ),
    "gemini-hook": (
        gemini_json_file,
        lambda p: (
            [CTXDB, "capture", "gemini", "hook"],
            json.dumps({"hook_event_name": "AfterAgent", "transcript_path": str(p)}).encode(),
        ),
    ),
    "claude-code": (claude_file, lambda p: ([CTXDB, "import", "claude-code", str(p)], b"")),
}


def say(text: str) -> None:
    print(text, flush=True)  # noqa: T201


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[1024, 300])
    parser.add_argument("--hosts", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    args = parser.parse_args()
    say(f"{'file':<14}{'size MB':>9}{'peak RSS MB':>13}{'seconds':>9}  exit")
    for mb in args.mb:
        for host in args.hosts:
            make, command = CASES[host]
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                path = make(folder, mb * 1024 * 1024)
                env = os.environ | {"CTXDB_HOME": str(folder / "ctxdb")}
                env["HOME"] = str(folder / "home")
                env["CTXDB_CLAUDE_CODE_USER_ID"] = "bench"
                argv, stdin = command(path)
                started = time.perf_counter()
                code, peak, tail = run(argv, env, stdin)
                seconds = time.perf_counter() - started
                size = path.stat().st_size / 2**20
                say(f"{host:<14}{size:>9.0f}{peak:>13.0f}{seconds:>9.1f}  {code}")
                notes = [line for line in tail.splitlines() if "not imported by the hook" in line]
                if code != 0 or notes:
                    say((notes or [tail])[-1])


if __name__ == "__main__":
    main()
