"""The Claude Code SessionStart hook (issue 45 item 3), through the real CLI: `install` with
CTXDB_CLAUDE_CODE_CONTEXT=true adds it (matcher startup|resume|clear|compact) and `uninstall`
removes it; Claude Code's command prints the project's pack as `additionalContext` within the
10,000-character limit; with Elasticsearch unreachable the pack still comes from Delta; with the
memory unreadable or the time bound too short for any pack it answers `{}` and exits 0."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_context_pack import BOB_WORD, build

from ctxdb.capture.claude_code.context_hook import MATCHER

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
PAYLOAD = {"hook_event_name": "SessionStart", "source": "startup", "cwd": "/home/ann/src/shop"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """A memory, and the hooks installed into a project's Claude Code settings for Ann."""
    root = tmp_path_factory.mktemp("hook")
    build(root)
    project = root / "project"
    project.mkdir()
    env = {**os.environ, "CTXDB_HOME": str(root), "CTXDB_CLAUDE_CODE_USER_ID": "ann"}
    env |= {"CTXDB_CLAUDE_CODE_TENANT": "acme", "CTXDB_CLAUDE_CODE_CONTEXT": "true"}
    # the installed bound at its most, so a loaded machine's cold start never decides what
    # these tests see; the bound itself is tested with --timeout 0.001 below
    env |= {"CTXDB_CLAUDE_CODE_CONTEXT_TIMEOUT_S": "10"}
    claude_code(env, "install", project)
    return root, project, env


def claude_code(env: dict[str, str], command: str, project: Path) -> None:
    """`ctxdb capture claude-code install|uninstall --project PROJECT`, which must succeed."""
    done = subprocess.run(
        [CTXDB, "capture", "claude-code", command, "--project", str(project)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def session_start(settings_path: Path) -> list[dict]:
    return json.loads(settings_path.read_text())["hooks"].get("SessionStart", [])


def hook(command: list[str] | str, env: dict[str, str], payload=PAYLOAD) -> dict:
    done = subprocess.run(
        command,
        input=json.dumps(payload),
        env=env,
        capture_output=True,
        text=True,
        shell=isinstance(command, str),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_install_adds_a_session_start_hook_that_prints_the_projects_pack(installed) -> None:
    root, project, env = installed
    groups = session_start(project / ".claude" / "settings.local.json")
    assert [g["matcher"] for g in groups] == [MATCHER]
    command = groups[0]["hooks"][0]["command"]
    answer = hook(command, {k: v for k, v in os.environ.items() if not k.startswith("CTXDB_")})
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "[interrupted] Migrate the orders table" in context and "src/cart.py" in context
    assert BOB_WORD not in context and len(context) <= 10_000
    assert "tomatoes" not in context  # another project's session
    elsewhere = hook(command, dict(os.environ), {**PAYLOAD, "cwd": "/nowhere/known"})
    assert elsewhere == {}  # a project with no memory gets nothing


def test_the_hook_answers_empty_when_memory_fails_or_is_late(installed) -> None:
    root, _, env = installed
    token = root / "auth" / "claude-code-mcp.token"
    base = [CTXDB, "capture", "claude-code", "context", "--timeout", "10"]
    base += ["--token-file", str(token)]
    no_es = {**env, "ELASTICSEARCH_URL": f"http://127.0.0.1:{closed_port()}"}
    assert "src/cart.py" in context_of(hook(base, no_es), "SessionStart")
    prompt = {**PROMPT, "prompt": "the cart total rounding bug is back"}
    assert hook(base, no_es, prompt) == {}
    assert hook(base, {**env, "CTXDB_STORAGE_ROOT": "/dev/null"}) == {}
    began = time.monotonic()
    assert hook([*base, "--timeout", "0.001"], env) == {}
    assert hook([*base[:-1], str(root / "missing.token")], env) == {}


def test_a_project_excluded_from_capture_is_told_nothing(installed) -> None:
    """A project opted out of capture (`CTXDB_CLAUDE_CODE_EXCLUDE`, kept in the installed
    hook.json) gets no pack, although its memory holds sessions."""
    root, project, env = installed
    command = session_start(project / ".claude" / "settings.local.json")[0]["hooks"][0]["command"]
    config = root / "capture" / "claude_code" / "hook.json"
    saved = config.read_text()
    try:
        config.write_text(json.dumps({**json.loads(saved), "exclude": ["/home/ann/src"]}))
        assert hook(command, dict(os.environ)) == {}
    finally:
        config.write_text(saved)
    answer = hook(command, dict(os.environ))
    assert "src/cart.py" in answer["hookSpecificOutput"]["additionalContext"]


def test_uninstall_removes_the_session_start_hook(installed, tmp_path: Path) -> None:
    root, project, env = installed
    claude_code(env, "uninstall", project)
    path = project / ".claude" / "settings.local.json"
    assert not path.exists() or "SessionStart" not in json.loads(path.read_text()).get("hooks", {})
