"""`ctxdb capture gemini install|uninstall`: ctxdb's hooks in Gemini CLI's settings file.

`--user` edits `~/.gemini/settings.json` (every project); `--project DIR` edits
`DIR/.gemini/settings.json`. Install adds the capture hook (`ctxdb capture gemini hook --config
<hook.json>`) to `AfterAgent` and `SessionEnd`, and, when `CTXDB_CLAUDE_CODE_CONTEXT` is true, the
context hook (`ctxdb capture gemini context`, see `ctxdb.capture.claude_code.context_hook`) to
`SessionStart`: Gemini CLI adds its `hookSpecificOutput.additionalContext` to the session
(interactive: as the first turn of the history); with `CTXDB_CLAUDE_CODE_LOOKUP`, the same command
on `BeforeAgent` gives each prompt its strong hits. Gemini CLI's hook settings have the shape of
Claude Code's (`hooks.<event>` a list of groups holding `hooks` entries), so the same edits apply:
every other setting is kept, a second install replaces ctxdb's entries with identical ones, and
uninstall removes exactly the entries whose command runs a ctxdb hook (`install.is_ours`). The
hook config (`hook.json`: identity, spool folder, opt-outs) is the one Claude Code's install
writes, shared by both hosts.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxdb.capture.claude_code.install import (
    Change,
    InstallError,
    config_path,
    hook_config,
    read_settings,
    remove_hooks,
    uninstall_from,
    write_settings,
)

if TYPE_CHECKING:
    from ctxdb.settings import Settings

CAPTURE_EVENTS = ("AfterAgent", "SessionEnd")
LOOKUP_EVENT = "BeforeAgent"
"""Gemini CLI's prompt event: its `hookSpecificOutput.additionalContext` is appended to the
prompt of that turn only."""
CONTEXT_TIMEOUT_MS = 10_000
"""Gemini CLI's own limit on the context hook (milliseconds); the hook's bound is shorter."""


def settings_file(project: Path | None, user: bool) -> Path:
    """`~/.gemini/settings.json` for --user, else `<project>/.gemini/settings.json`."""
    if user:
        return Path.home() / ".gemini" / "settings.json"
    return (project or Path.cwd()).absolute() / ".gemini" / "settings.json"


def capture_command(config: Path) -> str:
    """The capture hook's command: this installation's `ctxdb` with the hook config."""
    from ctxdb.capture.claude_code.mcp_config import ctxdb_command

    args = [*ctxdb_command(), "capture", "gemini", "hook", "--config", str(config)]
    return " ".join(shlex.quote(a) for a in args)


def with_hooks(data: dict[str, Any], entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`data` without its earlier ctxdb hooks and with one group per event of `entries`."""
    result, _ = remove_hooks(data)
    hooks = result.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise InstallError(f"settings 'hooks' is a {type(hooks).__name__}, not an object")
    hooks = dict(hooks)
    for event, entry in entries.items():
        if not isinstance(hooks.get(event, []), list):
            kind = type(hooks[event]).__name__
            raise InstallError(f"settings 'hooks.{event}' is a {kind}, not a list")
        hooks[event] = [*hooks.get(event, []), {"hooks": [entry]}]
    return {**result, "hooks": hooks}


def install(settings: Settings, project: Path | None = None, user: bool = False) -> Change:
    """Write the hook config and add ctxdb's hooks to the chosen Gemini CLI settings file."""
    from ctxdb.capture.claude_code import context_hook

    config = config_path(settings)
    hook_config(settings).dump(config)
    capture = {"type": "command", "name": "ctxdb-capture", "command": capture_command(config)}
    entries: dict[str, dict[str, Any]] = dict.fromkeys(CAPTURE_EVENTS, capture)
    if settings.claude_code.context:
        entries[context_hook.START] = {
            "type": "command",
            "name": "ctxdb-context",
            "command": context_hook.hook_command(settings, "gemini", context_hook.START),
            "timeout": CONTEXT_TIMEOUT_MS,
        }
    if settings.claude_code.lookup:
        entries[LOOKUP_EVENT] = {
            "type": "command",
            "name": "ctxdb-lookup",
            "command": context_hook.hook_command(settings, "gemini", context_hook.PROMPT),
            "timeout": CONTEXT_TIMEOUT_MS,
        }
    target = settings_file(project, user)
    before = read_settings(target)
    try:
        after = with_hooks(before, entries)
    except InstallError as exc:
        raise InstallError(f"{target}: {exc}; left unchanged") from None
    if after != before:
        write_settings(target, after)
    return Change(target, after != before, len(entries))


def uninstall(project: Path | None = None, user: bool = False) -> Change:
    """Remove ctxdb's hooks from the chosen Gemini CLI settings file."""
    return uninstall_from(settings_file(project, user))
