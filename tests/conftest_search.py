"""The search tests' corpus, built by the real pipeline: contract events for a few users'
conversations are written as landing JSONL, landed, derived, embedded with the configured
(default) backend and synced into the real Elasticsearch node under one index prefix per session,
so every search-facing test reads documents made by `ctxdb.index.documents`.

Two states the pipeline only reaches by a failure are made after the build, each saying so:
`MISSING_TURN_LOGS` (a turn whose TurnLog document is gone from the turns index while its role
rows are there) and the expired turn comes from a short retention rule for `BRIEF_APP`.

The fixtures are registered through `pytest_plugins` in tests/conftest.py; the corpus, its
constants and `build_memory` are imported by name.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from ctxdb.auth.credentials import Principal, TokenStore
from ctxdb.embedding.backends import memory_embedder
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.client import make_client
from ctxdb.index.mappings import TURNS, alias_name, turn_doc_id
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.sample.generate import Generated, write_sample
from ctxdb.search.service import ModelQueryEmbedder, SearchService, default_embedder
from ctxdb.settings import Settings
from ctxdb.storage.conversation_files import turn_file_path
from ctxdb.storage.delta import DeltaStore

NOW = datetime.now(UTC)
TENANT, APP = "t1", "app1"
BRIEF_APP = "app-brief"
"""The app whose rows live one day (`BRIEF_RETENTION`): its turn of three days ago has expired."""
BRIEF_RETENTION = {"rules": [{"tenant": TENANT, "app": BRIEF_APP, "days": 1}]}
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
CITATION = "https://openpyxl.readthedocs.io"


@dataclass
class Turn:
    """One recorded turn of the test corpus, as the contract events a host would send.

    A turn with a summary, anchors, a note or ReAct blocks is a rich (ReAct) recording; the
    others are minimal. `hosted_file` is a path under the turn's `files/` area."""

    user: str
    conversation: str
    turn: str
    age_days: float
    prompt: str
    answer: str
    agent: str = "helper"
    title: str | None = None
    summary: str | None = None
    anchors: list[str] = field(default_factory=list)
    note: str | None = None
    attachment: tuple[str, str] | None = None  # (filename, extracted text)
    hosted_file: str | None = None
    app: str = APP
    extra_prompts: list[str] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)  # chat.step / react.block events

    @property
    def ts(self) -> datetime:
        return NOW - timedelta(days=self.age_days)

    @property
    def rich(self) -> bool:
        return bool(self.summary or self.anchors or self.note or self.steps)

    def file_bytes(self, relative: str) -> bytes:
        """The bytes stored for a file of this turn (`files/x` or `user.attachments/x`)."""
        return f"bytes of {relative.removeprefix('user.attachments/')} for {self.user}".encode()

    def events(self) -> list[dict[str, Any]]:
        """The turn's contract events, one second apart, closed."""
        body: list[tuple[str, dict[str, Any]]] = [("turn.started", {})]
        body.append(("user.submission", {"text": self.prompt, "event_type": "prompt"}))
        body += [
            ("user.submission", {"text": text, "event_type": "followup"})
            for text in self.extra_prompts
        ]
        if self.attachment:
            name, text = self.attachment
            ref = f"conv:fi:conv_{self.conversation}.turn_{self.turn}.user.attachments/{name}"
            body.append(
                (
                    "user.attachment",
                    {
                        "name": name,
                        "mime": XLSX,
                        "size": len(self.file_bytes(name)),
                        "storage_ref": ref,
                        "extracted_text": text,
                    },
                )
            )
        body += [(step["type"], step["payload"]) for step in self.steps]
        if self.hosted_file:
            data = self.file_bytes(f"files/{self.hosted_file}")
            body.append(
                (
                    "file.hosted",
                    {
                        "path": self.hosted_file,
                        "mime": XLSX,
                        "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest(),
                    },
                )
            )
        if self.note:
            body.append(("react.note", {"text": self.note}))
        if self.summary:
            body.append(("react.summary", {"text": self.summary, "refs": [], "scope": "turn"}))
        if self.anchors:
            body.append(("react.anchors", {"phrases": self.anchors, "entities": []}))
        if self.citations:
            data = {"items": [{"url": url} for url in self.citations]}
            body.append(("communicator.event", {"name": "chat.citations", "data": data}))
        answer = {"text": self.answer, "tokens_in": 9, "tokens_out": 7}
        body.append(("assistant.completion", answer))
        if self.title:
            body.append(("conversation.title", {"title": self.title}))
        body.append(("turn.closed", {"status": "ok"}))
        return [self._event(n, type_, payload) for n, (type_, payload) in enumerate(body)]

    def _event(self, n: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        at = self.ts + timedelta(seconds=n)
        return {
            "event_id": f"{self.conversation}-{self.turn}-{n}",
            "schema_version": 1,
            "type": type_,
            "occurred_at": at.isoformat().replace("+00:00", "Z"),
            "tenant": TENANT,
            "app": self.app,
            "agent": self.agent,
            "adapter": "react" if self.rich else "minimal",
            "user_id": self.user,
            "conversation_id": self.conversation,
            "turn_id": self.turn,
            "payload": payload,
        }

    def write_files(self, root: Path) -> None:
        """The attachment's and the hosted file's bytes under the conversation storage layout."""
        base = root / turn_file_path(TENANT, self.app, self.user, self.conversation, self.turn)
        names = [f"user.attachments/{self.attachment[0]}"] if self.attachment else []
        names += [f"files/{self.hosted_file}"] if self.hosted_file else []
        for name in names:
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_bytes(self.file_bytes(name))


def step(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A step event of a turn: `chat.step`, or a `react.block` of block type `kind`."""
    if kind == "chat.step":
        return {"type": kind, "payload": payload}
    return {"type": "react.block", "payload": {"block_type": kind, **payload}}


CODING_PROMPT = (
    "Fix the failing integration tests of the payments service after upgrading pydantic to v2,"
    " they fail since the upgrade"
)
"""Dana's coding turn's prompt; the conversation's title is its first 80 characters."""
CODING_ANSWER = """The failures come from **pydantic v2**: `parse_obj` is *gone*.

1. Replace `Model.parse_obj(data)` with `Model.model_validate(data)`
2. Run the tests again

```python
payment = Payment.model_validate(data)
```

See the [guide](https://docs.pydantic.dev/latest/migration/), not [this](javascript:alert(1)).
<script>window.pwned = 1</script> <b>stays text</b>"""

CORPUS = [
    Turn(
        "alice",
        "c-sheets",
        "t1",
        6.0,
        "My openpyxl workbook loses all formulas after I save it with load_workbook",
        "openpyxl reads cached values when data_only=True; open the workbook without data_only "
        "so the formulas are kept, then save it again.",
        title="Spreadsheet trouble",
        summary="Fixed formula loss on save in an Excel file edited with openpyxl.",
        anchors=["openpyxl", "load_workbook", "data_only", "formulas"],
        attachment=("budget.xlsx", "budget.xlsx quarterly budget with revenue formulas"),
        extra_prompts=["also it is the file from finance"],
        citations=[CITATION],
    ),
    Turn(
        "alice",
        "c-sheets",
        "t2",
        5.9,
        "Now it fails with KeyError: 'Worksheet Sheet3 does not exist.'",
        "Sheet names are case sensitive; print wb.sheetnames and use the exact name.",
        title="Spreadsheet trouble",
        note="User is probably on openpyxl 3.1; suggest upgrading later.",
        hosted_file="fixed.xlsx",
    ),
    Turn(
        "alice",
        "c-k8s",
        "t1",
        30.0,
        "my kubernetes pod keeps restarting with CrashLoopBackOff",
        "Run kubectl logs --previous; the liveness probe fails before the app is ready, so "
        "raise initialDelaySeconds.",
        agent="ops",
        title="Pod restarts",
    ),
    Turn(
        "alice",
        "c-k8s",
        "t2",
        1.0,
        "how do I raise the memory limit of the deployment",
        "Set resources.limits.memory in the container spec and roll out the deployment.",
        agent="ops",
        title="Pod restarts",
    ),
    Turn(
        "alice",
        "c-k8s",
        "t3",
        0.5,
        "and what about the cpu request",
        "Set resources.requests.cpu; requests drive scheduling, limits drive throttling.",
        agent="ops",
        title="Pod restarts",
    ),
    Turn(
        "alice",
        "c-cook",
        "t1",
        2.0,
        "recipe for a quick vegetarian lasagna",
        "Layer ricotta, spinach and marinara between no-boil noodles; bake 40 minutes.",
        title="Dinner",
    ),
    Turn(
        "alice",
        "c-zebra-old",
        "t1",
        60.0,
        "zebra migration patterns in the serengeti",
        "The great migration follows the rains from the southern plains north to the Mara.",
        title="Zebras old",
    ),
    Turn(
        "alice",
        "c-zebra-new",
        "t1",
        1.0,
        "zebra migration patterns in the serengeti",
        "The great migration follows the rains from the southern plains north to the Mara.",
        title="Zebras new",
    ),
    Turn(
        "alice",
        "c-old",
        "t1",
        3.0,
        "openpyxl chart colors are wrong",
        "Set the series graphicalProperties line solidFill.",
        title="Expired chart talk",
        app=BRIEF_APP,
        hosted_file="chart.png",
    ),
    Turn(
        "alice",
        "c-nolog",
        "t1",
        4.0,
        "terraform apply fails with ConditionalCheckFailedException on the state lock",
        "Another run holds the DynamoDB lock; force-unlock with the lock id once it is dead.",
        title="Terraform lock",
    ),
    Turn(
        "bob",
        "c-bob",
        "t1",
        2.0,
        "openpyxl payroll spreadsheet with the secret salaries",
        "Protect the payroll workbook sheet with a password in openpyxl.",
        title="Bob payroll",
        hosted_file="salaries.xlsx",
    ),
    Turn(
        "bob",
        "c-sheets-bob",
        "t1",
        2.0,
        "my openpyxl workbook loses formulas on save",
        "Do not use data_only=True when you want formulas.",
        title="Bob sheets",
    ),
    Turn(
        "dana",
        "c-code",
        "t1",
        0.2,
        CODING_PROMPT,
        CODING_ANSWER,
        agent="claude_code",
        steps=[
            step(
                "chat.step",
                {
                    "step": "s0",
                    "phase": "complete",
                    "tool": "Read",
                    "status": "ok",
                    "title": "Read tests/test_payments.py",
                },
            ),
            step(
                "react.tool.call",
                {"call_id": "c1", "tool": "Bash", "text": "pytest -q tests/test_payments.py"},
            ),
            step(
                "react.tool.result",
                {
                    "call_id": "c1",
                    "tool": "Bash",
                    "text": "FAILED tests/test_payments.py::test_refund\nAttributeError: parse_obj",
                    "meta": {"status": "error"},
                },
            ),
            step("react.thinking", {"text": "The model API changed in v2."}),
        ],
    ),
]
USERS = ("alice", "bob", "dana")
MISSING_TURN_LOGS = [("c-nolog", "t1")]
"""Turns whose TurnLog document is deleted after the build (a failure state: the role rows were
indexed, the TurnLog was not), for the fallback-snippet path."""


def write_landing(landing: Path, corpus: list[Turn]) -> Path:
    """The corpus's events as one JSONL landing file."""
    landing.mkdir(parents=True, exist_ok=True)
    path = landing / f"corpus-{uuid.uuid4().hex[:8]}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for turn in corpus for e in turn.events()))
    return path


def build_memory(settings: Settings, corpus: list[Turn], *, embed: bool = True) -> DeltaStore:
    """Land, derive, embed (the configured backend; skipped without `embed`) and index `corpus`
    with the pipeline's own functions, as `ctxdb land`, `derive` and `index sync` run them."""
    write_landing(Path(settings.landing_uri), corpus)
    for turn in corpus:
        turn.write_files(Path(settings.files))
    store = DeltaStore.from_settings(settings)
    # landed as the turns happened, so each expires by its own time (the brief app's turn is gone)
    land(store, settings.landing_uri, now=min(turn.ts for turn in corpus))
    derive(store, settings)
    embedder = memory_embedder(settings.embedding, store)
    if embed:
        embed_role_rows(store, embedder, batch_size=settings.embedding.batch_size)
    with make_client(settings) as client:
        sync_live(store, client, settings, model_id=embedder.model_id)
    return store


def embed_and_sync(store: DeltaStore, settings: Settings, query_embedder) -> Elasticsearch:
    """Embed the role rows with the session's torch model (`query_embedder`) and sync them into
    the live indices, as `ctxdb embed` and `index sync` run them; the client it synced with."""
    embed_role_rows(store, query_embedder.embedder, batch_size=32)
    client = make_client(settings)
    sync_live(store, client, settings, model_id=query_embedder.embedder.model_id)
    return client


def build_sample_memory(settings: Settings, generated: Generated, query_embedder) -> Elasticsearch:
    """The generated sample written as landing files, landed, derived, embedded with torch and
    indexed by the pipeline's own functions; the client it was indexed with."""
    write_sample(generated, Path(settings.landing_uri), files_root=Path(settings.files))
    store = DeltaStore(settings.delta_uri)
    land(store, settings.landing_uri)
    derive(store, settings)
    return embed_and_sync(store, settings, query_embedder)


def drop_turn_logs(client: Elasticsearch, prefix: str, keys: list[tuple[str, str]]) -> None:
    """Delete the TurnLog documents of `keys` from the live turns index (a failure state)."""
    ids = [turn_doc_id(conversation, turn) for conversation, turn in keys]
    found = client.search(
        index=alias_name(prefix, TURNS), query={"ids": {"values": ids}}, size=len(ids)
    )["hits"]["hits"]
    assert len(found) == len(ids)
    for hit in found:  # by the document's own routing (the index may be routed by user)
        client.delete(
            index=hit["_index"], id=hit["_id"], routing=hit.get("_routing"), refresh="wait_for"
        )


def drop_indices(client: Elasticsearch, prefix: str) -> None:
    names = list(client.indices.get(index=f"{prefix}-*", expand_wildcards="all"))
    if names:
        client.indices.delete(index=",".join(names))


@pytest.fixture(scope="session")
def query_embedder() -> ModelQueryEmbedder:
    """The real all-MiniLM-L6-v2 on torch, loaded once per test session (for tests that embed
    with torch on purpose)."""
    embedder = SentenceTransformerEmbedder(batch_size=16)
    embedder.load()
    return ModelQueryEmbedder(embedder)


@dataclass
class SearchEnv:
    settings: Settings
    client: Elasticsearch
    service: SearchService
    store: DeltaStore
    alice: Principal
    bob: Principal
    dana: Principal
    tokens: dict[str, str]


@pytest.fixture(scope="session")
def search_env(tmp_path_factory, es_base_settings: Settings) -> Iterator[SearchEnv]:
    """The corpus built by the pipeline under a unique prefix (once per session), its files
    written, tokens issued for its users; the service embeds queries as `ctxdb serve` does."""
    home = tmp_path_factory.mktemp("search-home")
    prefix = f"t-search-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(
        home=home, elasticsearch={"index_prefix": prefix}, retention=BRIEF_RETENTION
    )
    store = build_memory(settings, CORPUS)
    client = make_client(settings)
    drop_turn_logs(client, prefix, MISSING_TURN_LOGS)
    store_tokens = TokenStore(settings.tokens_path)
    tokens = {user: store_tokens.issue(user, tenant=TENANT) for user in USERS}
    yield SearchEnv(
        settings=settings,
        client=client,
        service=SearchService(settings, client, default_embedder(settings, client)),
        store=store,
        alice=Principal(user_id="alice", tenant=TENANT),
        bob=Principal(user_id="bob", tenant=TENANT),
        dana=Principal(user_id="dana", tenant=TENANT),
        tokens=tokens,
    )
    drop_indices(client, prefix)
    client.close()
