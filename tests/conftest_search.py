"""Fixtures for the search, HTTP and resolve tests: a small two-user corpus indexed into the real
Elasticsearch node (unique index prefix) with real all-MiniLM-L6-v2 vectors.

The fixtures are registered through `pytest_plugins` in tests/conftest.py; the corpus and its
constants are imported by name.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch, helpers

from ctxdb.auth.credentials import Principal, TokenStore
from ctxdb.embedding.model import SentenceTransformerEmbedder
from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body, index_name, turn_doc_id
from ctxdb.search.service import ModelQueryEmbedder, SearchService
from ctxdb.settings import Settings
from ctxdb.storage.conversation_files import turn_file_path
from ctxdb.text import stems, text_hash, trigrams

NOW = datetime.now(UTC)
TENANT, APP = "t1", "app1"


@dataclass
class Turn:
    """One recorded turn of the test corpus; `rows` says which role rows it projects."""

    user: str
    conversation: str
    turn: str
    age_days: float
    prompt: str
    answer: str
    agent: str = "helper"
    title: str | None = None
    summary: str | None = None
    anchors: str = ""
    note: str | None = None
    attachment: tuple[str, str] | None = None  # (filename, extracted text)
    hosted_file: str | None = None
    expired: bool = False
    with_turn_log: bool = True
    ordinal: int = 1
    extra_prompts: list[str] = field(default_factory=list)

    @property
    def ts(self) -> datetime:
        return NOW - timedelta(days=self.age_days)

    @property
    def expires_at(self) -> datetime:
        return NOW - timedelta(days=1) if self.expired else NOW + timedelta(days=365)


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
        ordinal=1,
        summary="Fixed formula loss on save in an Excel file edited with openpyxl.",
        anchors="openpyxl load_workbook data_only formulas",
        attachment=("budget.xlsx", "budget.xlsx quarterly budget with revenue formulas"),
        extra_prompts=["also it is the file from finance"],
    ),
    Turn(
        "alice",
        "c-sheets",
        "t2",
        5.9,
        "Now it fails with KeyError: 'Worksheet Sheet3 does not exist.'",
        "Sheet names are case sensitive; print wb.sheetnames and use the exact name.",
        title="Spreadsheet trouble",
        ordinal=2,
        note="User is probably on openpyxl 3.1; suggest upgrading later.",
        hosted_file="files/fixed.xlsx",
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
        ordinal=1,
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
        ordinal=2,
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
        ordinal=3,
    ),
    Turn(
        "alice",
        "c-cook",
        "t1",
        2.0,
        "recipe for a quick vegetarian lasagna",
        "Layer ricotta, spinach and marinara between no-boil noodles; bake 40 minutes.",
        title="Dinner",
        ordinal=1,
    ),
    Turn(
        "alice",
        "c-zebra-old",
        "t1",
        60.0,
        "zebra migration patterns in the serengeti",
        "The great migration follows the rains from the southern plains north to the Mara.",
        title="Zebras old",
        ordinal=1,
    ),
    Turn(
        "alice",
        "c-zebra-new",
        "t1",
        1.0,
        "zebra migration patterns in the serengeti",
        "The great migration follows the rains from the southern plains north to the Mara.",
        title="Zebras new",
        ordinal=1,
    ),
    Turn(
        "alice",
        "c-old",
        "t1",
        3.0,
        "openpyxl chart colors are wrong",
        "Set the series graphicalProperties line solidFill.",
        title="Expired chart talk",
        expired=True,
        hosted_file="files/chart.png",
    ),
    Turn(
        "alice",
        "c-nolog",
        "t1",
        4.0,
        "terraform apply fails with ConditionalCheckFailedException on the state lock",
        "Another run holds the DynamoDB lock; force-unlock with the lock id once it is dead.",
        title="Terraform lock",
        with_turn_log=False,
    ),
    Turn(
        "bob",
        "c-bob",
        "t1",
        2.0,
        "openpyxl payroll spreadsheet with the secret salaries",
        "Protect the payroll workbook sheet with a password in openpyxl.",
        title="Bob payroll",
        ordinal=1,
        hosted_file="files/salaries.xlsx",
    ),
    Turn(
        "bob",
        "c-sheets-bob",
        "t1",
        2.0,
        "my openpyxl workbook loses formulas on save",
        "Do not use data_only=True when you want formulas.",
        title="Bob sheets",
        ordinal=1,
    ),
]


def _fi_ref(turn: Turn, path: str) -> str:
    return f"conv:fi:conv_{turn.conversation}.turn_{turn.turn}.{path}"


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    ts = turn.ts.isoformat()
    blocks = [
        {
            "type": "user.prompt",
            "author": "user",
            "turn_id": turn.turn,
            "ts": ts,
            "mime": "text/plain",
            "path": f"conv:ar:{turn.turn}.user.prompt",
            "text": turn.prompt,
            "meta": {"event_type": "event.user.prompt", "message_id": "m1"},
        },
    ]
    for i, extra in enumerate(turn.extra_prompts, start=1):
        blocks.append(
            {
                "type": "user.prompt",
                "author": "user",
                "turn_id": turn.turn,
                "ts": ts,
                "mime": "text/plain",
                "path": f"conv:ar:{turn.turn}.user.prompt.{i}",
                "text": extra,
                "meta": {"event_type": "event.user.followup"},
            }
        )
    if turn.attachment:
        name, text = turn.attachment
        blocks.append(
            {
                "type": "user.attachment.meta",
                "author": "user",
                "turn_id": turn.turn,
                "ts": ts,
                "mime": "application/vnd.ms-excel",
                "path": _fi_ref(turn, f"user.attachments/{name}"),
                "text": text,
                "meta": {"filename": name, "size": 1234},
            }
        )
    if turn.hosted_file:
        blocks.append(
            {
                "type": "react.tool.result",
                "author": "assistant",
                "turn_id": turn.turn,
                "ts": ts,
                "mime": "application/vnd.ms-excel",
                "path": f"conv:tc:{turn.turn}.code_exec_0.result",
                "text": None,
                "meta": {
                    "kind": "file",
                    "artifact_path": _fi_ref(turn, turn.hosted_file),
                    "hosted_uri": f"file:///{turn.hosted_file}",
                },
            }
        )
    if turn.note:
        blocks.append(
            {
                "type": "react.note",
                "author": "assistant",
                "turn_id": turn.turn,
                "ts": ts,
                "mime": "text/plain",
                "path": f"conv:ar:{turn.turn}.react.note",
                "text": turn.note,
                "meta": {},
            }
        )
    if turn.summary:
        blocks.append(
            {
                "type": "conv.working.summary",
                "author": "assistant",
                "turn_id": turn.turn,
                "ts": ts,
                "mime": "text/plain",
                "path": f"conv:ws:{turn.turn}.summary",
                "text": turn.summary,
                "meta": {},
            }
        )
    blocks.append(
        {
            "type": "assistant.completion",
            "author": "assistant",
            "turn_id": turn.turn,
            "ts": ts,
            "mime": "text/markdown",
            "path": f"conv:ar:{turn.turn}.assistant.completion",
            "text": turn.answer,
            "meta": {},
        }
    )
    return blocks


def role_row_docs(turn: Turn) -> list[dict[str, Any]]:
    """Role-row documents (rows index fields) of one corpus turn, without vectors."""
    specs = [("user", "user", turn.prompt, "", "public")]
    specs += [("user", "user", extra, "", "public") for extra in turn.extra_prompts]
    specs.append(("assistant", "assistant", turn.answer, "", "public"))
    if turn.summary:
        specs.append(("assistant", "summary", turn.summary, turn.anchors, "public"))
    if turn.note:
        specs.append(("artifact", "notes", turn.note, "", "internal"))
    if turn.attachment:
        specs.append(("artifact", "attachment", turn.attachment[1], "", "public"))
    docs = []
    for ordinal, (role, target, text, anchors, visibility) in enumerate(specs):
        docs.append(
            {
                "row_id": f"{turn.conversation}:{turn.turn}:{ordinal}",
                "tenant": TENANT,
                "app": APP,
                "agent": turn.agent,
                "user_id": turn.user,
                "conversation_id": turn.conversation,
                "turn_id": turn.turn,
                "role": role,
                "target": target,
                "tags": [f"chat:{target}", f"turn:{turn.turn}"],
                "event_type": "event.user.prompt" if role == "user" else None,
                "batch_id": None,
                "ref": f"conv:ar:{turn.turn}.{target}",
                "path": f"conv:ar:{turn.turn}.{target}",
                "visibility": visibility,
                "ordinal": ordinal,
                "ts": turn.ts.isoformat(),
                "expires_at": turn.expires_at.isoformat(),
                "text": text,
                "anchors_text": anchors,
                "trigrams": trigrams(f"{text} {anchors}"),
                "stems": stems(f"{text} {anchors}"),
                "text_hash": text_hash(text),
            }
        )
    return docs


def turn_doc(turn: Turn) -> dict[str, Any]:
    return {
        "tenant": TENANT,
        "app": APP,
        "agent": turn.agent,
        "user_id": turn.user,
        "conversation_id": turn.conversation,
        "turn_id": turn.turn,
        "adapter": "test",
        "recording_kind": "minimal",
        "title": turn.title,
        "ordinal": turn.ordinal,
        "started_at": turn.ts.isoformat(),
        "ended_at": (turn.ts + timedelta(minutes=1)).isoformat(),
        "last_activity_at": (turn.ts + timedelta(minutes=1)).isoformat(),
        "expires_at": turn.expires_at.isoformat(),
        "error": False,
        "first_user_text": turn.prompt,
        "last_assistant_text": turn.answer,
        "payload": {
            "turn_id": turn.turn,
            "ts": turn.ts.isoformat(),
            "blocks": _blocks(turn),
            "sources_used": [{"sid": 1, "url": "https://openpyxl.readthedocs.io"}]
            if turn.summary
            else [],
        },
    }


def create_indices(client: Elasticsearch, prefix: str) -> None:
    for kind in (ROWS, TURNS):
        name = index_name(prefix, kind, 1)
        client.indices.create(index=name, **index_body(kind))
        client.indices.put_alias(index=name, name=alias_name(prefix, kind))


def index_corpus(
    client: Elasticsearch, prefix: str, corpus: list[Turn], embedder: ModelQueryEmbedder | None
) -> None:
    """Index role rows (with real vectors when an embedder is given) and TurnLogs."""
    rows = [doc for turn in corpus for doc in role_row_docs(turn)]
    if embedder is not None:
        vectors = embedder.embedder.encode([r["text"] for r in rows])
        for row, vector in zip(rows, vectors, strict=True):
            row.update(
                embedding=[float(x) for x in vector],
                embedding_status="ok",
                model_id="all-MiniLM-L6-v2",
            )
    actions = [{"_index": alias_name(prefix, ROWS), "_id": r["row_id"], "_source": r} for r in rows]
    actions += [
        {
            "_index": alias_name(prefix, TURNS),
            "_id": turn_doc_id(t.conversation, t.turn),
            "_source": turn_doc(t),
        }
        for t in corpus
        if t.with_turn_log
    ]
    helpers.bulk(client, actions, refresh="wait_for")


def drop_indices(client: Elasticsearch, prefix: str) -> None:
    names = list(client.indices.get(index=f"{prefix}-*", expand_wildcards="all"))
    if names:
        client.indices.delete(index=",".join(names))


def write_files(root: Path, corpus: list[Turn]) -> None:
    """Attachment and hosted-file bytes under the conversation storage layout."""
    for turn in corpus:
        base = root / turn_file_path(TENANT, APP, turn.user, turn.conversation, turn.turn)
        if turn.attachment:
            path = base / "user.attachments" / turn.attachment[0]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"bytes of {turn.attachment[0]} for {turn.user}".encode())
        if turn.hosted_file:
            path = base / turn.hosted_file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"bytes of {turn.hosted_file} for {turn.user}".encode())


@pytest.fixture(scope="session")
def query_embedder() -> ModelQueryEmbedder:
    """The real all-MiniLM-L6-v2, loaded once per test session."""
    embedder = SentenceTransformerEmbedder(batch_size=16)
    embedder.load()
    return ModelQueryEmbedder(embedder)


@dataclass
class SearchEnv:
    settings: Settings
    client: Elasticsearch
    service: SearchService
    alice: Principal
    bob: Principal
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def search_env(tmp_path_factory, query_embedder, es_base_settings: Settings) -> SearchEnv:
    """The corpus indexed under a unique prefix, files written, tokens issued for alice and bob."""
    home = tmp_path_factory.mktemp("search-home")
    prefix = f"t-search-{uuid.uuid4().hex[:10]}"
    settings = es_base_settings.replace(home=home, elasticsearch={"index_prefix": prefix})
    client = make_client(settings)
    create_indices(client, prefix)
    index_corpus(client, prefix, CORPUS, query_embedder)
    write_files(Path(settings.files), CORPUS)
    store = TokenStore(settings.tokens_path)
    tokens = {user: store.issue(user, tenant=TENANT) for user in ("alice", "bob")}
    yield SearchEnv(
        settings=settings,
        client=client,
        service=SearchService(settings, client, query_embedder),
        alice=Principal(user_id="alice", tenant=TENANT),
        bob=Principal(user_id="bob", tenant=TENANT),
        tokens=tokens,
    )
    drop_indices(client, prefix)
