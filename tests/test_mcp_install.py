"""`ctxdb capture claude-code install` registers the `ctxdb mcp` server: the `ctxdb` entry of a
project's `.mcp.json` (other servers kept, idempotent, removed exactly by uninstall), a token file
of the capture user, and an entry that really serves that user's memory through the SDK client."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import anyio
import pytest
from claude_code_sessions import cli_install
from conftest import delete_prefix_indices
from conftest_search import Turn, build_memory
from mcp import Client, StdioServerParameters, stdio_client

from ctxdb.auth.credentials import TokenStore
from ctxdb.capture.claude_code import mcp_config as registration
from ctxdb.capture.claude_code.install import InstallError
from ctxdb.cli.app import app
from ctxdb.index.client import make_client
from ctxdb.settings import Settings

OTHER_SERVER = {"command": "npx", "args": ["-y", "some-mcp-server"]}


@pytest.fixture
def capture(tmp_path: Path) -> Settings:
    """A fresh home whose Claude Code turns belong to `ann` (tenant t1)."""
    return Settings(home=tmp_path / "home", claude_code={"user_id": "ann", "tenant": "t1"})


def test_register_keeps_other_servers_is_idempotent_and_unregister_is_exact(
    capture: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    target = project / ".mcp.json"
    original = {"mcpServers": {"other": OTHER_SERVER}, "note": "kept"}
    target.write_text(json.dumps(original))

    assert registration.register(capture, project).changed
    once = target.read_text()
    assert not registration.register(capture, project).changed and target.read_text() == once
    data = json.loads(once)
    assert data["note"] == "kept" and data["mcpServers"]["other"] == OTHER_SERVER
    entry = data["mcpServers"]["ctxdb"]
    assert entry["type"] == "stdio" and entry["args"][-3:-1] == ["mcp", "--token-file"]
    assert entry["env"]["CTXDB_HOME"] == str(capture.home.absolute())

    token_file = Path(entry["args"][-1])
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert token not in once
    principal = TokenStore(capture.tokens_path).verify(token)
    assert (principal.user_id, principal.tenant) == ("ann", "t1")

    # another capture user gets a token of their own; the same user keeps theirs
    bob = capture.replace(claude_code={"user_id": "bob"})
    registration.register(bob, project)
    assert TokenStore(capture.tokens_path).verify(token_file.read_text().strip()).user_id == "bob"

    assert registration.unregister(project).changed
    assert json.loads(target.read_text()) == original
    assert not registration.unregister(project).changed


def test_register_creates_and_unregister_removes_the_file_and_refuses_a_foreign_entry(
    capture: Settings, tmp_path: Path
) -> None:
    target = tmp_path / "p" / ".mcp.json"
    registration.register(capture, tmp_path / "p")
    assert set(json.loads(target.read_text())["mcpServers"]) == {"ctxdb"}
    registration.unregister(tmp_path / "p")
    assert not target.exists()

    target.write_text(json.dumps({"mcpServers": {"ctxdb": OTHER_SERVER}}))
    with pytest.raises(InstallError, match="another server named 'ctxdb'"):
        registration.register(capture, tmp_path / "p")
    assert not registration.unregister(tmp_path / "p").changed
    assert json.loads(target.read_text()) == {"mcpServers": {"ctxdb": OTHER_SERVER}}


@pytest.mark.es
def test_the_registered_server_serves_the_capture_users_memory(settings: Settings) -> None:
    capture = settings.replace(claude_code={"user_id": "ann", "tenant": "t1"})
    client = make_client(capture)
    prefix = capture.elasticsearch.index_prefix
    corpus = [
        Turn("ann", "c-ann", "t1", 1.0, "how do I rebase onto main", "git rebase main", title="A"),
        Turn("bob", "c-bob", "t1", 1.0, "bob's secret plans", "keep them secret", title="B"),
    ]
    build_memory(capture, corpus, embed=False)
    registration.register(capture, capture.home / "project")
    entry = json.loads((capture.home / "project" / ".mcp.json").read_text())["mcpServers"]["ctxdb"]
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env = {"PATH": os.environ["PATH"], **offline, **entry["env"]}
    server = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)

    async def scenario() -> None:
        async with Client(stdio_client(server)) as mcp:
            listing = await mcp.call_tool("list_conversations", {})
            assert not listing.is_error, listing.content
            assert [c["conversation_id"] for c in listing.structured_content["conversations"]] == [
                "c-ann"
            ]

    try:
        anyio.run(scenario)
    finally:
        delete_prefix_indices(client, prefix)


def test_cli_install_registers_and_uninstall_removes(
    capture: Settings, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))  # --user edits ~/.claude
    project = tmp_path / "shop"
    runner, done = cli_install(capture.home, project, monkeypatch)
    assert f"ctxdb MCP server added to {project / '.mcp.json'}" in done.output
    assert "ctxdb" in json.loads((project / ".mcp.json").read_text())["mcpServers"]

    user = runner.invoke(app, ["capture", "claude-code", "install", "--user"])
    assert user.exit_code == 0, user.output
    line = next(x for x in user.output.splitlines() if "claude mcp add-json" in x)
    words = shlex.split(line.split(": ", 1)[1])
    assert words[:6] == ["claude", "mcp", "add-json", "--scope", "user", "ctxdb"]
    assert json.loads(words[6])["args"][-3:-1] == ["mcp", "--token-file"]

    gone = runner.invoke(app, ["capture", "claude-code", "uninstall", "--project", str(project)])
    assert gone.exit_code == 0 and "removed the ctxdb MCP server" in gone.output
    assert not (project / ".mcp.json").exists()


def test_the_entry_points_the_server_at_the_memory_the_hooks_land_into(
    capture: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CTXDB_STORAGE_ROOT apart from the home, the registered server's environment names
    it, so the server reads the Delta tables and files the capture hook writes."""
    stored = capture.replace(storage_root=str(tmp_path / "data"))
    project = tmp_path / "shop"
    project.mkdir()
    registration.register(stored, project)
    env = json.loads((project / ".mcp.json").read_text())["mcpServers"]["ctxdb"]["env"]
    for name in [n for n in os.environ if n.startswith("CTXDB_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    served = Settings()
    assert (served.delta_uri, served.landing_uri) == (stored.delta_uri, stored.landing_uri)
    assert "CTXDB_STORAGE_ROOT" not in registration_env(capture, project)


def registration_env(settings: Settings, project: Path) -> dict[str, str]:
    registration.register(settings, project)
    return json.loads((project / ".mcp.json").read_text())["mcpServers"]["ctxdb"]["env"]
