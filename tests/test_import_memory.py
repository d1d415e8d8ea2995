"""Importing a large session keeps memory bounded (issue 41 item 3), and the Gemini CLI hook keeps
to its bounds: through the installed `ctxdb` command, on files made from the real fixtures
(tests/data/*/SOURCE.md).

Memory is behaviour here: an importer that holds a session's events (or its file) until the end
grows with the file, one that streams them does not. The peak is the import process's own
(`os.wait4`), not the test's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from ctxdb.capture.gemini.hook import MAX_SESSION_BYTES
from ctxdb.capture.reading import MAX_PAYLOAD_BYTES
from ctxdb.landing import partitions

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
DATA = Path(__file__).parent / "data"
CODEX = DATA / "codex" / "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl"
GEMINI = DATA / "gemini" / "session-2026-01-16T11-01-file-ops-37b7abef.json"
ROLLOUT_BYTES = 100 * 1024 * 1024
GROWTH_MB = 32
"""How much more the import of `ROLLOUT_BYTES` may peak at than the import of the 300 KB fixture:
streamed, about nothing (one line and one turn at a time); holding every event of the session
took 64 MB more (200 MB against 136 MB; the rest is the interpreter and the CLI's modules)."""
_ID = re.compile(rb'"(turn_id|call_id|id)":"([^"\\]*)"')
HANG_GUARD_S = 300
"""A command still running after this long is taken as hung (no test times anything)."""


def big_rollout(folder: Path, target: int) -> tuple[Path, int]:
    """A rollout of about `target` bytes: the fixture's session_meta line, then its other lines
    round after round, every turn and call id given the round's suffix; and the rounds."""
    meta, rest = CODEX.read_bytes().split(b"\n", 1)
    path = folder / CODEX.name
    rounds = 0
    with path.open("wb") as file:
        file.write(meta + b"\n")
        while file.tell() < target:
            file.write(_ID.sub(rb'"\1":"\2-r%d"' % rounds, rest))
            rounds += 1
    return path, rounds


MEASURE = (
    "import json, resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[2:], stdin=sys.stdin, capture_output=True, "
    "timeout=float(sys.argv[1]))\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
    "output = (done.stdout + done.stderr).decode()\n"
    "print(json.dumps([done.returncode, peak, output]))\n"
)
"""Run a command from a small process and print its exit code, peak RSS (MB) and output: a child
forked from pytest itself would count pytest's memory (Linux keeps the larger RSS of the process
before `exec` in `ru_maxrss`)."""


def ctxdb(args: list[str], home: Path, stdin: bytes = b"") -> tuple[int, float, str]:
    """Run the installed `ctxdb` with its own home; its exit code, peak RSS (MB, its own) and
    output."""
    env = os.environ | {"CTXDB_HOME": str(home / "ctxdb"), "HOME": str(home)}
    env["CTXDB_CLAUDE_CODE_USER_ID"] = "ann"
    with tempfile.TemporaryFile() as given:
        given.write(stdin)
        given.seek(0)
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, str(HANG_GUARD_S), CTXDB, *args],
            env=env,
            stdin=given,
            capture_output=True,
            check=True,
        )
    code, peak, output = json.loads(done.stdout)
    return code, peak, output


def turns(output: str) -> int:
    """The turns an import printed (`..., N turns, ...`)."""
    return int(re.search(r"(\d+) turns", output)[1])  # type: ignore[index]


def test_a_100_mb_rollout_imports_in_bounded_memory(tmp_path: Path) -> None:
    """~100 MB of a real rollout's ordinary turns: the import streams it (its peak RSS grows by
    less than `GROWTH_MB` over a small import's) and writes every turn of every round."""
    args = ["capture", "codex", "import", str(CODEX), "--settle-s", "0"]
    code, base, small = ctxdb(args, tmp_path)
    assert code == 0, small
    path, rounds = big_rollout(tmp_path, ROLLOUT_BYTES)
    home = tmp_path / "big"
    code, peak, output = ctxdb(["capture", "codex", "import", str(path), "--settle-s", "0"], home)
    path.unlink()
    assert code == 0, output
    assert turns(output) == rounds * turns(small)
    [written] = published(home / "ctxdb" / "landing" / "codex" / "import")
    assert written.name == f"{CODEX.stem}.jsonl"
    with written.open("rb") as file:
        closed = sum(b'"type":"turn.closed"' in line for line in file)
    assert closed == turns(output)
    grown = f"peak RSS {peak:.0f} MB importing {ROLLOUT_BYTES >> 20} MB, {base:.0f} MB for 300 KB"
    assert peak - base < GROWTH_MB, grown


def published(folder: Path) -> list[Path]:
    """The events files an import published under `folder`, each in today's day partition."""
    files = sorted(folder.rglob("*.jsonl"))
    assert all(p.parent.name == partitions.name(datetime.now(UTC)) for p in files), files
    return files


def gemini_home(tmp_path: Path) -> Path:
    """A home whose `~/.gemini/tmp/p/chats` folder is made."""
    (tmp_path / ".gemini" / "tmp" / "p" / "chats").mkdir(parents=True)
    return tmp_path


def test_gemini_hook_leaves_a_session_over_its_bound_to_the_importer(tmp_path: Path) -> None:
    """A session file over `MAX_SESSION_BYTES` (the real session, then blank space) is not
    re-imported by the hook, which says to run the importer; the importer then imports it."""
    home = gemini_home(tmp_path)
    session = home / ".gemini" / "tmp" / "p" / "chats" / GEMINI.name
    with session.open("wb") as file:
        file.write(GEMINI.read_bytes())
        file.write(b" " * (MAX_SESSION_BYTES + 1))
    payload = {"hook_event_name": "AfterAgent", "session_id": "s", "transcript_path": str(session)}
    code, _, output = ctxdb(["capture", "gemini", "hook"], home, json.dumps(payload).encode())
    imported = home / "ctxdb" / "landing" / "gemini_cli" / "import"
    assert code == 0
    assert "{}" in output
    assert "run `ctxdb capture gemini import`" in output
    assert not imported.exists()
    code, _, output = ctxdb(["capture", "gemini", "import", str(session), "--settle-s", "0"], home)
    assert code == 0, output
    assert turns(output) > 0
    assert [p.name for p in published(imported)] == [f"{GEMINI.stem}.jsonl"]


def test_gemini_hook_refuses_a_payload_over_its_bound(tmp_path: Path) -> None:
    """A payload longer than `MAX_PAYLOAD_BYTES` is refused with its reason, not read whole and
    acted on; the same payload without the padding imports the session."""
    home = gemini_home(tmp_path)
    session = home / ".gemini" / "tmp" / "p" / "chats" / GEMINI.name
    session.write_bytes(GEMINI.read_bytes())
    payload = {"hook_event_name": "AfterAgent", "session_id": "s", "transcript_path": str(session)}
    padded = {**payload, "prompt_response": "x" * MAX_PAYLOAD_BYTES}
    code, _, output = ctxdb(["capture", "gemini", "hook"], home, json.dumps(padded).encode())
    imported = home / "ctxdb" / "landing" / "gemini_cli" / "import"
    assert code == 0
    assert f"payload over {MAX_PAYLOAD_BYTES >> 20} MiB: refused" in output
    assert not imported.exists()
    code, _, output = ctxdb(["capture", "gemini", "hook"], home, json.dumps(payload).encode())
    assert code == 0
    assert [p.name for p in published(imported)] == [f"{GEMINI.stem}.jsonl"]


def test_a_reimport_rewrites_the_events_file_only_when_its_bytes_change(tmp_path: Path) -> None:
    """The day's events file is streamed and compared with the one in place: an unchanged rollout
    writes nothing (same file, no part file left), a shortened one replaces it with exactly what
    a fresh import of the shortened rollout writes."""
    rollout = tmp_path / CODEX.name
    rollout.write_bytes(CODEX.read_bytes())
    args = ["capture", "codex", "import", str(rollout), "--settle-s", "0"]
    folder = tmp_path / "ctxdb" / "landing" / "codex" / "import"
    assert ctxdb(args, tmp_path)[0] == 0
    [written] = published(folder)
    assert written.relative_to(folder).parts == (written.parent.name, f"{CODEX.stem}.jsonl")
    first = written.stat()
    code, _, output = ctxdb(args, tmp_path)
    assert code == 0, output
    assert "0 files written, 1 unchanged" in output
    assert (written.stat().st_ino, written.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    lines = CODEX.read_bytes().splitlines(keepends=True)
    rollout.write_bytes(b"".join(lines[: len(lines) // 2]))
    code, _, output = ctxdb(args, tmp_path)
    assert code == 0, output
    assert "1 files written, 0 unchanged" in output
    fresh = tmp_path / "fresh"
    assert ctxdb(args, fresh)[0] == 0
    [expected] = published(fresh / "ctxdb" / "landing" / "codex" / "import")
    assert 0 < len(written.read_bytes()) < first.st_size
    assert written.read_bytes() == expected.read_bytes()
    assert published(folder) == [written]
    assert sorted(p.name for p in written.parent.iterdir()) == [written.name]
