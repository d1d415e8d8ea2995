"""How capture reads host files (issue 41): through the real CLI and the real hook, on copies of
the real fixtures (tests/data/*/SOURCE.md). A FIFO is refused without blocking; a line nested
thousands deep is one skipped line, never the end of an import or of a session's capture;
`<private>` never reaches the Claude Code hook's saved state; a folder import does not follow a
symlink out of the folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from claude_code_sessions import FIXTURES, installed_command, replay, run_hook

from ctxdb.landing import partitions
from ctxdb.settings import Settings
from ctxdb.storage import tombstones
from ctxdb.storage.delta import DeltaStore

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
DATA = Path(__file__).parent / "data"
CODEX = sorted((DATA / "codex").glob("rollout-*.jsonl"))
GEMINI = DATA / "gemini" / "session-2026-01-16T11-01-file-ops-37b7abef.json"
GEMINI_JSONL = DATA / "gemini" / "session-2026-04-23T12-52-0ab84937.jsonl"
TWO_TURNS = FIXTURES / "-home-USER-projects-spotter-worktrees-spotter-dov"
DEPTH = 5_000
SETTLED = ["--settle-s", "0"]
"""Copies are new files: import them as finished sessions (their last turn closed)."""
HANG_GUARD_S = 60
"""A command still running after this long is taken as hung (no test times anything)."""


def deep_json(depth: int = DEPTH) -> str:
    """JSON nested `depth` lists deep (what a model may write into a tool call's arguments)."""
    return "[" * depth + '"x"' + "]" * depth


def unreadable(output: str) -> int:
    """The count of unreadable lines an import printed (`(N unreadable, ...`)."""
    return int(output.split(" unreadable")[0].rsplit("(", 1)[1])


def ctxdb(args: list[str], home: Path, stdin: str = "") -> subprocess.CompletedProcess:
    """The installed `ctxdb` command with its own home (and `HOME`, for `~/.gemini`)."""
    env = os.environ | {"CTXDB_HOME": str(home / "ctxdb"), "HOME": str(home)}
    env["CTXDB_CLAUDE_CODE_USER_ID"] = "ann"
    return subprocess.run(
        [CTXDB, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


def written(home: Path, adapter: str) -> list[str]:
    """Names of the events files an import wrote for `adapter`, each in today's partition."""
    files = list((home / "ctxdb" / "landing" / adapter / "import").rglob("*.jsonl"))
    assert all(p.parent.name == partitions.name(datetime.now(UTC)) for p in files), files
    return sorted(p.name for p in files)


def insert_after(lines: list[bytes], index: int, *extra: bytes) -> bytes:
    return b"".join(lines[: index + 1] + [e + b"\n" for e in extra] + lines[index + 1 :])


def test_gemini_hook_refuses_fifo(tmp_path: Path) -> None:
    """A FIFO named like a session file: the hook returns (`{}`, exit 0) and says why, instead of
    blocking on the read; a real session beside it is still imported by the next hook."""
    chats = tmp_path / ".gemini" / "tmp" / "p" / "chats"
    chats.mkdir(parents=True)
    fifo = chats / "session-f.json"
    os.mkfifo(fifo)
    payload = {"hook_event_name": "AfterAgent", "session_id": "f", "transcript_path": str(fifo)}
    done = ctxdb(["capture", "gemini", "hook"], tmp_path, json.dumps(payload))
    assert (done.returncode, done.stdout) == (0, "{}\n")
    assert "not a regular file" in done.stderr
    assert written(tmp_path, "gemini_cli") == []

    session = chats / GEMINI.name
    shutil.copy(GEMINI, session)
    payload["transcript_path"] = str(session)
    done = ctxdb(["capture", "gemini", "hook"], tmp_path, json.dumps(payload))
    assert (done.returncode, done.stdout) == (0, "{}\n")
    assert written(tmp_path, "gemini_cli") == [f"{GEMINI.stem}.jsonl"]


def test_codex_import_skips_a_line_nested_thousands_deep(tmp_path: Path) -> None:
    """The first rollout (sorted) gets a line nested 5,000 deep and a function call whose
    `arguments` string is: both are counted and skipped, every rollout is imported (the damaged
    one with all its turns), exit 0."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    for source in CODEX:
        shutil.copy(source, folder / source.name)
    damaged = folder / CODEX[0].name
    lines = damaged.read_bytes().splitlines(keepends=True)
    deep_line = json.dumps({"type": "response_item", "payload": {"type": "x", "v": "LEAF"}})
    deep_line = deep_line.replace('"LEAF"', deep_json())
    call = {"type": "function_call", "name": "shell", "call_id": "deep-1"}
    call_line = {"type": "response_item", "payload": {**call, "arguments": deep_json()}}
    damaged.write_bytes(insert_after(lines, 1, deep_line.encode(), json.dumps(call_line).encode()))
    clean = ctxdb(["capture", "codex", "import", str(CODEX[0]), *SETTLED], tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr

    done = ctxdb(["capture", "codex", "import", str(folder), *SETTLED], tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{len(CODEX)} sessions" in done.stdout and unreadable(done.stdout) >= 1
    assert "RecursionError" not in done.stdout + done.stderr
    assert written(tmp_path, "codex") == sorted(f"{p.stem}.jsonl" for p in CODEX)
    turns = clean.stdout.split(" turns")[0].rsplit(" ", 1)[1]
    first = ctxdb(["capture", "codex", "import", str(damaged), *SETTLED], tmp_path / "again")
    assert f" {turns} turns" in first.stdout


def test_claude_code_import_skips_a_line_nested_thousands_deep(tmp_path: Path) -> None:
    """`ctxdb import claude-code` over a copy of the fixture folder whose first transcript holds a
    line nested 5,000 deep: that line is counted and skipped, every transcript is imported."""
    folder = tmp_path / "projects"
    shutil.copytree(FIXTURES, folder, ignore=shutil.ignore_patterns("*.md"))
    transcripts = sorted(p for p in folder.rglob("*.jsonl") if "subagents" not in p.parts)
    first = transcripts[0]
    lines = first.read_bytes().splitlines(keepends=True)
    line = json.loads(lines[1])
    line["message"] = {"role": "user", "content": "LEAF"}
    encoded = json.dumps(line).replace('"LEAF"', deep_json()).encode()
    first.write_bytes(insert_after(lines, 1, encoded))

    done = ctxdb(["import", "claude-code", str(folder), *SETTLED], tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{len(transcripts)} transcripts" in done.stdout and "(1 unreadable" in done.stdout
    assert len(written(tmp_path, "claude_code")) == len(transcripts)


@pytest.mark.parametrize("source", [GEMINI, GEMINI_JSONL], ids=["json", "jsonl"])
def test_gemini_import_skips_a_message_nested_thousands_deep(tmp_path: Path, source: Path) -> None:
    """A Gemini CLI session (document or JSONL) with a message whose tool call arguments nest
    5,000 deep: the message is counted and skipped, the turns around it are imported."""
    folder = tmp_path / "chats"
    folder.mkdir()
    target = folder / source.name
    clean = ctxdb(["capture", "gemini", "import", str(source), *SETTLED], tmp_path / "clean")
    bad = {"id": "deep-1", "type": "gemini", "content": "", "toolCalls": [{"id": "c", "args": 0}]}
    encoded = json.dumps(bad).replace('"args": 0', f'"args": {deep_json()}')
    if source.suffix == ".json":
        text = source.read_text()
        at = text.index('"messages": [') + len('"messages": [')
        target.write_text(text[:at] + encoded + "," + text[at:])
    else:
        lines = source.read_bytes().splitlines(keepends=True)
        target.write_bytes(insert_after(lines, 2, encoded.encode()))

    done = ctxdb(["capture", "gemini", "import", str(folder), *SETTLED], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 sessions" in done.stdout and "(1 unreadable" in done.stdout
    turns = clean.stdout.split(" turns")[0].rsplit(" ", 1)[1]
    assert f" {turns} turns" in done.stdout


def test_claude_code_hook_skips_a_deep_line_and_captures_the_answer_after_it(
    tmp_path: Path,
) -> None:
    """A real session replayed through the installed hook, a line nested 5,000 deep written
    before its answer: the hook moves past it, and the turn closes with its answer."""
    source = tmp_path / "source" / TWO_TURNS.name / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    source.parent.mkdir(parents=True)
    lines = (TWO_TURNS / source.name).read_bytes().splitlines(keepends=True)
    prompt = next(i for i, x in enumerate(lines) if json.loads(x).get("type") == "assistant") - 1
    deep_line = (
        lines[prompt]
        .rstrip()
        .replace(b'"type":"user"', b'"type":"user","x":' + deep_json().encode())
    )
    assert deep_line != lines[prompt]
    source.write_bytes(insert_after(lines, prompt, deep_line))
    settings = Settings(
        home=tmp_path / "home", claude_code={"user_id": "ann", "projects": str(tmp_path)}
    )
    command = installed_command(settings, tmp_path / "shop")
    replay(source, tmp_path / "projects", lambda p: run_hook(command, p))

    spool = settings.home / "landing" / "claude_code" / "hook"
    events = [json.loads(x) for p in spool.rglob("*.jsonl") for x in p.read_text().splitlines()]
    closed = [e for e in events if e["type"] == "turn.closed"]
    answers = [e for e in events if e["type"] == "assistant.completion"]
    assert len(closed) == 2 and len(answers) == 2
    log = (settings.home / "capture" / "claude_code" / "hook.log").read_text()
    assert "RecursionError" not in log and "1 lines unreadable" in log


def test_claude_code_hook_state_never_holds_private_text(tmp_path: Path) -> None:
    """A real session whose first prompt holds a `<private>` span, replayed through the installed
    hook: the session state saved after every hook (the prompt waiting, the open turn with its
    pending tools) never holds the private text, nor do the events written."""
    secret = "hunter2-do-not-keep"
    name = "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    source = tmp_path / "source" / TWO_TURNS.name / name
    source.parent.mkdir(parents=True)
    lines = [json.loads(x) for x in (TWO_TURNS / name).read_bytes().splitlines()]
    first = next(x for x in lines if x.get("type") == "user")
    assert isinstance(first["message"]["content"], str)
    first["message"]["content"] += f" <private>{secret}</private>"
    source.write_text("".join(json.dumps(x) + "\n" for x in lines))
    settings = Settings(
        home=tmp_path / "home", claude_code={"user_id": "ann", "projects": str(tmp_path)}
    )
    command = installed_command(settings, tmp_path / "shop")
    state = settings.home / "capture" / "claude_code" / "sessions" / name.replace("jsonl", "json")
    seen: list[dict] = []

    def run(payload: dict) -> None:
        run_hook(command, payload)
        seen.append(json.loads(state.read_text()))

    replay(source, tmp_path / "projects", run)
    assert seen[0]["prompt"] and any(s["mapper"]["turn"] for s in seen)
    assert not [s for s in seen if secret in json.dumps(s) or "<private>" in json.dumps(s)]
    spool = settings.home / "landing" / "claude_code" / "hook"
    published = "".join(p.read_text() for p in spool.rglob("*.jsonl"))  # day partitions
    assert published and secret not in published


def test_folder_import_refuses_symlinks_out_of_the_folder(tmp_path: Path) -> None:
    """A rollout linked into the sessions folder from outside, and a linked folder: neither is
    imported; the rollout inside the folder is."""
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    shutil.copy(CODEX[0], outside / CODEX[0].name)
    shutil.copy(CODEX[1], outside / "dir" / CODEX[1].name)
    folder = tmp_path / "sessions"
    (folder / "2026").mkdir(parents=True)
    shutil.copy(CODEX[2], folder / "2026" / CODEX[2].name)
    (folder / "2026" / CODEX[0].name).symlink_to(outside / CODEX[0].name)
    (folder / "linked").symlink_to(outside / "dir", target_is_directory=True)

    done = ctxdb(["capture", "codex", "import", str(folder), *SETTLED], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 sessions" in done.stdout
    assert written(tmp_path, "codex") == [f"{CODEX[2].stem}.jsonl"]


@pytest.mark.parametrize("host", ["claude-code", "codex"])
def test_a_conversation_erased_is_never_imported_again(tmp_path: Path, host: str) -> None:
    """After `ctxdb erase`, the host's own files still hold the conversation: an import of them
    writes none of its events to the landing area (before, it wrote them all again, and landing
    quarantined them), and says how many it left out; the other sessions are imported."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    if host == "claude-code":
        kept, gone = (
            TWO_TURNS / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
            FIXTURES / ("-workspace/c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"),
        )
        erased_id, args, adapter = gone.stem, ["import", "claude-code"], "claude_code"
    else:
        kept, gone = CODEX[0], CODEX[-1]
        erased_id, args, adapter = gone.stem[-36:], ["capture", "codex", "import"], "codex"
    for source in (kept, gone):
        shutil.copy(source, folder / source.name)
    store = DeltaStore.from_settings(Settings(home=tmp_path / "ctxdb"))
    tombstones.record(store, pl.Series([erased_id]), datetime.now(UTC))  # what erase leaves

    done = ctxdb([*args, str(folder), *SETTLED], tmp_path)
    assert done.returncode == 0, done.stderr
    assert " events of erased conversations left out" in done.stdout
    landed = "".join(
        p.read_text() for p in (tmp_path / "ctxdb" / "landing" / adapter).rglob("*.jsonl")
    )
    assert erased_id not in landed and landed.count("\n") > 0
