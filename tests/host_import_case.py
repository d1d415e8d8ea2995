"""The end-to-end check every host importer (Codex, Gemini) shares: sessions imported into the
spool land, derive, embed and index with the real pipeline; a turn is found by its content and
shows its prompt and answer; a re-import (even of a deleted spool file) lands nothing new. Also
`by_type`, the events of one type, which every host's tests pick from an import."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conftest_search import embed_and_sync

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.hosts import import_sessions
from ctxdb.contract.identity import Principal
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.search import SearchRequest, SearchService
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import TURN_LOGS, TURN_LOGS_SCHEMA


def by_type(events: list[dict], kind: str) -> list[dict]:
    """The events of one `type`, in order."""
    return [e for e in events if e["type"] == kind]


@dataclass(frozen=True)
class HostCase:
    """One host's recorded sessions and the turn a content query must find among them."""

    spool: str
    sessions: list[Path]
    events: Callable
    identity: Identity
    query: str
    turn_id: str
    prompt_starts: str
    answer_starts: str
    turns: int
    deleted: Path
    """A session whose spool file is deleted before the re-import."""


def check_import_searchable_and_idempotent(
    case: HostCase, settings: Settings, query_embedder
) -> None:
    spool_dir = Path(settings.landing_uri) / case.spool
    stats = import_sessions(case.sessions, spool_dir, case.identity, case.events, settle_s=0)
    assert (stats.files, stats.turns, stats.failed) == (len(case.sessions), case.turns, 0)
    store = DeltaStore(settings.delta_uri)
    landed = land(store, settings.landing_uri)
    assert landed.quarantined == 0 and landed.landed == stats.events
    derive(store, settings)
    client = embed_and_sync(store, settings, query_embedder)
    service = SearchService(settings, client, query_embedder)
    owner = Principal(user_id=case.identity.user_id, tenant=case.identity.tenant)

    hits = service.search(owner, SearchRequest(query=case.query, top_k=5)).hits
    assert hits[0].turn_id == case.turn_id
    view = service.turn(owner, hits[0].conversation_id, case.turn_id)
    assert view.messages[0].text.startswith(case.prompt_starts)
    assert view.messages[-1].text.startswith(case.answer_starts)

    assert store.read(TURN_LOGS, TURN_LOGS_SCHEMA).height == case.turns
    again = import_sessions(case.sessions, spool_dir, case.identity, case.events, settle_s=0)
    assert (again.written, again.unchanged) == (0, len(case.sessions))
    deleted = list((spool_dir / "import").rglob(f"{case.deleted.stem}.*jsonl"))
    assert deleted
    for path in deleted:
        path.unlink()
    import_sessions(case.sessions, spool_dir, case.identity, case.events, settle_s=0)
    relanded = land(store, settings.landing_uri)
    assert (relanded.landed, relanded.quarantined) == (0, 0)
    derive(store, settings)
    assert store.read(TURN_LOGS, TURN_LOGS_SCHEMA).height == case.turns
