"""The recorder SDK (`ctxdb.capture`): events of every method land through the real landing stage
into real Delta tables; `.part` files are never landed; exceptions, cancellations, invalid events,
an opt-out, a failing spool and a SIGKILLed host each behave as docs/capture.md says."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from ctxdb.capture import AsyncRecorder, CaptureIOError, InvalidEventError, Recorder
from ctxdb.capture.spool import cancel_event_id
from ctxdb.landing.listing import list_files
from ctxdb.landing.run import land
from ctxdb.record.run import derive
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    RAW_EVENTS_SCHEMA,
    RAW_TURN_EVENTS,
    ROLE_ROWS,
    ROLE_ROWS_SCHEMA,
    TURN_LOGS,
    TURN_LOGS_SCHEMA,
)

ROOT = Path(__file__).resolve().parents[1]
IDENTITY = {"tenant": "acme", "app": "chat", "agent": "helper"}


def recorder(landing: Path, **options: object) -> Recorder:
    return Recorder(landing, **IDENTITY, **options)  # type: ignore[arg-type]


def landed(landing: Path | str, store_root: Path) -> tuple[object, pl.DataFrame]:
    """Land everything under `landing` into the Delta tables at `store_root`: (stats, events)."""
    store = DeltaStore(str(store_root))
    stats = land(store, str(landing))
    return stats, store.read(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA)


def payloads(events: pl.DataFrame, event_type: str) -> list[dict]:
    rows = events.filter(pl.col("type") == event_type)
    return [json.loads(p) for p in rows.sort("occurred_at", "line_number")["payload"]]


def spooled(landing: Path, suffix: str) -> list[Path]:
    return sorted(p for p in landing.rglob(f"*{suffix}") if p.name.endswith(suffix))


def test_every_method_lands_as_its_contract_event(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    rec = recorder(landing, adapter="react")
    with rec.turn(user_id="u1", conversation_id="c1", turn_id="t1") as turn:
        turn.title("Old Excel files")
        turn.submission("my .xls will not open <private>password hunter2</private>in openpyxl")
        turn.submission("it is from 2003", event_type="followup")
        turn.context("selection", "Sheet1!A1:C9", ref="app://sheets/42", event={"chars": 120})
        attachment = turn.attachment("sales.xls", "application/vnd.ms-excel", 48128)
        turn.step("s1", "start", tool="code_exec", title="Converting")
        turn.block("react.tool.call", "convert('sales.xls')", call_id="call0", tool="code_exec")
        hosted = turn.hosted_file("out/sales.xlsx", "application/octet-stream", data=b"xlsx")
        turn.completion("openpyxl reads only .xlsx; I converted it.", tokens_in=10, tokens_out=5)
        turn.summary("Converted sales.xls to .xlsx.", refs=[hosted])
        turn.anchors(["InvalidFileException", "<private>x</private>"], ["openpyxl"])
        turn.notes(["User is on Windows.", "<private>only private</private>", "No LibreOffice."])
    rec.close()
    assert attachment == "conv:fi:conv_c1.turn_t1.user.attachments/sales.xls"
    assert hosted == "conv:fi:conv_c1.turn_t1.files/out/sales.xlsx"
    assert rec.stats.written == 15 and rec.stats.invalid == rec.stats.dropped == 0

    stats, events = landed(landing, tmp_path / "delta")
    assert (stats.landed, stats.quarantined) == (15, 0)
    assert set(events["adapter"]) == {"react"} and set(events["user_id"]) == {"u1"}
    prompts = payloads(events, "user.submission")
    assert [p["text"] for p in prompts] == ["my .xls will not open in openpyxl", "it is from 2003"]
    assert [p["event_type"] for p in prompts] == ["prompt", "followup"]
    assert payloads(events, "file.hosted")[0]["size"] == 4
    assert payloads(events, "react.anchors") == [
        {"phrases": ["InvalidFileException"], "entities": ["openpyxl"]}
    ]
    assert [p["text"] for p in payloads(events, "react.note")] == [
        "User is on Windows.",
        "No LibreOffice.",
    ]
    assert payloads(events, "turn.closed") == [{"status": "ok"}]
    assert "hunter2" not in "".join(events["payload"])

    derive(DeltaStore(str(tmp_path / "delta")), Settings(home=tmp_path))
    logs = DeltaStore(str(tmp_path / "delta")).read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert logs.select("turn_id", "recording_kind", "title").rows() == [
        ("t1", "rich", "Old Excel files")
    ]


def test_landing_never_reads_a_part_file(tmp_path: Path) -> None:
    """An open turn stays in a `.jsonl.part` file that landing does not list; closing the
    recorder publishes it and the next landing takes it."""
    landing = tmp_path / "landing"
    rec = recorder(landing)
    turn = rec.turn(user_id="u1", conversation_id="c1")
    turn.submission("still typing")
    assert rec.flush()
    assert len(spooled(landing, ".jsonl.part")) == 1 and spooled(landing, ".jsonl") == []
    assert list_files(str(landing)) == []
    stats, _ = landed(landing, tmp_path / "delta")
    assert stats.files == 0

    turn.close()
    rec.close()
    assert spooled(landing, ".jsonl.part") == []
    assert [Path(f.path).suffix for f in list_files(str(landing))] == [".jsonl"]
    stats, events = landed(landing, tmp_path / "delta")
    assert stats.landed == 3 and events["type"].to_list()[-1] == "turn.closed"


def test_an_exception_closes_the_turn_as_error_and_reaches_the_host(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    rec = recorder(landing)
    with pytest.raises(ZeroDivisionError):
        with rec.turn(user_id="u1", conversation_id="c1", turn_id="t-err") as turn:
            turn.submission("divide by zero please")
            _ = 1 / 0
    with pytest.raises(KeyboardInterrupt):
        with rec.turn(user_id="u1", conversation_id="c1", turn_id="t-int") as turn:
            raise KeyboardInterrupt
    rec.close()
    _, events = landed(landing, tmp_path / "delta")
    closed = {
        row["turn_id"]: json.loads(row["payload"])
        for row in events.filter(pl.col("type") == "turn.closed").iter_rows(named=True)
    }
    assert closed == {
        "t-err": {"status": "error", "error_type": "ZeroDivisionError"},
        "t-int": {"status": "cancelled", "error_type": "KeyboardInterrupt"},
    }
    derive(DeltaStore(str(tmp_path / "delta")), Settings(home=tmp_path))
    logs = DeltaStore(str(tmp_path / "delta")).read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert logs.filter(pl.col("turn_id") == "t-err")["error"].to_list() == [True]


def test_invalid_events_are_raised_or_logged_never_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    landing = tmp_path / "landing"
    rec = recorder(landing)
    with pytest.raises(InvalidEventError) as refused:
        rec.turn(user_id="ann smith", conversation_id="c1")
    assert refused.value.reason == "unsafe_id"
    turn = rec.turn(user_id="ann", conversation_id="c1")
    with pytest.raises(InvalidEventError, match="naive_timestamp"):
        turn.submission("when?", occurred_at=datetime(2026, 1, 1))
    with pytest.raises(InvalidEventError, match="sha256"):
        turn.hosted_file("report.pdf", "application/pdf", 10, "not-a-digest")
    with pytest.raises(InvalidEventError, match="wrong_type"):
        turn.context("page", event={"opened": {1, 2}})
    turn.close()
    with pytest.raises(InvalidEventError, match="already closed"):
        turn.completion("too late")
    rec.close()
    with pytest.raises(InvalidEventError, match="the recorder is already closed"):
        rec.turn(user_id="ann", conversation_id="c3")

    logging_rec = recorder(tmp_path / "landing2", invalid="log")
    with caplog.at_level(logging.WARNING, logger="ctxdb.capture.recorder"):
        with logging_rec.turn(user_id="ann", conversation_id="c2") as turn:
            assert turn.step("", tool="x") is None
            assert turn.completion("fine") is not None
    logging_rec.close()
    assert "chat.step refused: invalid_field" in caplog.text
    assert (rec.stats.invalid, logging_rec.stats.invalid) == (6, 1)
    stats, events = landed(tmp_path, tmp_path / "delta")
    assert stats.quarantined == 0
    assert sorted(events["type"]) == sorted(
        ["turn.started", "turn.closed"] * 2 + ["assistant.completion"]
    )


def test_over_long_texts_are_cut_to_fit_the_contract(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    rec = recorder(landing)
    with rec.turn(user_id="u1", conversation_id="c1") as turn:
        turn.submission("x" * 150_000)
        turn.completion("é" * 199_000)  # 2 bytes each: longer than a line may be
    rec.close()
    stats, events = landed(landing, tmp_path / "delta")
    assert stats.quarantined == 0
    prompt = payloads(events, "user.submission")[0]["text"]
    answer = payloads(events, "assistant.completion")[0]["text"]
    assert len(prompt) == 100_000 and prompt.endswith(" [truncated]")
    assert answer.endswith(" [truncated]") and len(answer.encode()) < 256 * 1024


def test_capture_off_or_excluded_project_writes_nothing(tmp_path: Path) -> None:
    off = Settings(home=tmp_path, capture={"enabled": False})
    project = tmp_path / "src" / "secret-project"
    excluded = Settings(home=tmp_path, capture={"exclude": [str(tmp_path / "src")]})
    for settings, where in ((off, None), (excluded, project / "sub")):
        rec = Recorder.from_settings(settings, **IDENTITY, project=where)
        assert not rec.enabled
        with rec.turn(user_id="u1", conversation_id="c1") as turn:
            assert turn.submission("nothing of this is kept") is None
        assert rec.flush()
        rec.close()
    elsewhere = Recorder.from_settings(excluded, **IDENTITY, project=tmp_path / "src-other")
    assert elsewhere.enabled
    elsewhere.close()
    assert not (tmp_path / "landing" / "capture").exists() or not any(
        (tmp_path / "landing").rglob("*.jsonl*")
    )


def test_an_unwritable_landing_is_logged_retried_and_nothing_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file where the spool folder belongs makes every write fail: the host is not disturbed,
    the cause is logged, and once the folder can be made the kept events are written once."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "capture").write_text("in the way")
    rec = recorder(landing)
    with caplog.at_level(logging.ERROR, logger="ctxdb.capture.writer"):
        with rec.turn(user_id="u1", conversation_id="c1") as turn:
            turn.submission("is this kept?")
            turn.completion("yes")
        assert not rec.flush(timeout=2)
    assert rec.stats.io_errors >= 1 and rec.stats.written == 0
    assert "cannot write" in caplog.text and "Not a directory" in caplog.text

    (landing / "capture").unlink()
    deadline = time.monotonic() + 30
    while not rec.flush(timeout=5) and time.monotonic() < deadline:
        time.sleep(0.2)
    rec.close()
    assert rec.stats.written == 4 and rec.stats.dropped == 0
    stats, events = landed(landing, tmp_path / "delta")
    assert (stats.landed, stats.duplicates) == (4, 0)
    assert payloads(events, "user.submission")[0]["text"] == "is this kept?"


def test_a_full_disk_drops_beyond_the_queue_and_can_raise_when_asked(tmp_path: Path) -> None:
    """Writes to /dev/full fail with ENOSPC: events beyond the queue's size are dropped and
    counted, close still returns, and with io_errors="raise" the host hears of it."""
    landing = tmp_path / "landing"
    rec = recorder(landing, queue_size=3, io_errors="raise")
    spool = rec._writer.spool  # the part file the writer is about to open points at /dev/full
    spool.directory.mkdir(parents=True)
    (spool.directory / f"{spool.name}-000001.jsonl.part").symlink_to("/dev/full")
    turn = rec.turn(user_id="u1", conversation_id="c1")
    for n in range(20):
        try:
            turn.step(f"s{n}")
        except CaptureIOError as exc:
            assert "No space left on device" in str(exc)
            break
        time.sleep(0.01)
    else:
        pytest.fail("the host never heard of the full disk")
    with pytest.raises(CaptureIOError):
        rec.flush(timeout=1)
    rec.io_errors = "log"
    for n in range(20):
        turn.step(f"t{n}")
    rec.close(timeout=10)
    stats = rec.stats
    assert stats.written == 0 and stats.io_errors >= 1 and stats.dropped >= 17


def test_an_asyncio_host_records_turns_and_a_cancelled_task_closes_its_turn(
    tmp_path: Path,
) -> None:
    landing = tmp_path / "landing"

    async def host() -> None:
        async with AsyncRecorder(landing, **IDENTITY) as rec:
            async with rec.turn(user_id="u1", conversation_id="c1", turn_id="t-ok") as turn:
                turn.submission("hello")
                turn.completion("hi")

            started = asyncio.Event()

            async def slow_turn() -> None:
                async with rec.turn(user_id="u1", conversation_id="c1", turn_id="t-cut") as turn:
                    turn.submission("a long question")
                    started.set()
                    await asyncio.sleep(60)

            task = asyncio.create_task(slow_turn())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await rec.aflush()

    asyncio.run(host())
    _, events = landed(landing, tmp_path / "delta")
    closed = {
        row["turn_id"]: json.loads(row["payload"])["status"]
        for row in events.filter(pl.col("type") == "turn.closed").iter_rows(named=True)
    }
    assert closed == {"t-ok": "ok", "t-cut": "cancelled"}


def test_an_object_store_landing_gets_whole_files_from_a_local_spool(tmp_path: Path) -> None:
    landing = f"file://{tmp_path / 'bucket' / 'landing'}"
    spool = tmp_path / "spool"
    rec = Recorder(landing, **IDENTITY, spool_dir=spool, rotate_bytes=200)
    for n in range(3):
        with rec.turn(user_id="u1", conversation_id="c1", turn_id=f"t{n}") as turn:
            turn.submission(f"question {n}")
    rec.close()
    assert not any(spool.rglob("*.jsonl*"))
    remote = sorted((tmp_path / "bucket" / "landing" / "capture").rglob("*"))
    assert [p.name for p in remote if p.is_file() and not p.name.endswith(".jsonl")] == []
    stats, events = landed(landing, tmp_path / "delta")
    assert (stats.landed, stats.quarantined) == (9, 0)
    assert set(events["turn_id"]) == {"t0", "t1", "t2"}


HOST = textwrap.dedent(
    """
    import sys, time
    from ctxdb.capture import Recorder

    rec = Recorder(sys.argv[1], tenant="acme", app="chat", agent="helper", rotate_bytes=1000)
    turn = rec.turn(user_id="u1", conversation_id="c1", turn_id="t-open")
    rec.turn(user_id="u1", conversation_id="c2", turn_id="t-quiet")  # known only to the journal
    with rec.turn(user_id="u1", conversation_id="c1", turn_id="t-done") as done:
        done.submission("a turn that finished")
        done.completion("done")
    assert rec.flush(None)  # over 1000 bytes: published, t-open's turn.started with it
    turn.submission("a question the host never answered")
    turn.step("s1", "start", tool="search", title="searching")
    assert rec.flush(None)  # no timeout: under load both batches must stay apart
    print("written", flush=True)
    time.sleep(120)
    """
)


RECOVER = textwrap.dedent(
    """
    import sys
    from ctxdb.capture import Recorder

    rec = Recorder(sys.argv[1], tenant="acme", app="chat", agent="helper")
    rec.flush()
    rec.close()
    """
)


def killed_host(landing: Path) -> None:
    """Run HOST until its events are written, then SIGKILL it (its turns left open)."""
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, str(landing)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert host.stdout is not None and host.stdout.readline().strip() == "written"
        os.kill(host.pid, signal.SIGKILL)
    finally:
        host.wait(timeout=30)
    assert host.returncode == -signal.SIGKILL


def test_a_host_killed_mid_turn_is_closed_as_cancelled_by_the_next_start(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    killed_host(landing)
    assert spooled(landing, ".jsonl.part") and spooled(landing, ".lock")

    stats, events = landed(landing, tmp_path / "delta")
    assert "t-open" in set(events["turn_id"])  # its start was published before the kill
    assert events.filter(pl.col("turn_id") == "t-open")["type"].to_list() == ["turn.started"]

    restarted = recorder(landing)
    assert restarted.flush()
    restarted.close()
    assert restarted.stats.recovered_turns == 2
    assert spooled(landing, ".jsonl.part") == [] and spooled(landing, ".lock") == []

    stats, events = landed(landing, tmp_path / "delta")
    assert stats.quarantined == 0
    open_turn = events.filter(pl.col("turn_id") == "t-open").sort("occurred_at", "line_number")
    assert open_turn["type"].to_list() == [
        "turn.started",
        "user.submission",
        "chat.step",
        "turn.closed",
    ]
    closing = open_turn.row(3, named=True)
    assert closing["event_id"] == cancel_event_id("c1", "t-open")
    assert json.loads(closing["payload"]) == {"status": "cancelled", "error_type": "host_crashed"}
    assert events.filter(pl.col("turn_id") == "t-done").height == 4
    quiet = events.filter(pl.col("turn_id") == "t-quiet").sort("occurred_at", "line_number")
    assert quiet["type"].to_list() == ["turn.started", "turn.closed"]
    derive(DeltaStore(str(tmp_path / "delta")), Settings(home=tmp_path))
    logs = DeltaStore(str(tmp_path / "delta")).read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert sorted(logs["turn_id"]) == ["t-done", "t-open", "t-quiet"]

    again = recorder(landing)  # a second start finds nothing left to recover
    assert again.flush()
    again.close()
    assert again.stats.recovered_turns == 0


@pytest.mark.parametrize("point", ["capture:cancelled", "capture:sealed"])
def test_issue_24_finding_7_a_recovery_killed_midway_and_resumed_writes_identical_cancels(
    point: str, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    killed_host(landing)
    # Recovery sees only the unpublished part files: t-open was last heard of in them, or (when a
    # loaded writer published its lines in a rotation) at its start, from the journal.
    unpublished = [
        json.loads(line)
        for part in spooled(landing, ".jsonl.part")
        for line in part.read_bytes().splitlines()
    ]
    heard_in_parts = [e["occurred_at"] for e in unpublished if e["turn_id"] == "t-open"]
    recovery = subprocess.run(
        [sys.executable, "-c", RECOVER, str(landing)],
        env={**os.environ, "CTXDB_FAULT_KILL_AFTER": point},
        cwd=ROOT,
        timeout=60,
    )
    assert recovery.returncode == -signal.SIGKILL  # killed right after `point`
    time.sleep(0.05)  # a later clock: nothing recovery writes may depend on it
    resumed = recorder(landing)
    assert resumed.flush()
    resumed.close()
    assert spooled(landing, ".jsonl.part") == [] and spooled(landing, ".lock") == []

    cancel_ids = {cancel_event_id("c1", "t-open"), cancel_event_id("c2", "t-quiet")}
    cancels = sorted(
        line
        for published in spooled(landing, ".jsonl")
        for line in published.read_bytes().splitlines()
        if json.loads(line)["event_id"] in cancel_ids
    )
    assert len(set(cancels)) == 2, cancels  # one byte string per turn, however often written
    stats, events = landed(landing, tmp_path / "delta")
    assert stats.quarantined == 0
    t_open = events.filter(pl.col("turn_id") == "t-open")
    cancel = t_open.filter(pl.col("event_id") == cancel_event_id("c1", "t-open"))
    started = t_open.filter(pl.col("type") == "turn.started")["occurred_at"].to_list()
    heard = max(map(datetime.fromisoformat, heard_in_parts)) if heard_in_parts else started[0]
    assert cancel["occurred_at"].to_list() == [heard]  # closed when it was last heard of


def test_a_live_writer_is_never_recovered_by_another(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    first = recorder(landing)
    turn = first.turn(user_id="u1", conversation_id="c1", turn_id="t-live")
    assert first.flush()
    second = recorder(landing)
    assert second.flush()
    second.close()
    assert second.stats.recovered_turns == 0
    turn.completion("still mine")
    turn.close()
    first.close()
    _, events = landed(landing, tmp_path / "delta")
    assert payloads(events, "turn.closed") == [{"status": "ok"}]


def test_explicit_ids_and_times_make_a_replay_land_nothing_new(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    at = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

    def record() -> None:
        rec = recorder(landing)
        with rec.turn(
            user_id="u1", conversation_id="c1", turn_id="t1", occurred_at=at, event_id="t1-start"
        ) as turn:
            turn.submission("import me", event_id="t1-prompt", occurred_at=at)
            turn.completion("imported", event_id="t1-answer", occurred_at=at)
            turn.close(event_id="t1-close", occurred_at=at)
        rec.close()

    record()
    first, _ = landed(landing, tmp_path / "delta")
    record()
    again, events = landed(landing, tmp_path / "delta")
    assert first.landed == 4
    assert (again.landed, again.duplicates, again.quarantined) == (0, 4, 0)
    assert events.height == 4


def test_the_react_example_of_the_docs_makes_summary_anchor_and_note_rows(tmp_path: Path) -> None:
    """docs/capture.md's ReAct example, run as written: its turn is rich and derives a summary
    row carrying the anchors and an internal notes row."""
    page = (ROOT / "docs" / "capture.md").read_text()
    section = page.split("### ReAct agents (rich turns)", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    settings = Settings(home=tmp_path)
    namespace: dict = {"Recorder": Recorder, "settings": settings}
    exec(example, namespace)
    namespace["rec"].close()

    store = DeltaStore(settings.delta_uri)
    assert land(store, settings.landing_uri).quarantined == 0
    derive(store, settings)
    rows = store.read(ROLE_ROWS, ROLE_ROWS_SCHEMA)
    summary = rows.filter(pl.col("target") == "summary").row(0, named=True)
    assert summary["text"].startswith("Nightly export timeouts")
    assert "lock wait" in summary["anchors_text"] and "backup job" in summary["anchors_text"]
    notes = rows.filter(pl.col("target") == "notes")
    assert notes.select("text", "visibility").rows() == [
        ("User owns the exporter service, not the backup job.", "internal")
    ]
    logs = store.read(TURN_LOGS, TURN_LOGS_SCHEMA)
    assert logs["recording_kind"].to_list() == ["rich"]


def test_a_part_file_is_published_by_age_while_the_recorder_runs(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    rec = recorder(landing, rotate_age_s=0.3)
    turn = rec.turn(user_id="u1", conversation_id="c1")
    turn.submission("a turn still open when its file is published")
    assert rec.flush()
    deadline = time.monotonic() + 30
    while not spooled(landing, ".jsonl") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(spooled(landing, ".jsonl")) == 1 and spooled(landing, ".jsonl.part") == []
    turn.close()
    rec.close()
    stats, events = landed(landing, tmp_path / "delta")
    assert stats.files == 2  # the file published by age, then the one the close published
    assert sorted(events["type"]) == ["turn.closed", "turn.started", "user.submission"]
    assert spooled(landing, ".open") == [] and spooled(landing, ".lock") == []
