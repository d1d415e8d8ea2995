"""The Claude Code `SessionStart` hook: the context pack of the session's project, in time or not
at all.

`ctxdb capture claude-code install` adds it when `CTXDB_CLAUDE_CODE_CONTEXT` is true (matcher
`startup|resume|clear|compact`); uninstall removes it with the other ctxdb hooks. Claude Code runs
`ctxdb capture claude-code context --token-file F --budget N --timeout S` with the memory's
settings in its environment; the hook reads the payload on stdin, builds the pack of its `cwd`'s
project (`ctxdb.contract.projects.project_of`, the value capture records; turns recorded before
projects count by the folder's agent id), as the user of the token file (the capture
user's token, the one the MCP server runs as), and prints

    {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "<pack>"}}

within Claude Code's 10,000-character limit. The pack is built in a worker thread; when it is not
done within `--timeout` seconds of the process start, or fails (memory unreachable, bad token),
the hook prints `{}` and exits 0 at once: a slow or failing memory never delays the session past
the bound.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.install import (
    HOOK_TIMEOUT_S,
    InstallError,
    config_path,
    hook_config,
    read_settings,
    settings_file,
    write_settings,
)
from ctxdb.settings import Settings

EVENT = "SessionStart"
MATCHER = "startup|resume|clear|compact"
MAX_CHARS = 9_500
"""Characters of the pack (Claude Code cuts `additionalContext` past 10,000; the rest is JSON)."""
_STARTED = time.monotonic()


def hook_command(settings: Settings) -> str:
    """The shell command of the hook: this installation's ctxdb, the memory's environment, the
    capture user's token file (issued if needed) and the pack's budget and time bound."""
    from ctxdb.capture.claude_code.mcp_config import ensure_token, server_entry

    token = ensure_token(settings)
    entry = server_entry(settings, token)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in entry["env"].items())
    config = settings.claude_code
    args = [*entry.get("args", [])[:-3], "capture", "claude-code", "context"]
    args += ["--token-file", str(token), "--budget", str(config.context_budget)]
    args += ["--timeout", str(config.context_timeout_s)]
    return f"env {env} {shlex.quote(entry['command'])} " + " ".join(shlex.quote(a) for a in args)


def add(settings: Settings, project: Path | None, user: bool) -> Path:
    """Add the SessionStart hook to the chosen Claude Code settings file (after `install`, which
    removed any earlier one)."""
    target = settings_file(project, user)
    data = read_settings(target)
    hooks = data.get("hooks") or {}
    if not isinstance(hooks, dict) or not isinstance(hooks.get(EVENT, []), list):
        raise InstallError(f"{target}: settings 'hooks.{EVENT}' is not a list; left unchanged")
    entry = {"type": "command", "command": hook_command(settings), "timeout": HOOK_TIMEOUT_S}
    hooks = {**hooks, EVENT: [*hooks.get(EVENT, []), {"matcher": MATCHER, "hooks": [entry]}]}
    write_settings(target, {**data, "hooks": hooks})
    return target


def pack_text(payload: dict[str, Any], token_file: str, budget: int) -> str:
    """The pack of the payload's project as the token file's user ("" when memory holds none or
    the project is excluded from capture, `CTXDB_CLAUDE_CODE_EXCLUDE`)."""
    from datetime import UTC, datetime

    from ctxdb.auth.authenticate import Authenticator
    from ctxdb.contract.projects import agent_for_project, project_of
    from ctxdb.index.client import make_client
    from ctxdb.pack.build import build_pack
    from ctxdb.pack.models import ContextRequest
    from ctxdb.settings import get_settings
    from ctxdb.storage.delta import DeltaStore

    settings = get_settings()
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else os.getcwd()
    installed = config_path(settings)
    capture = HookConfig.load(installed) if installed.is_file() else hook_config(settings)
    if capture.excludes(cwd):
        return ""  # an opted-out project is neither captured nor told its memory
    principal = Authenticator(settings, make_client).authenticate(
        Path(token_file).read_text().strip()
    )
    project = project_of(cwd) or agent_for_project(cwd)
    request = ContextRequest(project=project, budget=budget, max_chars=MAX_CHARS)
    pack = build_pack(principal, request, datetime.now(UTC), DeltaStore.from_settings(settings))
    return pack.text if any(item.ref for item in pack.items) else ""


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ctxdb capture claude-code context")
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--timeout", type=float, default=1.5)
    return parser.parse_args(argv)


def run(argv: list[str], stdin: IO[str] = sys.stdin, stdout: IO[str] = sys.stdout) -> int:
    """Answer one SessionStart payload (see the module doc); always exit 0 once arguments parse."""
    args = _arguments(argv)
    try:
        payload = json.loads(stdin.read() or "{}")
    except ValueError:
        payload = {}
    found: list[str] = []

    def work() -> None:
        try:
            found.append(
                pack_text(
                    payload if isinstance(payload, dict) else {}, args.token_file, args.budget
                )
            )
        except Exception as exc:  # noqa: BLE001 - the session must start whatever memory does
            sys.stderr.write(f"ctxdb context: {type(exc).__name__}: {exc}\n")

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(max(0.0, args.timeout - (time.monotonic() - _STARTED)))
    text = found[0] if found else ""
    answer = {"hookSpecificOutput": {"hookEventName": EVENT, "additionalContext": text}}
    stdout.write(json.dumps(answer if text else {}) + "\n")
    stdout.flush()
    if worker.is_alive():
        os._exit(0)  # the pack is late: leave it behind rather than wait for it
    return 0
