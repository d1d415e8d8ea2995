"""Claude Code capture through the real hook process, install/uninstall, and the importer:
hooks and an import of the same session land each turn once; the hook never disturbs Claude Code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from claude_code_sessions import (
    Session,
    cli_install,
    coding_session,
    final_answers,
    hook_ids,
    installed_command,
    is_provisional,
    play,
    run_hook,
)
from typer.testing import CliRunner

from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.importer import find_transcripts, import_transcripts
from ctxdb.capture.claude_code.install import (
    InstallError,
    add_hooks,
    config_path,
    hook_config,
    install,
    remove_hooks,
    uninstall,
)
from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.landing import partitions
from ctxdb.landing.run import land
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import RAW_EVENTS_SCHEMA, RAW_TURN_EVENTS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def capture(tmp_path: Path) -> Settings:
    """Settings of a fresh home whose Claude Code turns belong to `ann`; the hook reads
    transcripts anywhere under `tmp_path`."""
    return Settings(
        home=tmp_path / "home", claude_code={"user_id": "ann", "projects": str(tmp_path)}
    )


def landed_events(settings: Settings) -> pl.DataFrame:
    return DeltaStore(settings.delta_uri).read(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA)


def test_hooks_then_import_land_each_turn_once(capture: Settings, tmp_path: Path) -> None:
    project = tmp_path / "shop"
    command = installed_command(capture, project)
    transcripts = tmp_path / "claude" / "projects" / "-tmp-shop"
    session, turn_ids = coding_session(transcripts / "s1.jsonl", str(project))
    started = partitions.name(datetime.now(UTC))
    play(session, command, final_answers(session))

    config = hook_config(capture)
    assert not list(Path(config.spool).glob("*.part"))
    published = sorted(Path(config.spool).rglob("*.jsonl"))
    assert len(published) == 2  # one file per closed turn
    days = {started, partitions.name(datetime.now(UTC))}  # the day the turns were published
    assert {p.parent for p in published} <= {Path(config.spool) / day for day in days}
    store = DeltaStore(capture.delta_uri)
    first = land(store, capture.landing_uri)
    assert first.quarantined == 0 and first.landed > 0
    events = landed_events(capture)
    closed = events.filter(pl.col("type") == "turn.closed")
    assert sorted(closed["turn_id"]) == sorted(turn_ids)
    assert set(events["user_id"]) == {"ann"} and set(events["agent"]) == {
        str(project).strip("/").replace("/", "-")
    }
    steps = [json.loads(p) for p in events.filter(pl.col("type") == "chat.step")["payload"]]
    assert sorted((p["tool"], p["status"]) for p in steps) == [
        ("Bash", "error"),
        ("Edit", "ok"),
        ("Read", "ok"),
    ]

    stats = import_transcripts(
        find_transcripts(tmp_path / "claude"),
        Path(config.spool).parent,
        config.identity,
        settle_s=0,
    )
    assert (stats.files, stats.turns, stats.bad_lines, stats.written) == (1, 2, 0, 1)
    again = land(store, capture.landing_uri)
    inferred = store.read(RAW_TURN_EVENTS, RAW_EVENTS_SCHEMA).filter(
        pl.col("payload").map_elements(is_provisional, pl.Boolean)
    )  # the import's close of the last turn no line ended, which the hook's close supersedes
    assert (again.files, again.landed, again.quarantined) == (1, inferred.height, 0)
    assert again.duplicates == stats.events - inferred.height
    rows = inferred.select("event_id", "payload").to_dicts()
    assert rows and hook_ids(rows) <= set(events["event_id"])  # the hook's own close supersedes

    reimport = import_transcripts(
        find_transcripts(tmp_path / "claude"),
        Path(config.spool).parent,
        config.identity,
        settle_s=0,
    )
    assert (reimport.written, reimport.unchanged) == (0, 1)
    assert land(store, capture.landing_uri).files == 0
    assert landed_events(capture).height == events.height + inferred.height


def test_parallel_tool_hooks_of_one_session_record_each_step_once(
    capture: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    command = installed_command(capture, project)
    session = Session(tmp_path / "t" / "s.jsonl", str(project))
    session.prompt("grep for TODOs in every package")
    msg = session.new_message()
    tools = [session.tool_use("Grep", {"pattern": f"TODO{i}"}, msg) for i in range(6)]
    for tool in tools:
        session.tool_result(tool, "none")
    session.write()
    payloads = [
        session.payload("PostToolUse", tool_name="Grep", tool_input={}, tool_use_id=t)
        for t in tools
    ]
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda p: run_hook(command, p), payloads))
    session.text("No TODOs left.")
    session.write()
    run_hook(command, session.payload("Stop"))
    land(DeltaStore(capture.delta_uri), capture.landing_uri)
    steps = landed_events(capture).filter(pl.col("type") == "chat.step")
    assert sorted(steps["event_id"]) == sorted(f"cc-{t}" for t in tools)
    raw = b"".join(p.read_bytes() for p in Path(hook_config(capture).spool).rglob("*.jsonl"))
    assert raw.count(b'"type":"chat.step"') == 6  # written once each, not only deduplicated


def test_without_a_transcript_the_hook_still_records_the_turn(
    capture: Settings, tmp_path: Path
) -> None:
    command = installed_command(capture, tmp_path / "shop")
    base = {"session_id": "s-9", "cwd": str(tmp_path / "shop"), "transcript_path": ""}
    run_hook(command, {**base, "hook_event_name": "UserPromptSubmit", "prompt": "hello there"})
    run_hook(
        command,
        {**base, "hook_event_name": "Stop", "last_assistant_message": "General Kenobi"},
    )
    land(DeltaStore(capture.delta_uri), capture.landing_uri)
    events = landed_events(capture)
    assert events["type"].to_list() == [
        "turn.started",
        "user.submission",
        "assistant.completion",
        "turn.closed",
    ]
    assert events["turn_id"][0].startswith("h") and set(events["conversation_id"]) == {"s-9"}
    log = (Path(hook_config(capture).state) / "hook.log").read_text()
    assert "no transcript" in log


def test_a_session_killed_mid_turn_is_closed_by_its_next_hook(
    capture: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    command = installed_command(capture, project)
    session = Session(tmp_path / "t" / "s.jsonl", str(project))
    cut = session.prompt("bump every dependency")
    msg = session.new_message()
    session.text("Bumping them one by one.", msg)
    first = session.tool_use("Bash", {"command": "uv lock -P httpx"}, msg)
    session.write()
    run_hook(command, session.payload("PostToolUse", tool_name="Bash", tool_use_id=first))
    session.tool_result(first, "ok")
    session.tool_use("Bash", {"command": "uv lock -P pydantic"}, session.new_message())
    session.write()  # ... and here Claude Code is killed: no Stop, no SessionEnd
    spool_dir = Path(hook_config(capture).spool)
    assert [p.suffix for p in spool_dir.iterdir()] == [".part"]

    session.prompt("where were we?")  # the session is resumed
    run_hook(command, session.payload("UserPromptSubmit", prompt="where were we?"))
    land(DeltaStore(capture.delta_uri), capture.landing_uri)
    events = landed_events(capture).filter(pl.col("turn_id") == cut)
    assert events["type"].to_list() == [
        "turn.started",
        "user.submission",
        "chat.step",
        "chat.step",
        "assistant.completion",
        "turn.closed",
    ]
    closed = json.loads(events["payload"][-1])
    assert closed == {"status": "cancelled", "error_type": "interrupted"}


@pytest.mark.parametrize(
    ("payload", "cause"),
    [
        (b"this is not json", "payload is not JSON"),
        (b"[1, 2]", "payload is not a JSON object"),
        (b'{"hook_event_name": "Stop"}', "Stop payload has no session_id"),
    ],
)
def test_bad_payloads_are_logged_and_never_disturb_claude_code(
    capture: Settings, tmp_path: Path, payload: bytes, cause: str
) -> None:
    command = installed_command(capture, tmp_path / "shop")
    run_hook(command, payload)
    assert cause in (Path(hook_config(capture).state) / "hook.log").read_text()


def test_an_unwritable_spool_is_logged_and_the_turn_is_kept_for_later(
    capture: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    command = installed_command(capture, project)
    config = hook_config(capture)
    spool_dir = Path(config.spool)
    spool_dir.rmdir()
    spool_dir.write_text("a file where the spool folder should be")  # mkdir/open fail, even as root
    session = Session(tmp_path / "t" / "s.jsonl", str(project))
    session.prompt("rename the package")
    session.text("Renamed it.")
    session.write()
    run_hook(command, session.payload("Stop"))
    assert f"File exists: '{spool_dir}'" in (Path(config.state) / "hook.log").read_text()

    spool_dir.unlink()
    spool_dir.mkdir()
    run_hook(command, session.payload("SessionEnd", reason="other"))
    land(DeltaStore(capture.delta_uri), capture.landing_uri)
    assert "turn.closed" in landed_events(capture)["type"].to_list()


def test_opted_out_projects_are_not_captured(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    settings = Settings(home=tmp_path / "home", claude_code={"exclude": [str(secret)]})
    command = installed_command(settings, secret / "sub")
    session = Session(tmp_path / "t" / "s.jsonl", str(secret / "sub"))
    session.prompt("the password is hunter2")
    session.text("Noted.")
    session.write()
    run_hook(command, session.payload("Stop"))
    config = hook_config(settings)
    assert list(Path(config.spool).iterdir()) == []
    stats = import_transcripts(
        [session.path],
        Path(config.spool).parent,
        config.identity,
        settle_s=0,
        excluded=config.excludes,
    )
    assert (stats.skipped, stats.events) == (1, 0)
    assert not (Path(config.spool).parent / "import").exists()


def test_install_is_idempotent_keeps_other_settings_and_uninstall_is_exact(
    capture: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    target = project / ".claude" / "settings.local.json"
    target.parent.mkdir(parents=True)
    original = {
        "permissions": {"allow": ["Bash(npm test)"]},
        "hooks": {
            "PostToolUse": [
                {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "prettier"}]}
            ],
            "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
        },
        "model": "opus",
    }
    target.write_text(json.dumps(original, indent=4))
    install(capture, project=project)
    once = target.read_text()
    assert install(capture, project=project).changed is False
    assert target.read_text() == once
    data = json.loads(once)
    assert data["permissions"] == original["permissions"] and data["model"] == "opus"
    assert data["hooks"]["PostToolUse"][0] == original["hooks"]["PostToolUse"][0]
    assert data["hooks"]["PostToolUse"][1]["matcher"] == "*"
    assert set(data["hooks"]) == {
        "PostToolUse",
        "Notification",
        "UserPromptSubmit",
        "Stop",
        "SessionEnd",
    }
    assert HookConfig.load(config_path(capture)).user_id == "ann"

    change = uninstall(project=project)
    assert (change.changed, change.entries) == (True, 4)
    assert json.loads(target.read_text()) == original
    assert uninstall(project=project).changed is False


def test_uninstall_removes_a_settings_file_install_created(
    capture: Settings, tmp_path: Path
) -> None:
    target = tmp_path / "p" / ".claude" / "settings.local.json"
    install(capture, project=tmp_path / "p")
    assert target.exists()
    uninstall(project=tmp_path / "p")
    assert not target.exists()


def test_install_refuses_a_settings_file_that_is_not_json(
    capture: Settings, tmp_path: Path
) -> None:
    target = tmp_path / "p" / ".claude" / "settings.local.json"
    target.parent.mkdir(parents=True)
    target.write_text("{ broken")
    with pytest.raises(InstallError, match="not valid JSON"):
        install(capture, project=tmp_path / "p")
    assert target.read_text() == "{ broken"


def test_install_refuses_a_remote_storage_root_and_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook writes local files: with the data on an object store, `install` exits 2 with
    one line that says which variable put it there, and writes nothing."""
    monkeypatch.setenv("CTXDB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CTXDB_STORAGE_ROOT", "s3://bucket/ctxdb")
    project = tmp_path / "p"
    _register_all()
    result = CliRunner().invoke(
        app, ["capture", "claude-code", "install", "--project", str(project)]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: the hook writes local files; landing is s3://bucket/ctxdb/landing"
        " (CTXDB_STORAGE_ROOT): unset CTXDB_STORAGE_ROOT or point it at a local folder"
    ]
    assert not project.exists()


def test_hooks_of_other_tools_sharing_a_group_survive() -> None:
    mine = "ctxdb capture claude-code hook --config /x"
    shared = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}
    shared["hooks"]["Stop"][0]["hooks"].append({"type": "command", "command": mine})
    cleaned, removed = remove_hooks(shared)
    assert removed == 1
    assert cleaned == {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}
    assert remove_hooks(add_hooks({}, mine)) == ({}, 4)


def test_cli_install_import_and_project(capture: Settings, tmp_path: Path, monkeypatch) -> None:
    project = tmp_path / "shop"
    runner, result = cli_install(capture.home, project, monkeypatch)
    assert "user 'ann'" in result.output
    both = runner.invoke(app, ["capture", "claude-code", "install", "--user", "--project", "x"])
    assert both.exit_code == 2

    session, _ = coding_session(tmp_path / "projects" / "-shop" / "s.jsonl", str(project))
    session.write()
    with session.path.open("a") as file:
        file.write("{garbage\n")
        file.write(json.dumps(session.lines[0])[:30])
    result = runner.invoke(
        app, ["import", "claude-code", str(tmp_path / "projects"), "--settle-s", "0"]
    )
    assert result.exit_code == 0, result.output
    assert "1 transcripts" in result.output
    assert "(1 unreadable, 1 cut off), 2 turns" in result.output
    result = runner.invoke(app, ["capture", "claude-code", "project", str(project)])
    assert result.output.strip() == str(project).strip("/").replace("/", "-")
    missing = runner.invoke(app, ["import", "claude-code", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2


def test_the_hook_path_imports_nothing_heavy() -> None:
    heavy = ["pydantic", "polars", "torch", "dagster", "elasticsearch", "typer", "numpy"]
    script = (
        "import sys; sys.argv = ['ctxdb']; import ctxdb.cli, ctxdb.capture.claude_code.hook\n"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
