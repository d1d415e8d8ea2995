"""The project of a coding host's turn: the git root of its working folder, else the folder.

One home for the rule and for a project folder's agent id (`agent_for_project`: the `agent` a
Claude Code or Codex session is recorded under), used where a turn is captured
(`ctxdb.capture.claude_code.turns`, whose mapper the Codex and Gemini importers share) and where a
project is asked for (the SessionStart hook, `ctxdb context --project DIR`, `ctxdb search
--project DIR`), so both sides compute the same value.

`project_of(cwd)` walks up from `cwd` (lexically: `..` segments are folded, symlinks are never
resolved) for at most `MAX_DEPTH` folders, looking for a `.git` entry that is a folder or a plain
file (a worktree or submodule) with `lstat`, which never follows a link or opens anything. The
first folder holding one is the project. When `cwd` is not an existing folder (deleted, a link
loop, unreadable), no git root is within reach, or the path holds characters that are not UTF-8
(lone surrogates from undecodable bytes), the project is `cwd` as given (its undecodable
characters written as `\\udcXX` escapes so the value stays valid UTF-8). A relative `cwd` (Gemini
CLI sessions name only a project hash) has no project. Standard library only: the hooks import it.
"""

from __future__ import annotations

import os
import re
import stat

MAX_DEPTH = 64
"""Most folders `project_of` looks at, `cwd` included."""
PROJECT_MAX_CHARS = 4096
"""Longest project value (PATH_MAX on Linux); a longer `cwd` is cut to this."""


_WINDOWS_ABSOLUTE = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")
"""A Windows absolute path (`C:\\src`, `\\\\server\\share`), as a transcript made on Windows
names its folder."""


_NOT_SLUG = re.compile(r"[^A-Za-z0-9_.\-]+")
_DRIVE = re.compile(r"^[a-z](?=:([\\/]|$))")
"""A Windows drive letter written in lower case (`e:\\AI`): one project whatever its case."""


def _printable(path: str) -> str:
    """`path` as valid UTF-8 text: undecodable characters (lone surrogates) become escapes."""
    return path.encode("utf-8", "backslashreplace").decode("utf-8")[:PROJECT_MAX_CHARS]


def _has_git(folder: str) -> bool:
    """Whether `folder` holds a `.git` folder or plain file (never following a link)."""
    try:
        mode = os.lstat(os.path.join(folder, ".git")).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(mode) or stat.S_ISREG(mode)


def _is_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def project_of(cwd: str | None) -> str | None:
    """The project of a turn run in `cwd` (see the module docstring); None without an absolute
    `cwd`."""
    if not cwd or not (os.path.isabs(cwd) or _WINDOWS_ABSOLUTE.match(cwd)):
        return None
    if _printable(cwd) != cwd or len(cwd) > PROJECT_MAX_CHARS or not _is_folder(cwd):
        return _printable(cwd)
    folder = os.path.normpath(cwd)
    for _ in range(MAX_DEPTH):
        if _has_git(folder):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return cwd


def resolve_project(value: str) -> str:
    """The project a caller names: an existing folder's `project_of` (relative to the current
    folder, `~` expanded), else `value` as given (a project recorded on another machine, or an
    agent id)."""
    folder = os.path.abspath(os.path.expanduser(value))
    return (project_of(folder) or value) if _is_folder(folder) else value


def looks_like_folder(value: str) -> bool:
    """Whether a project value given by a caller is a folder path (else it is an agent id)."""
    return "/" in value or "\\" in value


def agent_for_project(path: str | None) -> str:
    """The agent id of a project directory: its path with separators as `-`
    (`/home/ann/src/shop` -> `home-ann-src-shop`); long paths keep their tail behind a hash. A
    Windows drive letter counts in upper case (`e:\\AI` and `E:\\AI` are both `E-AI`)."""
    if not path:
        return "unknown-project"
    path = _DRIVE.sub(lambda drive: drive[0].upper(), path)
    slug = _NOT_SLUG.sub("-", path).strip("-.")
    slug = re.sub(r"^[^A-Za-z0-9]+", "", slug) or "root"
    if len(slug) > 128:
        import hashlib  # only for long paths: loading OpenSSL costs every hook process a few ms

        digest = hashlib.sha1(path.encode("utf-8", "surrogatepass")).hexdigest()
        slug = f"{digest[:8]}-{slug[-119:].lstrip('-._')}"
    return slug
