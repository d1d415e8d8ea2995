"""The MCP server driven by the SDK's own client: over stdio (a `ctxdb mcp` subprocess) and over
streamable HTTP (a `ctxdb serve` subprocess on a free loopback port), against memory built by the
real pipeline (generator, landing, derivation, embedding with the real model, indexing).

Every tool returns the owner's turns; another user's ids and refs, and guessed ones, answer "not
found"; missing or bad tokens are refused before any tool runs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import jwt
import pytest
from conftest import delete_prefix_indices
from conftest_ports import free_port_pair
from conftest_search import build_sample_memory
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ResourceLink

from ctxdb.auth.credentials import TokenStore
from ctxdb.sample.generate import Fact, Generated, generate_events
from ctxdb.sample.topics import TOPICS
from ctxdb.settings import Settings

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
TOOLS = {
    "search_conversations",
    "list_conversations",
    "get_turn",
    "turns_around",
    "read_file",
    "get_context",
}
JWT_KEY = "mcp-test-signing-key-of-32-bytes!!"
GUESSED_CONVERSATION = "c0123456789abcdef"


@dataclass
class Memory:
    settings: Settings
    generated: Generated
    tokens: dict[str, str]  # user id -> bearer token

    @property
    def owner(self) -> str:
        """The user of the longest conversation with a hosted file (the tests' main caller)."""
        return self.conversation[0].user_id

    @property
    def conversation(self) -> list[Fact]:
        """The owner's longest conversation with a hosted file, oldest turn first."""
        by_conversation: dict[str, list[Fact]] = {}
        for fact in self.generated.facts:
            by_conversation.setdefault(fact.conversation_id, []).append(fact)
        turns = max(
            (t for t in by_conversation.values() if any(f.hosted_ref for f in t)),
            key=lambda t: (len(t), t[0].conversation_id),
        )
        return sorted(turns, key=lambda f: (f.started_at, f.turn_id))

    def facts_of(self, user: str) -> list[Fact]:
        return [f for f in self.generated.facts if f.user_id == user]

    @property
    def stranger(self) -> Fact:
        """A turn of another user that has a file (a hosted one or an attachment)."""
        others = [f for f in self.generated.facts if f.user_id != self.owner]
        return next((f for f in others if f.hosted_ref or f.attachment), others[0])

    def file_bytes(self, fact: Fact) -> bytes:
        assert fact.hosted_ref is not None
        name = fact.hosted_ref.rsplit("/", 1)[-1]
        key = f"conv_{fact.conversation_id}/turn_{fact.turn_id}/files/{name}"
        return next(data for rel, data in self.generated.files.items() if rel.endswith(key))

    def env(self, **extra: str) -> dict[str, str]:
        """The environment a ctxdb subprocess needs to read this memory."""
        s = self.settings
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/root"),
            "CTXDB_HOME": str(s.home),
            "CTXDB_ELASTICSEARCH_INDEX_PREFIX": s.elasticsearch.index_prefix,
            "ELASTICSEARCH_URL": s.elasticsearch.url,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            **extra,
        }


@pytest.fixture(scope="module")
def memory(tmp_path_factory, query_embedder, es_base_settings: Settings) -> Iterator[Memory]:
    """Memory of two users built by the real pipeline, and a bearer token for each."""
    home = tmp_path_factory.mktemp("mcp-home")
    prefix = f"t-mcp-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(home=home, elasticsearch={"index_prefix": prefix})
    generated = generate_events(users=2, conversations=8, seed=14)
    client = build_sample_memory(settings, generated, query_embedder)
    tokens = TokenStore(settings.tokens_path)
    users = {(f.user_id, f.tenant) for f in generated.facts}
    yield Memory(settings, generated, {u: tokens.issue(u, tenant=t) for u, t in users})
    delete_prefix_indices(client, prefix)


Scenario = Callable[[Client], Awaitable[None]]


def run(transport: Any, scenario: Scenario) -> None:
    """Open the SDK client on `transport` and run `scenario` with it."""

    async def main() -> None:
        async with Client(transport) as client:
            await scenario(client)

    anyio.run(main)


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error(result: CallToolResult) -> str:
    """The one-line error text of a failed tool call."""
    assert result.is_error and result.structured_content is None
    text = result.content[0].text
    assert "Traceback" not in text and "\n" not in text, text
    return text


def shown(text: str, piece: dict[str, Any], budget: int) -> bool:
    """`piece` is `text` (whitespace folded) or its cut head, marked as cut, within `budget`."""
    whole = " ".join(text.split())
    cut = len(whole) > budget
    return (
        whole.startswith(piece["text"])
        and piece["truncated"] == cut
        and (piece["text"] == whole) != cut
        and len(piece["text"]) <= budget
    )


async def assert_owner_answers(client: Client, memory: Memory, budget: int) -> None:
    """Every tool answers with the owner's turns (the caller is the owner); text within `budget`
    characters per result."""
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    assert all(t.output_schema and t.annotations.read_only_hint for t in tools)

    turns = memory.conversation
    conversation = turns[0].conversation_id
    topic = next(t for t in TOPICS if t.key == turns[0].topic)
    found = data(await client.call_tool("search_conversations", {"query": topic.exact[0]}))
    same_topic = {
        (f.conversation_id, f.turn_id)
        for f in memory.facts_of(memory.owner)
        if f.topic == topic.key
    }
    assert found["mode"] == "search"
    assert not [w for w in found["warnings"] if w.startswith("semantic_unavailable")]
    assert (found["hits"][0]["conversation_id"], found["hits"][0]["turn_id"]) in same_topic
    assert all(
        h["conversation_id"] in {f.conversation_id for f in memory.facts_of(memory.owner)}
        for h in found["hits"]
    )
    assert found["hits"][0]["snippet"]["text"] and found["hits"][0]["ref"].startswith("conv:turn:")

    scoped = data(
        await client.call_tool(
            "search_conversations", {"query": topic.exact[0], "conversation_id": conversation}
        )
    )
    assert {h["conversation_id"] for h in scoped["hits"]} == {conversation}

    first = data(
        await client.call_tool("get_turn", {"conversation_id": conversation, "first": True})
    )
    assert first["turn_id"] == turns[0].turn_id
    assert first["messages"][0]["role"] == "user"
    assert shown(turns[0].prompt, first["messages"][0], budget)
    last = data(await client.call_tool("get_turn", {"conversation_id": conversation, "last": True}))
    assert last["turn_id"] == turns[-1].turn_id
    second = data(
        await client.call_tool("get_turn", {"conversation_id": conversation, "ordinal": 2})
    )
    assert second["turn_id"] == turns[1].turn_id

    hosted = next(f for f in turns if f.hosted_ref)
    view = data(
        await client.call_tool(
            "get_turn", {"conversation_id": conversation, "turn_id": hosted.turn_id}
        )
    )
    assert [f["ref"] for f in view["files"]] == [hosted.hosted_ref]
    assert view["messages"][-1]["role"] in ("assistant", "summary")

    window = data(
        await client.call_tool(
            "turns_around",
            {"conversation_id": conversation, "turn_id": turns[1].turn_id, "before": 1, "after": 1},
        )
    )
    assert [t["turn_id"] for t in window["turns"]] == [f.turn_id for f in turns[:3]]
    assert [t["position"] for t in window["turns"]] == [1, 2, 3]
    assert [t["anchor"] for t in window["turns"]] == [False, True, False]
    assert window["total_turns"] == len(turns)
    assert shown(turns[0].prompt, window["turns"][0]["user"], budget // 2)

    listed: list[str] = []
    cursor = None
    while True:
        args = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = data(await client.call_tool("list_conversations", args))
        listed += [c["conversation_id"] for c in page["conversations"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    owned = {f.conversation_id for f in memory.facts_of(memory.owner)}
    assert sorted(listed) == sorted(owned) and len(listed) == len(owned)


async def assert_strangers_are_not_found(client: Client, memory: Memory) -> None:
    """Another user's ids and refs, and guessed ones, answer exactly like missing ones."""
    other = memory.stranger
    for conversation, turn in (
        (other.conversation_id, other.turn_id),
        (GUESSED_CONVERSATION, "t0123456789abcdef"),
    ):
        got = error(
            await client.call_tool("get_turn", {"conversation_id": conversation, "turn_id": turn})
        )
        assert got.endswith(f"turn {conversation}/{turn} not found")
        got = error(
            await client.call_tool("get_turn", {"conversation_id": conversation, "first": True})
        )
        assert got.endswith(f"conversation {conversation!r} not found")
        got = error(
            await client.call_tool(
                "turns_around", {"conversation_id": conversation, "turn_id": turn}
            )
        )
        assert got.endswith(f"turn {conversation}/{turn} not found")
        got = error(
            await client.call_tool(
                "search_conversations", {"query": "anything", "conversation_id": conversation}
            )
        )
        assert got.endswith(f"conversation {conversation!r} not found")
    refs = [
        other.hosted_ref
        or f"conv:fi:conv_{other.conversation_id}.turn_{other.turn_id}.user.attachments/"
        f"{other.attachment}",
        f"conv:fi:conv_{GUESSED_CONVERSATION}.turn_t0123456789abcdef.files/notes.md",
    ]
    for ref in refs:
        got = error(await client.call_tool("read_file", {"ref": ref}))
        assert got.endswith(f"ref {ref!r} not found")
        with pytest.raises(MCPError, match="not found"):
            await client.read_resource(ref)
    hits = data(
        await client.call_tool(
            "search_conversations", {"query": other.prompt, "top_k": 50, "targets": ["user"]}
        )
    )["hits"]
    assert other.conversation_id not in {h["conversation_id"] for h in hits}
    listing = data(await client.call_tool("list_conversations", {"limit": 50}))
    assert other.conversation_id not in {c["conversation_id"] for c in listing["conversations"]}


async def assert_bad_arguments_are_named(client: Client) -> None:
    got = error(await client.call_tool("get_turn", {"conversation_id": "no spaces allowed"}))
    assert "invalid arguments: conversation_id:" in got
    got = error(await client.call_tool("search_conversations", {"query": "x", "top_k": 0}))
    assert "invalid arguments: top_k:" in got
    got = error(await client.call_tool("get_turn", {"conversation_id": GUESSED_CONVERSATION}))
    assert got.endswith("give exactly one of turn_id, ordinal, first, last")
    got = error(await client.call_tool("search_conversations", {"query": "  "}))
    assert "missing_query" in got
    got = error(await client.call_tool("read_file", {"ref": "conv:fi:conv_c1.turn_t1.a/../../x"}))
    assert "invalid ref" in got and "unsafe path" in got


def test_stdio_serves_the_token_users_memory(memory: Memory, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(memory.tokens[memory.owner] + "\n")
    server = StdioServerParameters(
        command=CTXDB, args=["mcp", "--token-file", str(token_file)], env=memory.env()
    )
    hosted = next(f for f in memory.conversation if f.hosted_ref)

    async def scenario(client: Client) -> None:
        assert client.server_info.name == "ctxdb"
        await assert_owner_answers(client, memory, budget=1500)
        await assert_strangers_are_not_found(client, memory)
        await assert_bad_arguments_are_named(client)
        read = await client.call_tool("read_file", {"ref": hosted.hosted_ref})
        assert data(read)["inline"] and data(read)["text"] == memory.file_bytes(hosted).decode()
        # the token is checked on every call: revoked mid-session, the next call is refused
        TokenStore(memory.settings.tokens_path).revoke(memory.tokens[memory.owner].split("_")[1])
        got = error(await client.call_tool("list_conversations", {}))
        assert got.endswith("unknown or revoked token")

    try:
        run(stdio_client(server), scenario)
    finally:
        memory.tokens[memory.owner] = TokenStore(memory.settings.tokens_path).issue(
            memory.owner, tenant=memory.conversation[0].tenant
        )


@pytest.mark.parametrize("token", [None, "ctxdb_0000_nope", "not-a-token"])
def test_stdio_refuses_a_missing_or_bad_token_before_serving(
    memory: Memory, token: str | None
) -> None:
    env = memory.env(**({"CTXDB_TOKEN": token} if token else {}))
    done = subprocess.run(
        [CTXDB, "mcp", "--no-semantic"],
        env=env,
        input=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n',
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == b""
    stderr = done.stderr.decode()
    assert stderr.startswith("error: ") and "Traceback" not in stderr
    assert ("missing bearer token" if token is None else "token") in stderr

    async def never(client: Client) -> None:
        raise AssertionError("connected without a valid token")

    server = StdioServerParameters(command=CTXDB, args=["mcp", "--no-semantic"], env=env)
    with pytest.raises(Exception) as refused:
        run(stdio_client(server, errlog=subprocess.DEVNULL), never)
    assert "connected without a valid token" not in str(refused.value)


@pytest.fixture(scope="module")
def http_server(memory: Memory) -> Iterator[str]:
    """`ctxdb serve` on a free loopback port: small budgets (so cuts and resource links show),
    JWTs accepted beside the token store. Yields the MCP endpoint URL."""
    port = free_port_pair()
    env = memory.env(
        CTXDB_MCP_RESULT_CHARS="100",
        CTXDB_MCP_INLINE_FILE_BYTES="16",
        CTXDB_AUTH_JWT_KEY=JWT_KEY,
    )
    process = subprocess.Popen(
        [CTXDB, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, "ctxdb serve exited during start-up"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "ctxdb serve did not start"
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(30)


def bearer(token: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)


def run_http(url: str, token: str, scenario: Scenario) -> None:
    async def main() -> None:
        async with bearer(token) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                await scenario(client)

    anyio.run(main)


def make_jwt(user: str, tenant: str, key: str = JWT_KEY, ttl: float = 300) -> str:
    claims = {"sub": user, "tenant": tenant, "exp": datetime.now(UTC) + timedelta(seconds=ttl)}
    return jwt.encode(claims, key, algorithm="HS256")


async def assert_cut_messages_read_on(client: Client, memory: Memory) -> None:
    """With a 100-character budget, long messages are cut on a word boundary, marked, and
    get_turn(message, offset) reads the rest until the whole text is back."""
    fact = max(memory.conversation, key=lambda f: len(f.answer))
    conversation, turn = fact.conversation_id, fact.turn_id
    view = await client.call_tool("get_turn", {"conversation_id": conversation, "turn_id": turn})
    answer = data(view)["messages"][-1]
    if answer["role"] == "summary":
        answer = [m for m in data(view)["messages"] if m["role"] == "assistant"][-1]
    assert answer["truncated"] and len(answer["text"]) <= 100
    assert "…[truncated]" in view.content[0].text
    assert f"message={answer['index']}, offset={answer['next_offset']}" in view.content[0].text
    whole = " ".join(fact.answer.split())
    assert whole[len(answer["text"])] == " "  # cut at a word boundary
    text, piece = answer["text"], answer
    while piece["truncated"]:
        args = {
            "conversation_id": conversation,
            "turn_id": turn,
            "message": answer["index"],
            "offset": piece["next_offset"],
        }
        (piece,) = data(await client.call_tool("get_turn", args))["messages"]
        text = whole[: piece["offset"]] + piece["text"]
    assert text == whole and piece["chars"] == len(whole)


def test_http_serves_the_bearer_users_memory(memory: Memory, http_server: str) -> None:
    hosted = next(f for f in memory.conversation if f.hosted_ref)

    async def scenario(client: Client) -> None:
        await assert_owner_answers(client, memory, budget=100)
        await assert_strangers_are_not_found(client, memory)
        await assert_bad_arguments_are_named(client)
        await assert_cut_messages_read_on(client, memory)
        read = await client.call_tool("read_file", {"ref": hosted.hosted_ref})
        assert not data(read)["inline"] and "inline limit" in data(read)["reason"]
        (link,) = [c for c in read.content if isinstance(c, ResourceLink)]
        assert link.uri == hosted.hosted_ref and link.size == len(memory.file_bytes(hosted))
        contents = (await client.read_resource(link.uri)).contents
        assert base64.b64decode(contents[0].blob) == memory.file_bytes(hosted)

    run_http(http_server, memory.tokens[memory.owner], scenario)

    async def as_jwt(client: Client) -> None:
        listing = data(await client.call_tool("list_conversations", {"limit": 50}))
        owned = {f.conversation_id for f in memory.facts_of(memory.owner)}
        assert {c["conversation_id"] for c in listing["conversations"]} == owned

    run_http(http_server, make_jwt(memory.owner, memory.conversation[0].tenant), as_jwt)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "list_conversations", "arguments": {}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "credential",
    ["none", "garbage", "unknown token", "revoked token", "expired JWT", "JWT of another key"],
)
def test_http_refuses_missing_and_bad_tokens_before_any_tool(
    memory: Memory, http_server: str, credential: str
) -> None:
    tenant = memory.conversation[0].tenant
    store = TokenStore(memory.settings.tokens_path)
    token = {
        "none": None,
        "garbage": "Bearer",
        "unknown token": "ctxdb_0123456789abcdef_secret",
        "revoked token": store.issue(memory.owner, tenant=tenant),
        "expired JWT": make_jwt(memory.owner, tenant, ttl=-60),
        "JWT of another key": make_jwt(memory.owner, tenant, key="x" * 32),
    }[credential]
    if credential == "revoked token":
        assert token is not None
        store.revoke(token.split("_")[1])
    headers = ACCEPT | ({"Authorization": f"Bearer {token}"} if token else {})
    for message in (INITIALIZE, CALL):
        refused = httpx.post(http_server, json=message, headers=headers, timeout=30)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "result" not in refused.text

    async def never(client: Client) -> None:
        raise AssertionError("connected without a valid token")

    with pytest.raises(Exception) as failed:
        run_http(http_server, token or "", never)
    assert "connected without a valid token" not in str(failed.value)


def test_http_session_answers_only_its_own_principal(memory: Memory, http_server: str) -> None:
    """A session opened with the owner's token answers 404 to another user's token."""
    owner = {"Authorization": f"Bearer {memory.tokens[memory.owner]}"}
    opened = httpx.post(http_server, json=INITIALIZE, headers=ACCEPT | owner, timeout=30)
    assert opened.status_code == 200
    session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
    other = {"Authorization": f"Bearer {memory.tokens[memory.stranger.user_id]}"}
    hijack = httpx.post(http_server, json=CALL, headers=ACCEPT | session | other, timeout=30)
    assert hijack.status_code == 404 and "conversations" not in hijack.text
    assert json.loads(hijack.text)["error"]["message"] == "Session not found"
