"""Claude Code capture on real transcripts (tests/data/claude_code/SOURCE.md): hooks and an
import write the same bytes whichever runs first; interrupts, task notices, local commands and
compaction; publishing never overwrites; the hook's reads are bounded; capture files are private.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from claude_code_sessions import (
    FIXTURES,
    as_hook_closes,
    fixture_transcripts,
    hook_ids,
    installed_command,
    is_provisional,
    replay,
    run_hook,
)

from ctxdb.capture import part_files
from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.hook import LOCK_TIMEOUT_S, handle
from ctxdb.capture.claude_code.importer import import_transcripts, transcript_events
from ctxdb.capture.claude_code.install import InstallError, hook_config, install
from ctxdb.landing.run import land
from ctxdb.record.records import build_turn
from ctxdb.record.role_rows import role_rows_frame
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS

INTERRUPTED = (
    FIXTURES / "-home-marco-projects-spotter" / "d6e0bada-1959-4eec-a9d2-0bfade768d8f.jsonl"
)
NOTICE_AFTER_INTERRUPT = (
    FIXTURES
    / "-home-USER-projects-spotter-worktrees-spotter-gqc"
    / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
)
SHORT = FIXTURES / "-home-marco-projects-spotter" / "55604662-cf2a-4331-851a-ec234028f8ca.jsonl"
COMPACT = FIXTURES / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"
COMPACTED_MID_TURN = (
    FIXTURES
    / "-Users-alex-workspace-cli--worktrees-1"
    / "0c275b1b-9732-433e-9e70-9b7bfdb578a3.jsonl"
)
TASK_QUEUE = (
    FIXTURES / "-Users-michael-Code-cipher-box" / "12f1f541-2a05-4a60-a551-14b836a1ad82.jsonl"
)
EXPECTED_TURNS = {
    "4d5611e5-241a-462a-8d15-5122611a9569": ["ok", "ok"],
    "258c7280-ae70-4798-800f-63464d01a85d": ["cancelled", "ok"],
    "55604662-cf2a-4331-851a-ec234028f8ca": ["cancelled"],
    "d6e0bada-1959-4eec-a9d2-0bfade768d8f": ["cancelled", "cancelled"],
    "c45af7b1-cb7c-4e51-93db-8cbb250a877a": ["ok"] * 5,
    # two prompts interrupted during a tool use ("[Request interrupted by user for tool use]"),
    # each answered after by the next prompt; /mcp and /exit are local commands
    "e9f146fa-3b20-48d0-9be4-d99ca901cae4": ["cancelled", "ok", "cancelled", "ok"],
    "1af7fc5e-8455-4414-9ccd-011d40f70b2a": ["ok"],  # /init
    # /orchestrator prompts; the sub-agents' prompts (isSidechain) are the tool's, not turns
    "5c0375b4-57a5-4f26-b12d-d022ee4e51b7": ["ok"],
    "fe5e1c67-53e7-4862-81ae-d0e013e3270b": ["ok", "ok"],
    # a turn compacted in its middle and finished (Stop hooks ran), a message queued during it
    "0c275b1b-9732-433e-9e70-9b7bfdb578a3": ["ok", "ok", "ok"],
    # background tasks queued as JSON records; two messages typed into running turns
    "12f1f541-2a05-4a60-a551-14b836a1ad82": ["ok", "cancelled", "ok", "ok", "ok", "ok", "ok"],
}
"""Per fixture session, the status of each turn (a person reading the transcript counts these:
one turn per real prompt; notices and local commands are none)."""


def hook_conf(tmp_path: Path, name: str = "hook", output_chars: int = 0) -> HookConfig:
    return HookConfig(
        spool=str(tmp_path / name / "spool"),
        state=str(tmp_path / name / "state"),
        tenant="local",
        app="claude-code",
        user_id="ann",
        projects=str(tmp_path / "projects"),
        tool_output_chars=output_chars,
    )


def lines_by_id(files: list[Path]) -> dict[str, bytes]:
    """Every event line of `files` by event id (a repeated id must repeat the same bytes)."""
    out: dict[str, bytes] = {}
    for path in files:
        for line in path.read_bytes().splitlines():
            event_id = json.loads(line)["event_id"]
            assert out.setdefault(event_id, line) == line, event_id
    return out


def import_lines(transcript: Path, config: HookConfig) -> dict[str, bytes]:
    """The import's event lines by id, its provisional close of the last turn as the hook writes
    it when Claude Code ends that turn (`as_hook_closes`)."""
    mapped = transcript_events(
        transcript, config.identity, settle_s=0, output_chars=config.tool_output_chars
    )
    events = [as_hook_closes(e) for e in mapped.events]
    return {json.loads(x)["event_id"]: x for x in part_files.encode(events).splitlines()}


@pytest.mark.parametrize("output_chars", [0, 2000], ids=["no-output", "output"])
@pytest.mark.parametrize("source", fixture_transcripts(), ids=lambda p: p.stem[:8])
def test_hooks_and_import_write_identical_events_on_real_transcripts(
    tmp_path: Path, source: Path, output_chars: int
) -> None:
    """Byte-identical with tool output capture off and on (steps with and without `output`)."""
    config = hook_conf(tmp_path, output_chars=output_chars)
    transcript = replay(source, tmp_path / "projects", lambda p: handle(p, config))
    spool_dir = Path(config.spool)
    assert not list(spool_dir.glob("*.part"))
    hooked = lines_by_id(sorted(spool_dir.rglob("*.jsonl")))
    imported = import_lines(transcript, config)
    assert hooked == imported  # byte for byte, every event

    events = [json.loads(x) for x in imported.values()]
    steps = [e["payload"] for e in events if e["type"] == "chat.step"]
    assert any("output" in p for p in steps) == bool(output_chars and steps)
    closed = [e["payload"]["status"] for e in events if e["type"] == "turn.closed"]
    assert closed == EXPECTED_TURNS[source.stem]
    prompts = [e["payload"]["text"] for e in events if e["type"] == "user.submission"]
    assert not [p for p in prompts if p.startswith(("<task-notification>", "/mcp", "/compact"))]
    for event in events:
        if event["type"] == "turn.closed" and event["payload"]["status"] == "cancelled":
            assert event["payload"] == {"status": "cancelled", "error_type": "interrupted"}


def test_a_notice_after_an_interrupt_never_starts_a_turn(tmp_path: Path) -> None:
    """258c7280: the user interrupts a tool use, a background task's notice arrives and the
    main work goes on from it: that work stays in the interrupted turn; the notice after the
    final Stop is answered but makes no turn."""
    events = transcript_events(NOTICE_AFTER_INTERRUPT, hook_conf(tmp_path).identity, settle_s=0)
    turns: dict[str, list[dict]] = {}
    for event in events.events:
        turns.setdefault(event["turn_id"], []).append(event)
    first, follow_up = turns.values()
    assert first[1]["payload"]["text"] == "Implement spotter-gqc"
    assert first[-1]["payload"] == {"status": "cancelled", "error_type": "interrupted"}
    assert first[-2]["payload"]["text"].startswith("All done. The **spotter-gqc** epic")
    assert sum(e["type"] == "chat.step" for e in first) == 185
    assert follow_up[1]["payload"]["text"] == "did you push?"
    steers = [e["payload"]["text"] for e in first if e["payload"].get("event_type") == "steer"]
    assert steers == ["check again", "new beads for the epic were added. tackle them"]
    assert "stale background task" not in json.dumps(events.events)


def test_a_turn_compacted_midway_and_finished_is_answered_with_its_queued_message(
    tmp_path: Path,
) -> None:
    """0c275b1b (Claude Code 2.1.33): the context is compacted while a `Read` of the turn "yes"
    waits for its result, which no line ever holds; the turn goes on and ends with its Stop
    hooks and an answer: answered, that step `unknown` (not interrupted). A message the user
    typed meanwhile is `remove`d from the queue into the running turn and has no user line of
    its own: it is that turn's steer, a user row of its own."""
    events = transcript_events(COMPACTED_MID_TURN, hook_conf(tmp_path).identity, settle_s=0)
    by_turn: dict[str, list[dict]] = {}
    for event in events.events:
        event = {**event, "occurred_at": datetime.fromisoformat(event["occurred_at"])}
        by_turn.setdefault(event["turn_id"], []).append(event)
    compacted = next(g for g in by_turn.values() if g[1]["payload"]["text"] == "yes")
    assert compacted[-1]["payload"] == {"status": "ok"}
    steps = {
        e["payload"]["step"]: e["payload"]["status"]
        for e in compacted[2:]
        if e["type"] == "chat.step"
    }
    assert steps.pop("toolu_015zkzYfNNibwzt9v8r41e1k") == "unknown"
    assert set(steps.values()) == {"ok", "error"}  # the rest returned (one Edit failed)
    steer = [e["payload"] for e in compacted if e["payload"].get("event_type") == "steer"]
    assert [s["text"][:40] for s in steer] == ["cheeky scope creep item - is it possible"]
    turns = [build_turn(group) for group in by_turn.values()]
    rows = role_rows_frame(turns, Settings(home=tmp_path / "home"), datetime.now(UTC))
    users = rows.filter((pl.col("role") == "user") & (pl.col("turn_id") == compacted[0]["turn_id"]))
    assert any("wire up the state machine" in text for text in users["text"])


def test_queued_background_task_records_are_not_steers_and_typed_messages_are(
    tmp_path: Path,
) -> None:
    """12f1f541 (Claude Code 2.1.49): four background tasks are queued as JSON records and
    removed into their turns unnamed; the two messages the user typed meanwhile are the only
    steers, each in the turn it was typed into, and no user text holds a task record."""
    events = transcript_events(TASK_QUEUE, hook_conf(tmp_path).identity, settle_s=0).events
    submissions = [e for e in events if e["type"] == "user.submission"]
    steers = [
        (e["turn_id"], e["payload"]["text"])
        for e in submissions
        if e["payload"].get("event_type") == "steer"
    ]
    asked = {e["payload"]["text"]: e["turn_id"] for e in submissions}
    turn = asked["why is the agent executing weird pythin?"]
    assert steers == [
        (turn, "is the pencil mcp down?"),
        (turn, "I still dont understand why the sub agent is unable to interact with pencil mcp?"),
    ]
    assert not [text for text in asked if "task_id" in text]


def test_an_interrupted_turn_shows_cancelled_with_no_invented_answer(tmp_path: Path) -> None:
    config = hook_conf(tmp_path)
    events = transcript_events(INTERRUPTED, config.identity, settle_s=0).events
    by_turn: dict[str, list[dict]] = {}
    for event in events:
        event = {**event, "occurred_at": datetime.fromisoformat(event["occurred_at"])}
        by_turn.setdefault(event["turn_id"], []).append(event)
    turns = [build_turn(group) for group in by_turn.values()]
    silent = turns[1]  # interrupted before any text: no completion event at all
    final = [b for b in silent.blocks if b["type"] == "assistant.completion"][-1]
    assert (final["text"], final["meta"]["cancelled"], silent.error) == ("", True, False)
    assert "An error occurred." not in json.dumps([t.blocks for t in turns])
    rows = role_rows_frame(turns, Settings(home=tmp_path / "home"), datetime.now(UTC))
    assistant = rows.filter(pl.col("role") == "assistant")
    assert assistant["turn_id"].to_list() == [turns[0].turn_id]  # the real partial answer only
    assert assistant["text"][0].startswith("Phoenix server is starting in the background.")


def landed(settings: Settings) -> pl.DataFrame:
    return DeltaStore(settings.delta_uri).read(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA)


@pytest.mark.parametrize("hooks_first", [True, False], ids=["hooks-first", "import-first"])
def test_hooks_and_import_land_without_conflicts_in_either_order(
    tmp_path: Path, hooks_first: bool
) -> None:
    """The interrupted sessions through the real hook process (as Claude Code runs it) and an
    import of the same transcripts: landed in either order, nothing is quarantined and every
    turn ends at the transcript's time."""
    settings = Settings(
        home=tmp_path / "home", claude_code={"user_id": "ann", "projects": str(tmp_path)}
    )
    command = installed_command(settings, tmp_path / "shop")
    config = hook_config(settings)
    projects = tmp_path / "projects"
    written = [
        replay(source, projects, lambda p: run_hook(command, p)) for source in (SHORT, INTERRUPTED)
    ]
    store = DeltaStore(settings.delta_uri)
    if hooks_first:
        hooked = land(store, settings.landing_uri)
    stats = import_transcripts(written, Path(config.spool).parent, config.identity, settle_s=0)
    both = land(store, settings.landing_uri)
    everything = landed(settings)
    inferred = everything.filter(pl.col("payload").map_elements(is_provisional, pl.Boolean))
    if hooks_first:  # the import adds only its provisional close of each last turn
        assert (hooked.quarantined, both.quarantined, both.landed) == (0, 0, inferred.height)
        assert both.duplicates == stats.events - inferred.height
    else:
        assert both.quarantined == 0 and both.landed == stats.events + inferred.height
    events = everything.join(inferred, on="event_id", how="anti")
    assert events.height == stats.events == 19
    rows = inferred.select("event_id", "payload").to_dicts()
    assert rows and hook_ids(rows) <= set(events["event_id"])  # the hook's own close supersedes
    closed = events.filter(pl.col("type") == "turn.closed").sort("occurred_at")
    assert [json.loads(p)["status"] for p in closed["payload"]] == ["cancelled"] * 3
    ends = [t.isoformat() for t in closed["occurred_at"]]
    assert ends == [
        "2026-02-10T21:12:02.480000+00:00",
        "2026-02-10T22:58:03.831000+00:00",
        "2026-02-10T22:59:46.748000+00:00",
    ]  # the interrupts' transcript times, never the clock


def test_a_stop_before_its_answer_is_written_leaves_the_turn_to_the_transcript(
    tmp_path: Path,
) -> None:
    """Claude Code may run Stop before the answer line reaches the transcript: the hook waits
    for it a moment, then leaves the turn open for the `stop_hook_summary` line to close."""
    config = hook_conf(tmp_path)
    raw = COMPACT.read_bytes().splitlines(keepends=True)
    target = tmp_path / "projects" / "w" / COMPACT.name
    target.parent.mkdir(parents=True)
    answer = json.loads(raw[6])["message"]["content"][0]["text"]  # the first turn's answer
    target.write_bytes(b"".join(raw[:6]))
    base = {"session_id": COMPACT.stem, "transcript_path": str(target), "cwd": "/workspace"}
    start = time.monotonic()
    late = handle({**base, "hook_event_name": "Stop", "last_assistant_message": answer}, config)
    assert 0.9 < time.monotonic() - start < 3
    assert "turn.closed" not in {e["type"] for e in late}
    assert not list(Path(config.spool).rglob("*.jsonl"))  # nothing published yet
    target.write_bytes(b"".join(raw))
    handle({**base, "hook_event_name": "SessionEnd"}, config)
    hooked = lines_by_id(sorted(Path(config.spool).rglob("*.jsonl")))
    assert hooked == import_lines(target, config)


def test_a_local_command_makes_no_turn_even_when_stop_follows(tmp_path: Path) -> None:
    """d6e0bada: `/mcp` runs as a local command after an interrupted turn; its
    UserPromptSubmit, and a Stop after it, make no turn (an import makes none)."""
    config = hook_conf(tmp_path)
    raw = INTERRUPTED.read_bytes().splitlines(keepends=True)
    command = next(i for i, line in enumerate(raw) if b"<command-name>/mcp" in line)
    target = tmp_path / "projects" / "p" / INTERRUPTED.name
    target.parent.mkdir(parents=True)
    target.write_bytes(b"".join(raw[:command]))
    base = {"session_id": INTERRUPTED.stem, "transcript_path": str(target), "cwd": "/w"}
    submitted = handle({**base, "hook_event_name": "UserPromptSubmit", "prompt": "/mcp"}, config)
    assert [e["type"] for e in submitted][-1] == "turn.closed"  # the interrupted turn before it
    target.write_bytes(b"".join(raw[: command + 3]))  # the command and its output
    assert handle({**base, "hook_event_name": "Stop", "last_assistant_message": ""}, config) == []
    target.write_bytes(b"".join(raw))
    handle({**base, "hook_event_name": "SessionEnd"}, config)
    hooked = lines_by_id(sorted(Path(config.spool).rglob("*.jsonl")))
    assert hooked == import_lines(target, config)
    prompts = [json.loads(x)["payload"].get("text") for x in hooked.values()]
    assert "/mcp" not in prompts


def test_a_hook_killed_between_publish_and_state_save_loses_nothing(tmp_path: Path) -> None:
    """Each Stop publishes a file, then dies before saving the session state (the state file
    is put back as it was): the next hooks publish under new names, nothing is overwritten."""
    config = hook_conf(tmp_path)
    state = Path(config.state) / "sessions" / f"{COMPACT.stem}.json"

    def killed_after_publish(payload: dict) -> None:
        before = state.read_bytes() if state.exists() else None
        handle(payload, config)
        if payload["hook_event_name"] == "Stop" and before is not None:
            state.write_bytes(before)

    transcript = replay(COMPACT, tmp_path / "projects", killed_after_publish)
    files = sorted(Path(config.spool).rglob("*.jsonl"))
    assert len(files) > 5 and len({f.name for f in files}) == len(files)
    assert lines_by_id(files) == import_lines(transcript, config)
    store = DeltaStore(str(tmp_path / "delta"))
    result = land(store, str(Path(config.spool).parent))
    assert result.quarantined == 0 and result.landed == len(import_lines(transcript, config))


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[str, Settings, Path]:
    settings = Settings(
        home=tmp_path / "home",
        claude_code={"user_id": "ann", "projects": str(tmp_path / "projects")},
    )
    return installed_command(settings, tmp_path / "shop"), settings, tmp_path / "projects"


MEASURE = (
    "import resource, subprocess, sys, time\n"
    "start = time.monotonic()\n"
    "done = subprocess.run(sys.argv[1], shell=True, stdin=sys.stdin, capture_output=True)\n"
    "assert (done.returncode, done.stdout, done.stderr) == (0, b'', b''), done\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(time.monotonic() - start, peak / 1024)\n"
)


def timed_hook(command: str, payload: dict) -> tuple[float, float]:
    """Run the hook as Claude Code does; its wall time (s) and peak memory (MB)."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, command],
        input=json.dumps(payload).encode(),
        capture_output=True,
        check=True,
    )
    seconds, megabytes = done.stdout.split()
    return float(seconds), float(megabytes)


def test_the_hook_reads_only_bounded_regular_transcripts_of_its_session(
    hostile: tuple[str, Settings, Path], tmp_path: Path
) -> None:
    command, settings, projects = hostile
    session = "5e551011-0000-4000-8000-000000000001"
    folder = projects / "p"
    folder.mkdir(parents=True)
    fifo = folder / f"{session}.jsonl"
    os.mkfifo(fifo)
    elsewhere = tmp_path / "other" / f"{session}.jsonl"
    elsewhere.parent.mkdir()
    shutil.copy(INTERRUPTED, elsewhere)
    neighbour = folder / INTERRUPTED.name
    shutil.copy(INTERRUPTED, neighbour)
    linked = projects / "q" / f"{session}.jsonl"
    linked.parent.mkdir()
    huge = projects / "r" / f"{session}.jsonl"
    huge.parent.mkdir()
    with huge.open("wb") as file:
        file.truncate(2 * 1024**3)  # 2 GB of zeros: no line ends at all
    cases = {
        "/dev/zero": ("/dev/zero", "is not named"),
        "fifo": (str(fifo), "not a regular file"),
        "link out of the projects folder": (str(linked), "outside"),
        "link to another session": (str(linked), "is not named"),
        "2 GB": (str(huge), None),
    }
    log = Path(hook_config(settings).state) / "hook.log"
    for name, (path, reason) in cases.items():
        if name.startswith("link"):
            linked.unlink(missing_ok=True)
            linked.symlink_to(elsewhere if "out of" in name else neighbour)
        for event in ("UserPromptSubmit", "Stop"):
            payload = {"session_id": session, "transcript_path": path, "cwd": "/w"}
            payload |= {"hook_event_name": event, "prompt": "hi"}
            seconds, megabytes = timed_hook(command, payload)
            assert seconds < 3 and megabytes < 200, (name, seconds, megabytes)
        if reason:
            assert reason in log.read_text(), name
    spool = Path(hook_config(settings).spool)
    spooled = b"".join(p.read_bytes() for p in spool.rglob("*") if p.is_file())
    assert b"phoenix" not in spooled.lower()  # no other session's transcript was copied


def test_a_held_session_lock_times_out_and_nothing_is_lost(
    hostile: tuple[str, Settings, Path],
) -> None:
    command, settings, projects = hostile
    transcript = projects / "p" / INTERRUPTED.name
    transcript.parent.mkdir(parents=True)
    shutil.copy(INTERRUPTED, transcript)
    config = hook_config(settings)
    lock = Path(config.state) / "sessions" / f"{INTERRUPTED.stem}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    payload = {"session_id": INTERRUPTED.stem, "transcript_path": str(transcript), "cwd": "/w"}
    with lock.open("a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        waited, _ = timed_hook(command, {**payload, "hook_event_name": "SessionEnd"})
    assert LOCK_TIMEOUT_S <= waited < LOCK_TIMEOUT_S + 3
    assert "stayed locked" in (Path(config.state) / "hook.log").read_text()
    run_hook(command, {**payload, "hook_event_name": "SessionEnd"})
    hooked = lines_by_id(sorted(Path(config.spool).rglob("*.jsonl")))
    assert hooked == import_lines(transcript, config)


def test_capture_files_are_private_to_the_account(hostile: tuple[str, Settings, Path]) -> None:
    command, settings, projects = hostile
    replay(INTERRUPTED, projects, lambda p: run_hook(command, p))
    run_hook(command, b"not json")  # logged to hook.log
    config = hook_config(settings)
    home = Path(config.state)
    paths = [*home.rglob("*"), *Path(config.spool).parent.rglob("*")]
    assert any(p.name == "hook.log" for p in paths) and any(p.suffix == ".jsonl" for p in paths)
    modes = {str(p): p.stat().st_mode & 0o777 for p in [home, Path(config.spool), *paths]}
    assert {m for p, m in modes.items() if Path(p).is_dir()} == {0o700}
    assert {m for p, m in modes.items() if Path(p).is_file()} == {0o600}
    stats = import_transcripts(
        [INTERRUPTED], Path(config.spool).parent, config.identity, settle_s=0
    )
    assert stats.written == 1
    imported = next((Path(config.spool).parent / "import").rglob("*.jsonl"))
    assert imported.stat().st_mode & 0o777 == 0o600


def test_install_writes_through_a_symlinked_settings_file(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    dotfiles = tmp_path / "dotfiles" / "claude.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps({"model": "opus"}))
    target = tmp_path / "p" / ".claude" / "settings.local.json"
    target.parent.mkdir(parents=True)
    target.symlink_to(dotfiles)
    install(settings, project=tmp_path / "p")
    assert target.is_symlink()
    data = json.loads(dotfiles.read_text())
    assert data["model"] == "opus" and set(data["hooks"]) >= {"Stop", "PostToolUse"}


@pytest.mark.parametrize(
    "hooks", [{"Stop": {"hooks": []}}, {"PostToolUse": "prettier"}, ["not", "an", "object"]]
)
def test_install_refuses_hook_values_it_would_drop(tmp_path: Path, hooks: object) -> None:
    settings = Settings(home=tmp_path / "home")
    target = tmp_path / "p" / ".claude" / "settings.local.json"
    target.parent.mkdir(parents=True)
    original = json.dumps({"hooks": hooks}, indent=4)
    target.write_text(original)
    with pytest.raises(InstallError, match="not (a list|an object); left unchanged"):
        install(settings, project=tmp_path / "p")
    assert target.read_text() == original


def test_fixture_sources_are_recorded() -> None:
    source = (FIXTURES / "SOURCE.md").read_text()
    for path in fixture_transcripts():
        assert path.stem[:8] in source and path.parent.name in source
    assert subprocess.run(["git", "check-ignore", "-q", str(FIXTURES)]).returncode == 1
