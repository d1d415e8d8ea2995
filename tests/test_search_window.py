"""The search window on every face (Python API, HTTP, MCP, CLI): all time by default, `days`
narrows it with the same validation everywhere, `days=0` is all time again, a `since` before the
window widens it (and says so), and an unknown argument is an error, never silently dropped.

The corpus (built by the real pipeline, lexical arms only) holds one user's turns of 1, 40 and
500 days ago, kept ten years so that only the window decides what is found."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import pytest
from conftest_search import NOW, TENANT, Turn, build_memory, drop_indices
from fastapi.testclient import TestClient
from mcp import Client
from mcp.types import CallToolResult
from typer.testing import CliRunner

from ctxdb.auth.credentials import Principal, TokenStore
from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.index.client import make_client
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import SearchService
from ctxdb.serve.http import create_app
from ctxdb.serve.mcp_server import build_server
from ctxdb.serve.mcp_tools import MemoryTools
from ctxdb.serve.resolve import Resolver
from ctxdb.settings import Settings

pytestmark = [pytest.mark.es]

_register_all()
runner = CliRunner()

QUERY = "heron nesting marsh survey"
CORPUS = [
    Turn(
        "erin", "c-heron-ancient", "t1", 500.0, f"{QUERY} in the old delta", "Herons nest in reeds."
    ),
    Turn("erin", "c-heron-month", "t1", 40.0, f"{QUERY} near the lake", "Count nests at dawn."),
    Turn("erin", "c-heron-new", "t1", 1.0, f"{QUERY} this week", "Use a spotting scope."),
]
ALL = {"c-heron-ancient", "c-heron-month", "c-heron-new"}


@dataclass
class Window:
    settings: Settings
    service: SearchService
    principal: Principal
    token: str


@pytest.fixture(scope="module")
def window(tmp_path_factory, es_base_settings: Settings) -> Iterator[Window]:
    prefix = f"t-window-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(
        home=tmp_path_factory.mktemp("window-home"),
        elasticsearch={"index_prefix": prefix},
        retention={"days": 3650},
    )
    build_memory(settings, CORPUS, embed=False)
    client = make_client(settings)
    token = TokenStore(settings.tokens_path).issue("erin", tenant=TENANT)
    yield Window(
        settings, SearchService(settings, client), Principal(user_id="erin", tenant=TENANT), token
    )
    drop_indices(client, prefix)
    client.close()


def found(hits: list[dict[str, Any]]) -> set[str]:
    return {h["conversation_id"] for h in hits}


def python_api(w: Window, **fields: Any) -> tuple[set[str], list[str]]:
    response = w.service.search(w.principal, SearchRequest(query=QUERY, **fields))
    return {h.conversation_id for h in response.hits}, response.warnings


def http(w: Window, **fields: Any) -> tuple[int, dict[str, Any]]:
    with TestClient(create_app(w.settings, load_model=False)) as api:
        answer = api.post(
            "/v1/search",
            json={"query": QUERY, **fields},
            headers={"Authorization": f"Bearer {w.token}"},
        )
    return answer.status_code, answer.json()


def mcp(w: Window, arguments: dict[str, Any]) -> CallToolResult:
    tools = _tools(w)
    outcome: list[CallToolResult] = []

    async def call() -> None:
        async with Client(build_server(tools)) as client:
            outcome.append(await client.call_tool("search_conversations", arguments))

    anyio.run(call)
    return outcome[0]


def cli(w: Window, *args: str) -> tuple[int, str]:
    s = w.settings
    environ = {
        "CTXDB_HOME": str(s.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": s.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": s.elasticsearch.url,
        "CTXDB_TOKEN": w.token,
    }
    result = runner.invoke(
        app, ["search", QUERY, "--knob", "weight_semantic=0", "--json", *args], env=environ
    )
    return result.exit_code, result.output


def test_default_is_all_time_on_every_face(window: Window) -> None:
    """A turn 500 days old is found with each face's defaults (the default used to be 365 days,
    and the MCP tool had no way to change it)."""
    assert python_api(window)[0] == ALL
    status, body = http(window)
    assert status == 200 and found(body["hits"]) == ALL
    result = mcp(window, {"query": QUERY})
    assert not result.is_error and found(result.structured_content["hits"]) == ALL
    code, output = cli(window)
    assert code == 0 and found(json.loads(output)["hits"]) == ALL


def test_days_narrows_and_zero_is_all_time_on_every_face(window: Window) -> None:
    recent, everything = {"c-heron-new"}, ALL
    for days, expected in ((30, recent), (0, everything), (3650, everything)):
        assert python_api(window, days=days)[0] == expected, days
        status, body = http(window, days=days)
        assert status == 200 and found(body["hits"]) == expected, days
        result = mcp(window, {"query": QUERY, "days": days})
        assert not result.is_error and found(result.structured_content["hits"]) == expected, days
        code, output = cli(window, "--window", f"{days}d")
        assert code == 0 and found(json.loads(output)["hits"]) == expected, days


def test_a_since_before_the_window_widens_it_and_says_so(window: Window) -> None:
    since = (NOW - timedelta(days=60)).isoformat()
    hits, warnings = python_api(window, days=30, since=since)
    assert hits == {"c-heron-month", "c-heron-new"}
    assert [w for w in warnings if w.startswith("days_widened: since ")]
    status, body = http(window, days=30, since=since)
    assert status == 200 and found(body["hits"]) == hits
    result = mcp(window, {"query": QUERY, "days": 30, "since": since})
    assert found(result.structured_content["hits"]) == hits
    assert [w for w in result.structured_content["warnings"] if w.startswith("days_widened:")]
    code, output = cli(window, "--window", f"{since}..")  # the CLI's window: since alone
    assert code == 0 and found(json.loads(output)["hits"]) == hits


def test_a_named_span_outside_the_days_window_is_reported(window: Window) -> None:
    old = (NOW - timedelta(days=500)).strftime("%B %Y")
    response = window.service.search(
        window.principal, SearchRequest(query=f"{QUERY} in {old}", days=30)
    )
    assert {h.conversation_id for h in response.hits} == {"c-heron-new"}
    assert [w for w in response.warnings if w.startswith("days_excludes:")]


@pytest.mark.parametrize("days", [-1, 3651])
def test_days_out_of_range_is_refused_alike_everywhere(window: Window, days: int) -> None:
    status, body = http(window, days=days)
    assert status == 422 and "days" in json.dumps(body)
    result = mcp(window, {"query": QUERY, "days": days})
    assert result.is_error and "invalid arguments: days:" in result.content[0].text
    code, output = cli(window, "--window", f"{days}d")
    assert code == 2 and "days" in output


def test_unknown_arguments_are_errors(window: Window) -> None:
    """A misspelt argument used to be dropped (the search ran over another window)."""
    result = mcp(window, {"query": QUERY, "day": 30})
    text = result.content[0].text
    assert result.is_error and "unknown argument day " in text and "days" in text
    assert "\n" not in text

    async def schemas() -> list[dict[str, Any]]:
        async with Client(build_server(_tools(window))) as client:
            return [t.input_schema for t in (await client.list_tools()).tools]

    assert all(s["additionalProperties"] is False for s in anyio.run(schemas))
    status, body = http(window, day=30)
    assert status == 422 and "day" in json.dumps(body)


def _tools(w: Window) -> MemoryTools:
    return MemoryTools(
        w.settings, w.service, Resolver(w.settings, w.service.client), lambda: w.principal
    )


def test_knobs_are_one_typed_object_on_every_face(window: Window) -> None:
    """The ranking knobs go by name in one `knobs` object (HTTP, MCP, Python) or `--knob`
    (CLI), checked by the one model: a set knob reaches the fusion (explain echoes the whole
    set), an unknown name is refused with the valid ones on every face."""
    status, body = http(window, knobs={"rrf_k": 60, "weight_recency": 0}, explain=True)
    assert status == 200 and body["hits"]
    echoed = body["hits"][0]["explain"]["knobs"]
    assert (echoed["rrf_k"], echoed["weight_recency"], echoed["min_score"]) == (60, 0.0, 0.15)
    assert body["hits"][0]["explain"]["arms"]["lexical"]["contribution"] <= 1 / 61
    status, body = http(window, knobs={"rrf": 60})
    assert status == 422 and "unknown knob(s) rrf; valid knobs: rrf_k" in json.dumps(body)
    result = mcp(window, {"query": QUERY, "knobs": {"min_score": 0, "rrf_k": 7}})
    assert not result.is_error and found(result.structured_content["hits"]) == ALL
    result = mcp(window, {"query": QUERY, "knobs": {"rrf": 7}})
    assert result.is_error and "valid knobs: rrf_k" in result.content[0].text
    assert python_api(window, knobs={"weight_semantic": 0})[0] == ALL
    code, output = cli(window, "--knob", "rrf=7")
    assert code == 2 and "valid knobs: rrf_k" in output
