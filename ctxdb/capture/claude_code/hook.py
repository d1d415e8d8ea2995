"""`ctxdb capture claude-code hook`: one Claude Code hook payload (JSON on stdin) -> events.

Claude Code runs the hook once per event, each time in a new process, so a turn spans several
processes: UserPromptSubmit ends any turn still open, PostToolUse adds a step, Stop closes the
turn (with `last_assistant_message` when the payload has it), SessionEnd closes what is left.
Between processes the session's state (transcript offset, the open turn) lives in
`<state>/sessions/<session>.json`, guarded by a lock file.

Each process first reads what the transcript (`transcript_path`) gained since the last one and
feeds it through the same `TurnMapper` the importer uses, so turn and event ids come from the
transcript's uuids and an import of the same session adds nothing. Only when the transcript
cannot be read does a turn get ids from the payload alone (logged).

The hook always exits 0 and writes nothing to stdout or stderr: errors go to `<state>/hook.log`.
Its import path is the standard library plus this package's pure modules (no pydantic, polars,
torch, elasticsearch or dagster), so a cold process stays fast (bench/bench_claude_code.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxdb.capture.claude_code import spool
from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.transcript import read_from, tool_title
from ctxdb.capture.claude_code.turns import TurnMapper, safe_id, utc_now

try:
    import fcntl
except ImportError:  # Windows: hooks of one session then run unserialized
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("ctxdb.capture.claude_code.hook")

HANDLED = frozenset({"UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"})
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024


class HookError(ValueError):
    """A payload the hook cannot use (logged, never raised to Claude Code)."""


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (parallel tool hooks of one session run one at a time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as file:
        if fcntl is not None:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
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
    tmp.write_text(json.dumps(state, ensure_ascii=False))
    os.replace(tmp, path)


def catch_up(state: dict[str, Any], mapper: TurnMapper, transcript: Any) -> tuple[list, bool]:
    """Events for what the transcript gained since the last hook; False when it is unreadable."""
    if not isinstance(transcript, str) or not transcript:
        return [], False
    if state["transcript"] != transcript:
        state["transcript"], state["offset"] = transcript, 0
    try:
        batch = read_from(Path(transcript), state["offset"])
    except OSError as exc:
        log.warning("transcript %s unreadable: %s", transcript, exc)
        return [], False
    if batch.bad:
        log.warning("transcript %s: %d lines are not JSON (skipped)", transcript, batch.bad)
    state["offset"] = batch.offset
    return mapper.feed(batch.records), True


def _open_turn(mapper: TurnMapper, state: dict[str, Any], readable: bool) -> list[dict]:
    """Make sure a turn is open: the prompt waiting in the transcript, or (transcript unreadable)
    the prompt the UserPromptSubmit payload carried."""
    if mapper.turn is not None:
        return []
    if mapper.candidate is not None:
        return mapper.start()
    if not readable and state["prompt"]:
        log.warning("session %s: no transcript, turn ids from the hook payload", mapper.session_id)
        return mapper.start_fallback(state["prompt"]["text"], state["prompt"]["ts"])
    return []


def _payload_step(mapper: TurnMapper, payload: dict[str, Any], now: str) -> list[dict]:
    """The step of a PostToolUse payload, when there is no transcript to take it from. With a
    transcript the step comes from its tool result (time and status), exactly as an import takes
    it, so a session captured by hooks and imported later lands each event once."""
    name = str(payload.get("tool_name") or "tool")
    tool_use_id = payload.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        tool_use_id = f"{name}-{now}"
    return mapper.hook_step(tool_use_id, name, tool_title(name, payload.get("tool_input")), now)


def handle(payload: dict[str, Any], config: HookConfig, now: str | None = None) -> list[dict]:
    """Apply one hook payload to its session; return the events written (published on close)."""
    event = payload.get("hook_event_name")
    if event not in HANDLED or payload.get("agent_id"):
        return []
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        raise HookError(f"{event} payload has no session_id")
    if config.excludes(payload.get("cwd")):
        return []
    now = now or utc_now()
    key = safe_id(session)
    sessions = Path(config.state) / "sessions"
    with locked(sessions / f"{key}.lock"):
        state = load_state(sessions / f"{key}.json")
        mapper = TurnMapper(config.identity, session, state["mapper"])
        events, readable = catch_up(state, mapper, payload.get("transcript_path"))
        if mapper.state["project"] is None and isinstance(payload.get("cwd"), str):
            mapper.state["project"] = payload["cwd"]
        if event == "UserPromptSubmit":
            events += mapper.close(now)
            prompt = payload.get("prompt")
            state["prompt"] = {"text": prompt, "ts": now} if isinstance(prompt, str) else None
        elif event == "PostToolUse":
            events += _open_turn(mapper, state, readable)
            if not readable:
                events += _payload_step(mapper, payload, now)
        elif event == "Stop":
            events += _open_turn(mapper, state, readable)
            answer = payload.get("last_assistant_message")
            if readable and mapper.turn is not None and mapper.turn["text"]:
                events += mapper.close()  # the transcript's answer and times, as an import reads
            else:
                events += mapper.close(now, answer if isinstance(answer, str) else None)
        else:
            events += mapper.close(now)
        part = Path(config.spool) / f"{key}-{state['seq']:06d}.jsonl.part"
        spool.append(part, events)
        if any(e["type"] == "turn.closed" for e in events) or event == "SessionEnd":
            if spool.publish(part) is not None:
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
    path.parent.mkdir(parents=True, exist_ok=True)
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
    config = None
    try:
        path = _config_path(argv)
        config = HookConfig.load(path) if path else _default_config()
    except Exception:  # a hook must never disturb Claude Code
        pass
    try:
        _setup_log(config)
    except Exception:
        logging.disable(logging.CRITICAL)
    try:
        if config is None:
            raise HookError(f"no usable hook config ({' '.join(argv)})")
        raw = (stdin or sys.stdin.buffer).read(MAX_PAYLOAD_BYTES)
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
