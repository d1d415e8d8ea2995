"""The `ctxdb mcp` server in Claude Code's MCP configuration (`ctxdb capture claude-code install`).

`--project DIR` adds a `ctxdb` entry to `DIR/.mcp.json` (Claude Code's project scope; it asks
once before starting a project's server), keeping every other server; uninstall removes exactly
that entry, and the file when nothing else is left. `--user` prints the `claude mcp add-json
--scope user` command instead of editing Claude Code's own state file. The entry holds this
machine's paths: keep `.mcp.json` out of git, or share it knowing that.

The server runs as the capture user (the one the hooks record turns as): a token for that user
and tenant is issued once into the token store and kept in `<home>/auth/claude-code-mcp.token`
(mode 600), which the entry names with `--token-file`; the token itself is never in `.mcp.json`.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from ctxdb.auth.authenticate import open_token_store
from ctxdb.auth.credentials import AuthError
from ctxdb.capture.claude_code.install import (
    Change,
    InstallError,
    hook_config,
    read_settings,
    write_settings,
)
from ctxdb.settings import Settings

SERVER = "ctxdb"
MCP_FILE = ".mcp.json"


def token_path(settings: Settings) -> Path:
    return settings.home.absolute() / "auth" / "claude-code-mcp.token"


def ensure_token(settings: Settings) -> Path:
    """The token file of the capture user: kept while its token is valid for that user, else a
    new token is issued and written (mode 600)."""
    from ctxdb.index.client import make_client  # the client package loads only when needed

    config = hook_config(settings)
    path = token_path(settings)
    store = open_token_store(settings, make_client)
    try:
        principal = store.verify(path.read_text().strip())
        if (principal.user_id, principal.tenant) == (config.user_id, config.tenant):
            return path
    except (OSError, AuthError):
        pass
    token = store.issue(config.user_id, tenant=config.tenant, label="claude-code mcp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.replace(tmp, path)
    return path


def ctxdb_command() -> list[str]:
    """This installation's `ctxdb`, as the head of an argv: its script, else its Python running
    the CLI (the MCP server's and the context hooks' commands start with it)."""
    script = Path(sys.executable).parent / "ctxdb"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from ctxdb.cli import main; main()"]


def server_entry(settings: Settings, token: Path) -> dict[str, Any]:
    """The stdio server entry: this installation's `ctxdb mcp` reading this memory."""
    command, *head = ctxdb_command()
    env = {
        "CTXDB_HOME": str(settings.home.absolute()),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_AUTH_TOKEN_STORE": settings.auth.token_store,
    }
    root = settings.storage_root  # the memory the hooks land into, wherever the server starts
    if root:  # (object-store options stay in the environment: they may hold credentials)
        env["CTXDB_STORAGE_ROOT"] = root if "://" in root else str(Path(root).absolute())
    return {
        "type": "stdio",
        "command": command,
        "args": [*head, "mcp", "--token-file", str(token)],
        "env": env,
    }


def _is_ours(entry: Any) -> bool:
    args = entry.get("args") if isinstance(entry, dict) else None
    return isinstance(args, list) and "mcp" in args and "--token-file" in args


def register(settings: Settings, project: Path | None = None) -> Change:
    """Add (or refresh) the `ctxdb` server in `<project>/.mcp.json`, keeping other servers."""
    target = (project or Path.cwd()).absolute() / MCP_FILE
    data = read_settings(target)
    servers = data.get("mcpServers") or {}
    if not isinstance(servers, dict):
        raise InstallError(f"{target}: mcpServers is not an object; left unchanged")
    if SERVER in servers and not _is_ours(servers[SERVER]):
        raise InstallError(f"{target} has another server named {SERVER!r}; left unchanged")
    entry = server_entry(settings, ensure_token(settings))
    if servers.get(SERVER) == entry:
        return Change(target, False, 1)
    write_settings(target, {**data, "mcpServers": {**servers, SERVER: entry}})
    return Change(target, True, 1)


def unregister(project: Path | None = None) -> Change:
    """Remove the `ctxdb` server from `<project>/.mcp.json` (the file when it is left empty)."""
    target = (project or Path.cwd()).absolute() / MCP_FILE
    data = read_settings(target)
    servers = data.get("mcpServers")
    if not isinstance(servers, dict) or not _is_ours(servers.get(SERVER)):
        return Change(target, False, 0)
    rest = {name: entry for name, entry in servers.items() if name != SERVER}
    kept = {key: value for key, value in data.items() if key != "mcpServers"}
    write_settings(target, {**kept, "mcpServers": rest} if rest else kept)
    return Change(target, True, 1)


def add_command(settings: Settings) -> str:
    """The `claude mcp add-json --scope user` command that registers the server everywhere."""
    entry = json.dumps(server_entry(settings, ensure_token(settings)))
    return shlex.join(["claude", "mcp", "add-json", "--scope", "user", SERVER, entry])
