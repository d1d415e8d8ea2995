"""The hook's configuration file: the settings `install` resolved, read without pydantic.

`ctxdb capture claude-code install` resolves the capture settings once (identity, spool folder,
opt-outs) and writes them as JSON to `<home>/capture/claude_code/hook.json`; the installed hook
command names that file (`--config`), so each hook process reads one small JSON file instead of
importing the settings machinery. Standard library only (the hook imports it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the context hooks read the config without the turn mapper
    from ctxdb.capture.claude_code.turns import Identity


class HookConfig(NamedTuple):
    """What a hook process needs: where events go, where session state lives, who owns them."""

    spool: str
    """Folder the hook publishes its JSONL files into (under the landing location)."""
    state: str
    """Folder of per-session state, locks and the hook's error log."""
    tenant: str
    app: str
    user_id: str
    exclude: tuple[str, ...] = ()
    """Project folders (and their sub-folders) that are never captured."""
    projects: str = "~/.claude/projects"
    """The only folder whose transcripts the hook reads (Claude Code's projects folder)."""
    tool_output_chars: int = 0
    """Tool output a step carries, at most this many characters; 0: none (the default)."""

    @property
    def identity(self) -> Identity:
        from ctxdb.capture.claude_code.turns import Identity

        return Identity(self.tenant, self.app, self.user_id)

    @property
    def log_path(self) -> Path:
        return Path(self.state) / "hook.log"

    def excludes(self, cwd: str | None) -> bool:
        """True when `cwd` is one of the opted-out project folders or inside one."""
        if not cwd:
            return False
        here = os.path.normpath(cwd)
        return any(
            here == (root := os.path.normpath(p)) or here.startswith(root.rstrip(os.sep) + os.sep)
            for p in self.exclude
        )

    def dump(self, path: Path) -> None:
        """Write the config as JSON, private to the account (0600 in a 0700 folder)."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.chmod(path, 0o600)
        with open(fd, "w") as file:
            file.write(json.dumps(self._asdict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> HookConfig:
        data = json.loads(Path(path).read_text())
        fields = {k: data[k] for k in cls._fields if k in data}
        return cls(**{**fields, "exclude": tuple(fields.get("exclude", ()))})
