"""The hook commands, run without Typer or any command module: an agent starts one process per
event (`ctxdb capture claude-code hook`, `ctxdb capture gemini hook`), so each must start fast.

`ctxdb.cli.main` looks the arguments up in `HOOKS` before anything else is imported; `--help` on a
hook still goes through Typer (ctxdb/cli/capture.py holds the same commands for help and tests).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxdb.capture.claude_code.config import HookConfig
    from ctxdb.capture.claude_code.turns import Identity

GEMINI_APP = "gemini-cli"
"""The `app` Gemini CLI turns are recorded under."""


def host_target(
    adapter: str, app_name: str, config: HookConfig | None = None
) -> tuple[Path, Identity, HookConfig]:
    """Where a host's events go (`<landing>/<adapter>`), whose they are, and the opt-outs: from
    `config` (a hook config file's), else from the settings (`InstallError` when landing is not
    a local folder)."""
    from ctxdb.capture.claude_code.turns import Identity

    if config is None:
        from ctxdb.capture.claude_code.install import hook_config
        from ctxdb.settings import get_settings

        config = hook_config(get_settings())
    spool_dir = Path(config.spool).parent.parent / adapter
    return spool_dir, Identity(config.tenant, app_name, config.user_id), config


def claude_code(argv: Sequence[str]) -> int:
    """`ctxdb capture claude-code hook [--config FILE]`: silent, always 0 (see its module)."""
    from ctxdb.capture.claude_code.hook import run

    return run(argv)


def claude_code_context(argv: Sequence[str]) -> int:
    """`ctxdb capture claude-code context`: the SessionStart and UserPromptSubmit context hooks
    (see its module)."""
    from ctxdb.capture.claude_code.context_hook import run

    return run(list(argv))


def gemini_context(argv: Sequence[str]) -> int:
    """`ctxdb capture gemini context`: Gemini CLI's SessionStart hook (see its module)."""
    from ctxdb.capture.claude_code.context_hook import run

    return run(list(argv), host="gemini")


def gemini(argv: Sequence[str]) -> int:
    """`ctxdb capture gemini hook [--config FILE]`: import the session the payload on stdin
    names, print `{}`; problems are one line each on stderr. With `--config` (the hook config
    `ctxdb capture claude-code install` writes) the settings are never loaded, as for the Claude
    Code hook. Exit 2 on other arguments, an unreadable config or a landing that is not local."""
    from ctxdb.capture.claude_code.config import HookConfig
    from ctxdb.capture.gemini import hook
    from ctxdb.capture.gemini.importer import ADAPTER, SESSIONS
    from ctxdb.cli.errors import configure_logging

    path = _config_option(argv)
    if argv and path is None:
        sys.stderr.write(f"error: the gemini hook takes only --config FILE: {' '.join(argv)}\n")
        return 2
    configure_logging()
    errors: tuple[type[Exception], ...] = (OSError, ValueError, TypeError)  # a config file's
    if path is None:
        from ctxdb.capture.claude_code.install import InstallError  # loads the settings

        errors = (InstallError,)
    try:
        config = HookConfig.load(path) if path else None
        spool_dir, identity, _ = host_target(ADAPTER, GEMINI_APP, config)
    except errors as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return hook.run(spool_dir, identity, SESSIONS)


def _config_option(argv: Sequence[str]) -> Path | None:
    """FILE of `--config FILE` or `--config=FILE` when that is all `argv` holds, else None."""
    if len(argv) == 2 and argv[0] == "--config":
        return Path(argv[1])
    if len(argv) == 1 and argv[0].startswith("--config="):
        return Path(argv[0].removeprefix("--config="))
    return None


HOOKS: dict[tuple[str, ...], Callable[[Sequence[str]], int]] = {
    ("capture", "claude-code", "hook"): claude_code,
    ("capture", "claude-code", "context"): claude_code_context,
    ("capture", "gemini", "hook"): gemini,
    ("capture", "gemini", "context"): gemini_context,
}
"""The first three arguments of each hook command and what runs it (given the rest)."""
