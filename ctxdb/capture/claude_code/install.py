"""`ctxdb capture claude-code install|uninstall`: the hooks in Claude Code's settings file.

`--user` edits `~/.claude/settings.json` (every project); `--project DIR` edits
`DIR/.claude/settings.local.json`, the per-project file Claude Code keeps out of git, since the
hook command holds this machine's paths. Install adds one command hook for each of
UserPromptSubmit, PostToolUse (matcher `*`), Stop and SessionEnd, keeps every other setting, and
is idempotent (a second install replaces its own entries with identical ones). Uninstall removes
exactly the entries whose command runs the ctxdb hook, then any group, event list or `hooks`
object it left empty; a file left empty is removed. A settings file that is a symlink (dotfiles)
is written through the link; a `hooks` value that is not an object, or an event whose value is
not a list, is refused (InstallError) rather than dropped.

Install also writes the hook's configuration (`hook.json`, see `config.py`) from the settings.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.turns import ident
from ctxdb.capture.part_files import private_dir
from ctxdb.settings import Settings

EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd")
MARKERS = (
    "capture claude-code hook",
    "ctxdb.capture.claude_code.hook",
    "capture claude-code context",
    "capture gemini hook",
    "capture gemini context",
)
HOOK_TIMEOUT_S = 10


class InstallError(RuntimeError):
    """A settings file ctxdb will not touch (not JSON, not an object) or an unusable location."""


@dataclass
class Change:
    """What install/uninstall did to one settings file."""

    path: Path
    changed: bool
    entries: int


def os_user() -> str:
    """The OS account name, as a contract user id (`user` when the OS does not say)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = ""
    return ident(name, default="user")


def hook_config(settings: Settings) -> HookConfig:
    """The hook configuration the settings describe (see docs/capture.md)."""
    capture = settings.claude_code
    landing = settings.landing_uri
    if "://" in landing:
        raise InstallError(
            f"the hook writes local files; landing is {landing} (CTXDB_STORAGE_ROOT):"
            " unset CTXDB_STORAGE_ROOT or point it at a local folder"
        )
    return HookConfig(
        spool=str(Path(landing).absolute() / "claude_code" / "hook"),
        state=str(settings.home.absolute() / "capture" / "claude_code"),
        tenant=capture.tenant,
        app=capture.app,
        user_id=ident(capture.user_id) if capture.user_id else os_user(),
        exclude=tuple(str(Path(p).expanduser().absolute()) for p in capture.exclude),
        projects=str(Path(capture.projects).expanduser().absolute()),
        tool_output_chars=capture.tool_output_chars if capture.tool_output else 0,
    )


def config_path(settings: Settings) -> Path:
    return settings.home.absolute() / "capture" / "claude_code" / "hook.json"


def hook_command(config: Path) -> str:
    """The shell command Claude Code runs: this installation's `ctxdb` (or its Python)."""
    script = Path(sys.executable).parent / "ctxdb"
    if script.exists():
        head = f"{shlex.quote(str(script))} capture claude-code hook"
    else:
        head = f"{shlex.quote(sys.executable)} -m ctxdb.capture.claude_code.hook"
    return f"{head} --config {shlex.quote(str(config))}"


def settings_file(project: Path | None, user: bool) -> Path:
    """`~/.claude/settings.json` for --user, else `<project>/.claude/settings.local.json`."""
    if user:
        return Path.home() / ".claude" / "settings.json"
    return (project or Path.cwd()).absolute() / ".claude" / "settings.local.json"


def is_ours(entry: Any) -> bool:
    command = entry.get("command") if isinstance(entry, dict) else None
    return isinstance(command, str) and any(m in command for m in MARKERS)


def remove_hooks(settings: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """`settings` without the ctxdb hook entries (and what they alone kept), and their count."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings, 0
    removed = 0
    kept_hooks: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept_hooks[event] = groups
            continue
        kept_groups = []
        for group in groups:
            entries = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(entries, list) or not any(is_ours(e) for e in entries):
                kept_groups.append(group)
                continue
            rest = [e for e in entries if not is_ours(e)]
            removed += len(entries) - len(rest)
            if rest:
                kept_groups.append({**group, "hooks": rest})
        if kept_groups or not groups:
            kept_hooks[event] = kept_groups
    if not removed:
        return settings, 0
    result = dict(settings)
    if kept_hooks:
        result["hooks"] = kept_hooks
    else:
        result.pop("hooks")
    return result, removed


def add_hooks(settings: dict[str, Any], command: str) -> dict[str, Any]:
    """`settings` with one ctxdb hook per event (earlier ctxdb entries replaced)."""
    result, _ = remove_hooks(settings)
    hooks = result.get("hooks") or {}
    if not isinstance(hooks, dict):
        raise InstallError(f"settings 'hooks' is a {type(hooks).__name__}, not an object")
    hooks = dict(hooks)
    for event in EVENTS:
        if event in hooks and not isinstance(hooks[event], list):
            kind = type(hooks[event]).__name__
            raise InstallError(f"settings 'hooks.{event}' is a {kind}, not a list")
        entry = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}
        group: dict[str, Any] = {"hooks": [entry]}
        if event == "PostToolUse":
            group = {"matcher": "*", **group}
        hooks[event] = [*hooks.get(event, []), group]
    return {**result, "hooks": hooks}


def read_settings(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InstallError(f"{path} is not valid JSON ({exc}); left unchanged") from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} does not hold a JSON object; left unchanged")
    return data


def write_settings(path: Path, data: dict[str, Any]) -> None:
    """Write `data` (atomically, 2-space JSON) to `path`, or through it when it is a symlink;
    an empty object removes the file instead."""
    if not data and not path.is_symlink():
        path.unlink(missing_ok=True)
        return
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".ctxdb-tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def install(settings: Settings, project: Path | None = None, user: bool = False) -> Change:
    """Write the hook config and add the hooks to the chosen Claude Code settings file."""
    config = hook_config(settings)
    path = config_path(settings)
    config.dump(path)
    for folder in (Path(config.spool).parent, Path(config.spool), Path(config.state)):
        private_dir(folder)
    target = settings_file(project, user)
    before = read_settings(target)
    try:
        after = add_hooks(before, hook_command(path))
    except InstallError as exc:
        raise InstallError(f"{target}: {exc}; left unchanged") from None
    if after != before:
        write_settings(target, after)
    return Change(target, after != before, len(EVENTS))


def uninstall(project: Path | None = None, user: bool = False) -> Change:
    """Remove the ctxdb hooks from the chosen Claude Code settings file."""
    return uninstall_from(settings_file(project, user))


def uninstall_from(target: Path) -> Change:
    """Remove exactly the ctxdb hook entries from the host settings file `target` (Claude
    Code's or Gemini CLI's: the same shape), writing it only when one was there."""
    before = read_settings(target)
    after, removed = remove_hooks(before)
    if removed:
        write_settings(target, after)
    return Change(target, bool(removed), removed)
