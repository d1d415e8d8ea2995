"""The context pack's faces over one memory built by the real pipeline: `ctxdb context` (a
subprocess, as the token's user), `GET /v1/context` and the MCP tool `get_context` give the same
pack as `build_pack`, bound to the credentials' user; bad arguments are clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from test_context_pack import ANN, BOB_WORD, SHOP, build

from ctxdb.auth.credentials import TokenStore
from ctxdb.search.service import SearchService
from ctxdb.serve.http import create_app
from ctxdb.serve.mcp_server import build_server
from ctxdb.serve.mcp_tools import MemoryTools
from ctxdb.serve.resolve import Resolver
from ctxdb.settings import Settings

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
NEITHER = "not a folder (a path with / or \\) nor an agent id"
"""How a project that is neither a folder nor an agent id is refused, on every face."""


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("faces")
    build(root)
    store = TokenStore(Settings(home=root).tokens_path)
    return root, {u: store.issue(u, tenant="acme") for u in ("ann", "bob")}


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CTXDB_HOME": str(root)}
    env.pop("CTXDB_TOKEN", None)
    return subprocess.run([CTXDB, "context", *args], env=env, capture_output=True, text=True)


def test_the_cli_prints_the_tokens_users_pack(home) -> None:
    root, tokens = home
    done = cli(root, "--project", SHOP, "--budget", "400", "--token", tokens["ann"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"# Memory from ctxdb: project {SHOP}")
    assert "[interrupted] Migrate the orders table" in done.stdout and BOB_WORD not in done.stdout
    data = json.loads(cli(root, "--json", "--token", tokens["bob"]).stdout)
    assert data["scope"] == "user" and BOB_WORD in data["text"] and data["tokens"] <= 1500
    reload = cli(root, "--conversation", "conv:conversation:long-1", "--token", tokens["ann"])
    assert "### Turn 30" in reload.stdout


def test_the_cli_refuses_bad_arguments_and_other_users_conversations(home) -> None:
    root, tokens = home
    other = cli(root, "--conversation", "long-1", "--token", tokens["bob"])
    assert other.returncode == 1 and "not found" in other.stderr
    both = cli(root, "--conversation", "long-1", "--project", SHOP, "--token", tokens["ann"])
    assert both.returncode == 2 and "not both" in both.stderr
    small = cli(root, "--budget", "3", "--token", tokens["ann"])
    assert small.returncode == 2 and "budget" in small.stderr
    spaced = cli(root, "--project", "my project", "--query", "cart", "--token", tokens["ann"])
    assert spaced.returncode == 2 and spaced.stdout == ""
    [line] = spaced.stderr.splitlines()
    assert line.startswith(f"error: project: {NEITHER}")
    assert cli(root).returncode == 1  # no token


def test_http_context_is_the_callers_pack(home) -> None:
    root, tokens = home
    settings = Settings(home=root)
    client = TestClient(create_app(settings, load_model=False))
    auth = {"Authorization": f"Bearer {tokens['ann']}"}
    answer = client.get("/v1/context", params={"project": SHOP, "budget": 300}, headers=auth)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tokens"] <= 300 and "src/cart.py" in answer.json()["text"]
    assert client.get("/v1/context", params={"user_id": "bob"}, headers=auth).status_code == 422
    spaced = {"project": "my project", "query": "cart"}
    refused = client.get("/v1/context", params=spaced, headers=auth)
    assert refused.status_code == 422 and NEITHER in refused.json()["detail"]
    bob = {"Authorization": f"Bearer {tokens['bob']}"}
    missing = client.get("/v1/context", params={"conversation_id": "long-1"}, headers=bob)
    assert missing.status_code == 404
    assert client.get("/v1/context").status_code == 401


def test_the_mcp_tool_is_the_identified_users_pack(home) -> None:
    root, _ = home
    settings = Settings(home=root)
    service = SearchService(settings, client=None)  # type: ignore[arg-type]  # no query: no search
    tools = MemoryTools(settings, service, Resolver(settings, None), lambda: ANN)  # type: ignore[arg-type]
    result = tools.get_context(project_or_agent=SHOP, budget=200)
    assert result.structured_content is not None
    assert result.structured_content["tokens"] <= 200
    assert result.content[0].text == result.structured_content["text"]
    assert BOB_WORD not in tools.get_context().content[0].text


def test_the_mcp_resources_are_the_identified_users_pack(home) -> None:
    """`ctxdb://context` and `ctxdb://context/{+project}` read through the SDK client (in
    memory): the pack `get_context` gives at the default budget, never another user's."""
    root, _ = home
    settings = Settings(home=root)
    service = SearchService(settings, client=None)  # type: ignore[arg-type]  # no query: no search
    tools = MemoryTools(settings, service, Resolver(settings, None), lambda: ANN)  # type: ignore[arg-type]
    server = build_server(tools)

    async def scenario() -> tuple[set[str], set[str], str, str]:
        async with Client(server) as client:
            listed = {str(r.uri) for r in (await client.list_resources()).resources}
            templates = await client.list_resource_templates()
            shapes = {t.uri_template for t in templates.resource_templates}
            whole = (await client.read_resource("ctxdb://context")).contents[0]
            shop = (await client.read_resource(f"ctxdb://context/{SHOP}")).contents[0]
        return listed, shapes, whole.text, shop.text  # type: ignore[union-attr]

    listed, shapes, whole, shop = anyio.run(scenario)
    assert "ctxdb://context" in listed and "ctxdb://context/{+project}" in shapes
    assert whole == tools.get_context().content[0].text  # type: ignore[union-attr]
    assert shop == tools.get_context(project_or_agent=SHOP).content[0].text  # type: ignore[union-attr]
    assert shop.startswith(f"# Memory from ctxdb: project {SHOP}")
    assert BOB_WORD not in whole and BOB_WORD not in shop
