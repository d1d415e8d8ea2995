"""Issue 44 item 3: the importers and the Gemini CLI hook publish into the day partition of the
landing (`dt=YYYY-MM-DD`, `ctxdb.landing.partitions`): the session's file of the day holds the
events no file of an earlier day holds (`ctxdb.capture.part_files.Published`). Real session
fixtures (tests/data/*/SOURCE.md), real landing files and the real landing into Delta. A file
"published yesterday" is today's file moved into yesterday's partition before anything lands it,
which is all that publishing on another day leaves behind."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from ctxdb.capture.claude_code.turns import Identity
from ctxdb.capture.codex.importer import rollout_events
from ctxdb.capture.gemini import hook
from ctxdb.capture.gemini.importer import session_events
from ctxdb.capture.hosts import import_sessions
from ctxdb.contract.private import strip_private
from ctxdb.landing import partitions
from ctxdb.landing.cursor import landing_floor
from ctxdb.landing.listing import list_files
from ctxdb.landing.run import land
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_TURN_EVENTS

DATA = Path(__file__).parent / "data"
GEMINI = DATA / "gemini" / "session-2026-01-16T11-01-file-ops-37b7abef.json"
CODEX = DATA / "codex" / "rollout-2026-02-23T12-47-42-019c8a53-a0dd-7130-bcd7-95445d84846a.jsonl"
ANN = Identity("local", "gemini-cli", "ann")


def today() -> str:
    return partitions.name(datetime.now(UTC))


def yesterday() -> str:
    return partitions.name(datetime.now(UTC) - timedelta(days=1))


def ids_of(path: Path) -> set[str]:
    return {json.loads(line)["event_id"] for line in path.read_text().splitlines()}


def published(folder: Path) -> list[Path]:
    """Every events file under `folder`, oldest partition first."""
    return sorted(folder.rglob("*.jsonl"), key=lambda p: (p.parent.name, p.name))


def run_hook(session: Path, spool: Path, root: Path) -> None:
    payload = {"hook_event_name": "AfterAgent", "session_id": "s", "transcript_path": str(session)}
    assert hook.run(spool, ANN, root, io.StringIO(json.dumps(payload))) == 0


def test_the_gemini_hook_and_an_import_publish_into_the_day_partition_and_land_once(
    tmp_path: Path, capsys
) -> None:
    """The hook writes a session's events into the day's partition; published yesterday, they
    land. Running the hook again, or importing the same session, writes nothing; once the session
    grows, today's file holds only the new events, which land with no duplicate. Every event's
    landed `source_file` is the one file that holds it, and the landing from its cursor lists
    both files."""
    landing, store = tmp_path / "landing", DeltaStore(str(tmp_path / "delta"))
    spool, root = landing / "gemini_cli", tmp_path / ".gemini" / "tmp"
    session = root / "p" / "chats" / GEMINI.name
    session.parent.mkdir(parents=True)
    data = json.loads(GEMINI.read_text())
    session.write_text(json.dumps({**data, "messages": data["messages"][:6]}))
    run_hook(session, spool, root)
    [written] = published(spool / "import")
    assert written.relative_to(spool).as_posix() == f"import/{today()}/{GEMINI.stem}.jsonl"
    (spool / "import" / today()).rename(spool / "import" / yesterday())
    [first] = published(spool / "import")
    assert land(store, str(landing)).landed == len(ids_of(first)) > 0

    run_hook(session, spool, root)
    again = import_sessions([session], spool, ANN, session_events, settle_s=0)
    assert (again.written, again.unchanged) == (0, 1)
    assert published(spool / "import") == [first]
    assert land(store, str(landing)).files == 0

    session.write_text(json.dumps(data))
    run_hook(session, spool, root)
    run_hook(session, spool, root)
    files = published(spool / "import")
    assert [p.relative_to(spool / "import").parent.name for p in files] == [yesterday(), today()]
    added = ids_of(files[1])
    assert added and not added & ids_of(first)
    assert added | ids_of(first) == {
        e["event_id"] for e in session_events(session, ANN, True, strip_private)
    }
    grown = land(store, str(landing))
    assert (grown.files, grown.landed, grown.duplicates) == (1, len(added), 0)
    assert land(store, str(landing)).files == 0
    assert capsys.readouterr().out == "{}\n" * 4

    raw = store.read(RAW_TURN_EVENTS).select("event_id", "source_file")
    assert raw.height == raw.get_column("event_id").n_unique() == len(ids_of(first) | added)
    holder = pl.DataFrame(
        [(i, str(p)) for p in files for i in ids_of(p)], schema=["event_id", "file"], orient="row"
    )
    assert (
        raw.join(holder, on="event_id").filter(pl.col("source_file") != pl.col("file")).is_empty()
    )
    listed = {f.path for f in list_files(str(landing), since=landing_floor(store))}
    assert listed == {str(p) for p in files}


def test_a_codex_import_run_twice_lands_once(tmp_path: Path) -> None:
    """`import_sessions` (what `ctxdb capture codex import` runs) twice: one file, in today's
    partition, landed once; the second import writes nothing."""
    landing, store = tmp_path / "landing", DeltaStore(str(tmp_path / "delta"))
    first = import_sessions([CODEX], landing / "codex", ANN, rollout_events, settle_s=0)
    again = import_sessions([CODEX], landing / "codex", ANN, rollout_events, settle_s=0)
    assert (first.written, again.written, again.unchanged) == (1, 0, 1)
    [file] = published(landing)
    assert file.relative_to(landing).as_posix() == f"codex/import/{today()}/{CODEX.stem}.jsonl"
    assert land(store, str(landing)).landed == first.events == len(ids_of(file))
    assert land(store, str(landing)).files == 0


def test_a_session_imported_before_partitions_is_not_published_again(tmp_path: Path) -> None:
    """A whole events file of the flat layout (`import/<session>.jsonl`, written before
    partitions) counts as published: re-importing its session writes nothing new."""
    fresh = tmp_path / "fresh"
    import_sessions([CODEX], fresh, ANN, rollout_events, settle_s=0)
    [whole] = published(fresh)
    flat = tmp_path / "spool" / "import" / f"{CODEX.stem}.jsonl"
    flat.parent.mkdir(parents=True)
    flat.write_bytes(whole.read_bytes())
    again = import_sessions([CODEX], tmp_path / "spool", ANN, rollout_events, settle_s=0)
    assert (again.files, again.written, again.unchanged) == (1, 0, 1)
    assert sorted((tmp_path / "spool").rglob("*.jsonl")) == [flat]
