"""`ctxdb capture claude-code hook`: one Claude Code hook payload (JSON on stdin) -> events.

Claude Code runs the hook once per event, each time in a new process, so a turn spans several
processes. Between processes the session's state (transcript offset, the open turn) lives in
`<state>/sessions/<session>.json`, guarded by a lock file (waited for at most `LOCK_TIMEOUT_S`).

Each process first reads what the transcript gained since the last one and feeds it through the
same `TurnMapper` the importer uses, so turns end where the transcript says they end and every id
and time comes from the transcript: hooks and an import of the same session write the same bytes,
whichever runs first. UserPromptSubmit ends the turn still open (an interrupted one), Stop ends
the answered turn once the transcript holds its answer (`last_assistant_message`; waited for at
most `STOP_WAIT_S`, else the transcript's `stop_hook_summary` line ends it at the next hook),
SessionEnd ends what is left. A task notice never starts a turn, nor does a local command.

The transcript is read only when it is a regular file named `<session_id>.jsonl` inside the
projects folder (`HookConfig.projects`, symlinks resolved and kept inside it), at most
`MAX_READ_BYTES` per process (the rest is read by the next hooks). Only when it cannot be read
does a turn get ids from the payload alone (logged; an import then lands it as another turn).

A transcript line that cannot be read (not JSON, nested too deep) is logged and skipped: the read
offset moves past it. `<private>` spans are removed before anything is written, the session's
state included (the open prompt, answer and pending tool inputs).

The hook always exits 0 and writes nothing to stdout or stderr: errors go to `<state>/hook.log`.
Files it writes are private to the account (umask 077). Its import path is the standard library
plus this package's pure modules (no pydantic, polars, torch, elasticsearch or dagster), so a cold
process stays fast (bench/bench_claude_code.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxdb.capture import part_files
from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.transcript import read_file, tool_input_summary, tool_title
from ctxdb.capture.claude_code.turns import TurnMapper, safe_id, utc_now
from ctxdb.capture.reading import MAX_PAYLOAD_BYTES, Unreadable, open_regular
from ctxdb.landing import partitions

try:
    import fcntl
except ImportError:  # Windows: hooks of one session then run unserialized
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("ctxdb.capture.claude_code.hook")

HANDLED = frozenset({"UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"})
MAX_READ_BYTES = 32 * 1024 * 1024
"""Transcript bytes one hook process reads at most (about 0.3 s of parsing)."""
LOCK_TIMEOUT_S = 5.0
"""How long a hook waits for the session lock before giving up (logged; the next hook catches
up, nothing is lost). Claude Code's timeout for the hook is `install.HOOK_TIMEOUT_S` (10 s)."""
STOP_WAIT_S = 1.0
"""How long Stop waits for the transcript to hold the answer the payload reports."""
NOTICE = "<task-notification>"


class HookError(ValueError):
    """A payload the hook cannot use (logged, never raised to Claude Code)."""


@contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive lock on `path` (hooks of one session run one at a time); HookError
    when another process holds it longer than `timeout` seconds."""
    part_files.private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | _flag("O_CLOEXEC"), part_files.FILE_MODE)
    with open(fd, "rb") as file:
        if fcntl is not None:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise HookError(f"{path.name} stayed locked {timeout:g} s") from None
                    time.sleep(0.02)
        yield


def load_state(path: Path) -> dict[str, Any]:
    """A session's saved state, or a fresh one."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        state = {}
    state.setdefault("transcript", None)
    state.setdefault("offset", 0)
    state.setdefault("seq", 0)
    state.setdefault("prompt", None)
    state.setdefault("mapper", {})
    return state


def save_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _flag("O_CLOEXEC"), part_files.FILE_MODE
    )
    with open(fd, "w", encoding="utf-8") as file:
        file.write(json.dumps(state, ensure_ascii=False))
    os.replace(tmp, path)


def _flag(name: str) -> int:
    """An `os.O_*` flag, 0 where the platform has none (Windows)."""
    return getattr(os, name, 0)


def open_transcript(transcript: str, session: str, projects: str) -> Any:
    """The transcript opened for reading, when it is a regular file named `<session>.jsonl`
    whose real path lies inside `projects`; else Unreadable (never blocks: no FIFO, no device;
    `ctxdb.capture.reading.open_regular`)."""
    name = f"{session}.jsonl"
    path = os.path.abspath(os.path.expanduser(transcript))
    if os.path.basename(path) != name or os.path.basename(os.path.realpath(path)) != name:
        raise Unreadable(f"transcript {transcript} is not named {name}")
    return open_regular(path, projects)


def catch_up(
    state: dict[str, Any], mapper: TurnMapper, transcript: Any, projects: str
) -> tuple[list, bool, bool]:
    """Events for what the transcript gained since the last hook, whether it was readable and
    whether it was read to its end."""
    if not isinstance(transcript, str) or not transcript:
        return [], False, False
    if state["transcript"] != transcript:
        state["transcript"], state["offset"] = transcript, 0
    try:
        with open_transcript(transcript, mapper.session_id, projects) as file:
            batch = read_file(file, state["offset"], limit=MAX_READ_BYTES)
    except OSError as exc:
        log.warning("transcript %s unreadable: %s", transcript, exc)
        return [], False, False
    if batch.bad:
        log.warning("transcript %s: %d lines unreadable (skipped)", transcript, batch.bad)
    state["offset"] = batch.offset
    return mapper.feed(batch.records), True, batch.rest == 0 or batch.truncated


def _answered(mapper: TurnMapper, answer: Any) -> bool:
    """True when the open turn's last text read is the answer the Stop payload reports (or the
    payload reports none), both without their `<private>` spans."""
    if mapper.turn is None:
        return False
    if not isinstance(answer, str) or not answer.strip():
        return True
    return mapper.clean(mapper.turn["text"]).rstrip().endswith(mapper.clean(answer).strip())


def _stop(
    state: dict[str, Any], mapper: TurnMapper, payload: dict[str, Any], done: bool, projects: str
) -> list[dict]:
    """Stop with a readable transcript: close the turn once the transcript holds its answer,
    reading what it gains for up to `STOP_WAIT_S`; a turn still unanswered stays open."""
    answer = payload.get("last_assistant_message")
    events: list[dict] = []
    deadline = time.monotonic() + STOP_WAIT_S
    reported = isinstance(answer, str) and bool(answer.strip())
    while not (done and _answered(mapper, answer)):
        open_prompt = mapper.turn is not None or mapper.candidate is not None
        if not (reported and open_prompt) or time.monotonic() >= deadline:
            if mapper.turn is not None:
                log.info("session %s: Stop before its answer was read", mapper.session_id)
            return events
        time.sleep(0.05)
        more, _, done = catch_up(state, mapper, payload.get("transcript_path"), projects)
        events += more
    return events + mapper.close(finished=True)  # Stop: Claude Code finished the answer itself


def _fallback(
    event: str, payload: dict[str, Any], mapper: TurnMapper, state: dict[str, Any], now: str
) -> list[dict]:
    """Without a readable transcript: a turn from the payloads alone (UserPromptSubmit's prompt,
    PostToolUse's tool, Stop's `last_assistant_message`: a prompt no answer followed, such as a
    local command, makes no turn), ids from the clock."""
    if event in ("UserPromptSubmit", "SessionEnd"):
        return mapper.close(now)
    events: list[dict] = []
    prompt = state["prompt"]
    if event in ("PostToolUse", "Stop") and mapper.turn is None and prompt:
        answer = payload.get("last_assistant_message")
        if event == "PostToolUse" or isinstance(answer, str) and answer.strip():
            log.warning(
                "session %s: no transcript, turn ids from the hook payload", mapper.session_id
            )
            events += mapper.start_fallback(prompt["text"], prompt["ts"])
    if event == "PostToolUse":
        name = str(payload.get("tool_name") or "tool")
        tool_use_id = payload.get("tool_use_id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            tool_use_id = f"{name}-{now}"
        tool_input = payload.get("tool_input")
        title, summary = tool_title(name, tool_input), tool_input_summary(tool_input)
        return events + mapper.hook_step(tool_use_id, name, title, now, summary=summary)
    answer = payload.get("last_assistant_message") if event == "Stop" else None
    text = answer if isinstance(answer, str) else None
    return events + mapper.close(now, text, finished=event == "Stop")


def _is_prompt(text: Any) -> bool:
    return isinstance(text, str) and not text.lstrip().startswith(NOTICE)


def handle(payload: dict[str, Any], config: HookConfig, now: str | None = None) -> list[dict]:
    """Apply one hook payload to its session; return the events written (published once a turn
    closes)."""
    event = payload.get("hook_event_name")
    if event not in HANDLED or payload.get("agent_id"):
        return []
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        raise HookError(f"{event} payload has no session_id")
    if config.excludes(payload.get("cwd")):
        return []
    if event == "UserPromptSubmit" and not _is_prompt(payload.get("prompt")):
        return []
    now = now or utc_now()
    key = safe_id(session)
    sessions = Path(config.state) / "sessions"
    with locked(sessions / f"{key}.lock"):
        state = load_state(sessions / f"{key}.json")
        mapper = TurnMapper(
            config.identity, session, state["mapper"], output_chars=config.tool_output_chars
        )
        transcript = payload.get("transcript_path")
        events, readable, done = catch_up(state, mapper, transcript, config.projects)
        if readable:
            if event == "Stop":
                events += _stop(state, mapper, payload, done, config.projects)
            elif event != "PostToolUse" and done:
                events += mapper.close()
        else:
            if mapper.state["project"] is None and isinstance(payload.get("cwd"), str):
                mapper.state["project"] = payload["cwd"]
            events += _fallback(event, payload, mapper, state, now)
        if event == "UserPromptSubmit":
            state["prompt"] = {"text": mapper.clean(payload["prompt"]), "ts": now}
        part = Path(config.spool) / f"{key}-{state['seq']:06d}.jsonl.part"
        part_files.append(part, events)
        if any(e["type"] == "turn.closed" for e in events) or event == "SessionEnd":
            published = part_files.publish(part, into=partitions.folder(Path(config.spool)))
            if published is not None:
                state["seq"] += 1
            state["prompt"] = None
        save_state(sessions / f"{key}.json", state)
    return events


def _config_path(argv: Sequence[str]) -> Path | None:
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.split("=", 1)[1])
    return None


def _setup_log(config: HookConfig | None) -> None:
    path = config.log_path if config else Path.home() / ".ctxdb-claude-code-hook.log"
    part_files.private_dir(path.parent)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _default_config() -> HookConfig:
    """The config from the settings (slow path: without --config the settings are imported)."""
    from ctxdb.capture.claude_code.install import hook_config
    from ctxdb.settings import get_settings

    return hook_config(get_settings())


def run(argv: Sequence[str], stdin: Any = None) -> int:
    """Run one hook: read the payload, apply it, log any failure; always 0, never any output."""
    os.umask(0o077)
    config = None
    try:
        path = _config_path(argv)
        config = HookConfig.load(path) if path else _default_config()
    except Exception:  # noqa: BLE001 - a hook must never disturb Claude Code
        pass
    try:
        _setup_log(config)
    except Exception:  # noqa: BLE001 - no log to write to: stay silent, never fail the host
        logging.disable(logging.CRITICAL)
    try:
        if config is None:
            raise HookError(f"no usable hook config ({' '.join(argv)})")
        raw = (stdin or sys.stdin.buffer).read(MAX_PAYLOAD_BYTES + 1)
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise HookError(f"payload over {MAX_PAYLOAD_BYTES >> 20} MiB: refused")
        try:
            payload = json.loads(raw)
        except ValueError as exc:
            raise HookError(f"payload is not JSON: {exc}") from None
        if not isinstance(payload, dict):
            raise HookError("payload is not a JSON object")
        handle(payload, config)
    except Exception:
        log.exception("claude code hook failed")
    return 0


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
