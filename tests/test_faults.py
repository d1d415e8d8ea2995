"""Fault injection (issue 12): each writer is SIGKILLed right after one of its commits, in a real
`ctxdb` process, then run again; every table, both indices, the file storage and the landing files
must then equal a clean build of the same input, with nothing duplicated and nothing missing.

The kill is triggered by the commit itself, not by a timer: `CTXDB_FAULT_KILL_AFTER=<point>`
makes the process SIGKILL itself right after the named commit (`ctxdb/storage/faults.py`).

The clean build runs every step once on a small generated sample (land, derive, embed+index,
reindex, erase, retention), saving the state before each step and a snapshot after it. Each case
restores the state before its step at the same path (Delta and landing files hold absolute paths),
rebuilds the indices from Delta under a fresh prefix when the step needs them, runs the step
killed at its point, runs it again, and compares with the clean snapshot of that step.

Run alone with `pytest -m fault` (a few minutes on 2 cores).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch, helpers

from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.faults import ENV as KILL_AFTER
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    EMBEDDINGS,
    LANDED_FILES,
    PURGED_CONVERSATIONS,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    REPLAY_ARTIFACTS,
    RETENTION_PENDING,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    SCHEMAS,
    TURN_CATALOG,
    TURN_LOGS,
)

pytestmark = [pytest.mark.fault, pytest.mark.es, pytest.mark.model, pytest.mark.slow]

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
# The sample ends ten days ago; globex rows live one day, so the sweep removes exactly those.
SAMPLE_END = datetime.now(UTC).replace(microsecond=0) - timedelta(days=10)
RULES = json.dumps([{"tenant": "globex", "days": 1}])
ERASE_USER = "{erase_user}"

STEPS: dict[str, tuple[str, ...]] = {
    "land": ("land",),
    "derive": ("derive",),
    "embed+index": ("index", "sync"),
    "reindex": ("index", "reindex", "--grace", "0"),
    "erase": ("erase", "--user", ERASE_USER),
    "retention": ("retention", "run"),
}
NEEDS_INDEX = {"reindex", "erase", "retention"}

# (step, commit point it dies right after)
KILLS = [
    ("land", "delta:raw_turn_events"),  # events committed, their files not yet recorded
    ("derive", "delta:role_rows"),  # some derived tables written, derive_state not advanced
    ("embed+index", "delta:role_row_embeddings"),  # embedded, nothing indexed
    ("embed+index", "es:bulk"),  # the first bulk indexed, index_state not advanced
    ("reindex", "es:bulk"),  # a partial new index version, aliases untouched
    ("reindex", "es:alias_swap"),  # swapped, the retired versions not dropped
    ("erase", "delta:raw_turn_events"),  # the user's events deleted, the rest not yet
    ("retention", "delta:retention_pending"),  # the sweep's work recorded, nothing deleted
    ("retention", "delta:role_rows"),  # expired role rows deleted, their statuses not yet
]

# Columns that record when or in which attempt a row was written, not what it says. A file's
# `landed`/`duplicates` counts say what the attempt that finished it did: after a crash between
# the events' commit and the file's, the rerun finds that file's events already landed.
VOLATILE = {
    RAW_TURN_EVENTS: ["ingested_at", "landed_version"],
    QUARANTINED_EVENTS: ["quarantined_at"],
    LANDED_FILES: ["landed_at", "mtime", "landed", "duplicates"],
    TURN_LOGS: ["updated_at"],
    CONVERSATION_TIMELINES: ["updated_at"],
    ROLE_ROWS: ["derived_at"],
    TURN_CATALOG: ["updated_at"],
    REPLAY_ARTIFACTS: ["updated_at"],
    EMBEDDINGS: ["created_at", "vector"],
    ROW_EMBEDDINGS: ["updated_at", "attempts", "error"],
    RETENTION_PENDING: ["run_id", "recorded_at"],
    PURGED_CONVERSATIONS: ["purged_at"],
    "quarantined_files": ["quarantined_at", "mtime"],
    "derive_failures": ["landed_version", "failed_at"],
    "index_failures": ["index_name", "failed_at"],
}
# Keys that are unique in a clean build.
KEYS = {
    RAW_TURN_EVENTS: ["event_id"],
    LANDED_FILES: ["source_file"],
    TURN_LOGS: ["tenant", "app", "user_id", "conversation_id", "turn_id"],
    ROLE_ROWS: ["row_id"],
    ROW_EMBEDDINGS: ["row_id"],
    EMBEDDINGS: ["model_id", "text_hash"],
}


@dataclass
class Workspace:
    """The one home path every state is restored to, and how to run `ctxdb` on it."""

    home: Path
    settings: Settings
    erase_user: str
    prefix: str = ""

    def env(self, kill_after: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != KILL_AFTER}
        env.update(
            CTXDB_HOME=str(self.home),
            CTXDB_ELASTICSEARCH_INDEX_PREFIX=self.prefix,
            ELASTICSEARCH_URL=self.settings.elasticsearch.url,
            CTXDB_RETENTION_RULES=RULES,
            CTXDB_ELASTICSEARCH_CHUNK_SIZE="40",
            CTXDB_ELASTICSEARCH_REINDEX_GRACE_S="0",
            # a killed writer cannot release its lease: the rerun waits until it expires
            CTXDB_ELASTICSEARCH_WRITER_LEASE_TTL_S="6",
            CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S="120",
        )
        if kill_after:
            env[KILL_AFTER] = kill_after
        return env

    def run(self, step: str, kill_after: str | None = None) -> subprocess.CompletedProcess:
        args = [a.replace(ERASE_USER, self.erase_user) for a in STEPS[step]]
        return subprocess.run(
            [CTXDB, *args],
            env=self.env(kill_after),
            cwd=self.home.parent,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )

    def run_clean(self, step: str) -> None:
        done = self.run(step)
        assert done.returncode == 0, f"{step}: {done.stderr[-3000:]}"

    def restore(self, saved: Path, prefix: str) -> None:
        """Put a saved state at the home path, under a new index prefix."""
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.copytree(saved, self.home, copy_function=shutil.copy2)
        self.prefix = prefix

    def save(self, to: Path) -> None:
        shutil.copytree(self.home, to, copy_function=shutil.copy2)


def _canonical(row: dict[str, Any], home: Path) -> str:
    return json.dumps(row, sort_keys=True, default=str).replace(str(home), "<home>")


def _documents(es: Elasticsearch, alias: str) -> list[str]:
    if not es.indices.exists_alias(name=alias):
        return []
    es.indices.refresh(index=alias)
    docs = []
    for hit in helpers.scan(es, index=alias, query={"query": {"match_all": {}}}):
        source = dict(hit["_source"])
        source["embedding"] = source.get("embedding") is not None
        docs.append(json.dumps({"_id": hit["_id"], **source}, sort_keys=True, default=str))
    return sorted(docs)


def _content(path: Path) -> bytes:
    """A file's bytes; a gzip file's decompressed (its header holds the time it was written)."""
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _tree(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(
        f"{p.relative_to(root)} {hashlib.sha256(_content(p)).hexdigest()[:16]}"
        for p in root.rglob("*")
        if p.is_file()
    )


def snapshot(space: Workspace) -> dict[str, list[str]]:
    """Everything a writer may change, as sorted canonical lines (duplicates kept)."""
    store = DeltaStore(str(space.home / "delta"))
    state = {
        table: sorted(
            _canonical(row, space.home)
            for row in store.read(table, SCHEMAS[table]).drop(volatile, strict=False).to_dicts()
        )
        for table, volatile in VOLATILE.items()
    }
    with make_client(space.settings) as es:
        for kind in (ROWS, TURNS):
            state[f"index:{kind}"] = _documents(es, alias_name(space.prefix, kind))
    state["files"] = _tree(space.home / "files")
    state["landing"] = _tree(space.home / "landing")
    return state


def duplicates(space: Workspace) -> dict[str, int]:
    """Per table, how many rows repeat a key (all zero in a clean build)."""
    store = DeltaStore(str(space.home / "delta"))
    found = {}
    for table, key in KEYS.items():
        frame = store.read(table, SCHEMAS[table], columns=key)
        found[table] = frame.height - frame.unique().height
    return found


def differences(state: dict[str, list[str]], clean: dict[str, list[str]]) -> dict[str, dict]:
    """Per differing part: how many lines are extra and missing, and one of each."""
    found = {}
    for part, expected in clean.items():
        extra = Counter(state[part]) - Counter(expected)
        missing = Counter(expected) - Counter(state[part])
        if extra or missing:
            found[part] = {
                "extra": sum(extra.values()),
                "missing": sum(missing.values()),
                "e.g. extra": next(iter(extra), None),
                "e.g. missing": next(iter(missing), None),
            }
    return found


def _drop_indices(settings: Settings, prefixes: list[str]) -> None:
    with make_client(settings) as es:
        for prefix in prefixes:
            found = es.indices.get(
                index=f"{prefix}-*", expand_wildcards="all", allow_no_indices=True
            )
            if found.body:
                es.indices.delete(index=",".join(sorted(found.body)))


@dataclass
class Clean:
    """The clean build: the state before each step and the snapshot after it."""

    space: Workspace
    before: dict[str, Path]
    after: dict[str, dict[str, list[str]]]
    prefixes: list[str]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, es_base_settings: Settings):
    root = tmp_path_factory.mktemp("faults")
    home = root / "home"
    generated = generate_events(users=3, conversations=6, seed=11, now=SAMPLE_END, days=4)
    write_sample(generated, home / "landing", files_root=home / "files", per_file=60)
    owners = Counter(e.get("user_id") for e in generated.events if e.get("tenant") == "acme")
    space = Workspace(home, es_base_settings, owners.most_common(1)[0][0])
    space.prefix = f"fault-clean-{uuid.uuid4().hex[:8]}"
    build = Clean(space, {}, {}, [space.prefix])
    for step in STEPS:
        build.before[step] = root / f"before-{step.replace('+', '-')}"
        space.save(build.before[step])
        space.run_clean(step)
        build.after[step] = snapshot(space)
    yield build
    _drop_indices(es_base_settings, build.prefixes)


@pytest.mark.parametrize(("step", "point"), KILLS)
def test_sigkill_at_a_commit_then_rerun_equals_a_clean_build(
    step: str, point: str, clean: Clean
) -> None:
    space = clean.space
    prefix = f"fault-{uuid.uuid4().hex[:8]}"
    clean.prefixes.append(prefix)
    space.restore(clean.before[step], prefix)
    if step in NEEDS_INDEX:  # the indices of the saved state, rebuilt from its Delta tables
        done = subprocess.run(
            [CTXDB, "index", "sync", "--no-embed"],
            env=space.env(None),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    killed = space.run(step, kill_after=point)
    assert killed.returncode == -signal.SIGKILL, f"{step} not killed at {point}: {killed.stderr}"
    space.run_clean(step)

    assert all(n == 0 for n in duplicates(space).values()), duplicates(space)
    expected = clean.after[step]
    assert expected[RAW_TURN_EVENTS] and expected["landing"]
    assert differences(snapshot(space), expected) == {}
