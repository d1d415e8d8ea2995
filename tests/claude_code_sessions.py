"""Claude Code transcripts and hook payloads for the capture tests, in the documented shapes.

Transcript lines follow the public descriptions of `~/.claude/projects/<project>/<session>.jsonl`
(neilberkman/ccrider research/schema.md, simonw/claude-code-transcripts, elct9620/cc-langfuse
docs/transcript.md): user | assistant | system | summary | file-history-snapshot lines with
`uuid`, `parentUuid`, `sessionId`, `timestamp`, `cwd`, `gitBranch`, `isSidechain`, `isMeta`,
`message{role, content}`; one assistant line per content block sharing `message.id`; tool results
as user lines with `tool_result` blocks (plus `toolUseResult`). Hook payloads follow
code.claude.com/docs/en/hooks (common fields session_id, transcript_path, cwd, hook_event_name).
`installed_command`, `run_hook` and `play` install the hooks and replay a session through the real
hook process, the way Claude Code runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from ctxdb.capture.claude_code.install import install
from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.settings import Settings


def transcript_line(
    kind: str,
    message: dict[str, Any],
    parent: str | None,
    cwd: str,
    session_id: str,
    timestamp: str,
    **extra: Any,
) -> dict[str, Any]:
    """A user or assistant line of a session's transcript, with a new `uuid`, after `parent`."""
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session_id,
        "version": "2.0.29",
        "gitBranch": "main",
        "type": kind,
        "message": message,
        "uuid": str(uuid.uuid4()),
        "timestamp": timestamp,
        **extra,
    }


@dataclass
class Session:
    """A Claude Code session being written: transcript lines and the hook payloads they imply."""

    path: Path
    cwd: str
    session_id: str = ""
    """The session id; by default the transcript's file name (`<session_id>.jsonl`), the way
    Claude Code names it and the hook requires."""
    start: datetime = field(default_factory=lambda: datetime(2026, 11, 20, 9, 0, tzinfo=UTC))
    lines: list[dict[str, Any]] = field(default_factory=list)
    _parent: str | None = None
    _clock: int = 0
    _msg: int = 0
    _tool: int = 0

    def __post_init__(self) -> None:
        self.session_id = self.session_id or self.path.stem

    def _ts(self) -> str:
        self._clock += 1
        moment = self.start + timedelta(seconds=self._clock)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def _line(self, kind: str, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        line = transcript_line(
            kind, message, self._parent, self.cwd, self.session_id, self._ts(), **extra
        )
        if not extra.get("isSidechain"):
            self._parent = line["uuid"]
        self.lines.append(line)
        return line

    def prompt(self, text: str) -> str:
        """A real user prompt; returns its uuid (the turn id)."""
        return self._line("user", {"role": "user", "content": text})["uuid"]

    def prompt_with_image(self, text: str) -> str:
        content = [
            {"type": "text", "text": text},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}},
        ]
        return self._line("user", {"role": "user", "content": content})["uuid"]

    def _assistant(self, block: dict[str, Any], msg_id: str) -> dict[str, Any]:
        message = {
            "model": "claude-sonnet-4-5-20250929",
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        return self._line("assistant", message, requestId=f"req_{msg_id}")

    def new_message(self) -> str:
        self._msg += 1
        return f"msg_{self.session_id[:8]}_{self._msg:04d}"

    def thinking(self, text: str, msg_id: str) -> None:
        self._assistant({"type": "thinking", "thinking": text, "signature": "sig"}, msg_id)

    def text(self, text: str, msg_id: str | None = None) -> str:
        msg_id = msg_id or self.new_message()
        self._assistant({"type": "text", "text": text}, msg_id)
        return msg_id

    def tool_use(self, name: str, tool_input: dict[str, Any], msg_id: str) -> str:
        self._tool += 1
        tool_id = f"toolu_{self.session_id[:8]}{self._tool:04d}"
        block = {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}
        self._assistant(block, msg_id)
        return tool_id

    def tool_result(self, tool_id: str, output: str, is_error: bool = False) -> None:
        block = {"tool_use_id": tool_id, "type": "tool_result", "content": output}
        if is_error:
            block["is_error"] = True
        result = {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}
        self._line("user", {"role": "user", "content": [block]}, toolUseResult=result)

    def meta(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text}, isMeta=True)

    def command(self, name: str, args: str = "") -> str:
        text = (
            f"<command-message>{name.lstrip('/')} is running…</command-message>\n"
            f"<command-name>{name}</command-name>\n<command-args>{args}</command-args>"
        )
        return self._line("user", {"role": "user", "content": text})["uuid"]

    def local_output(self, text: str) -> None:
        content = f"<local-command-stdout>{text}</local-command-stdout>"
        self._line("user", {"role": "user", "content": content})

    def interrupt(self) -> None:
        content = [{"type": "text", "text": "[Request interrupted by user]"}]
        self._line("user", {"role": "user", "content": content})

    def sidechain_text(self, text: str) -> None:
        message = {"id": "msg_side", "type": "message", "role": "assistant", "content": []}
        message["content"] = [{"type": "text", "text": text}]
        self._line("assistant", message, isSidechain=True)

    def extras(self) -> None:
        """Lines of the other documented types, which carry nothing a turn needs."""
        self.lines.append({"type": "summary", "summary": "Fixing the CI", "leafUuid": self._parent})
        self.lines.append(
            {
                "type": "file-history-snapshot",
                "messageId": self._parent,
                "isSnapshotUpdate": False,
                "snapshot": {"messageId": self._parent, "trackedFileBackups": {}},
            }
        )
        self.lines.append(
            {
                "type": "system",
                "subtype": "local_command",
                "content": "<command-name>/cost</command-name>",
                "level": "info",
                "isMeta": False,
                "uuid": str(uuid.uuid4()),
                "timestamp": self._ts(),
                "sessionId": self.session_id,
                "cwd": self.cwd,
            }
        )
        self.lines.append({"type": "some-future-type", "value": 1})

    def write(self, upto: int | None = None) -> Path:
        """Write the transcript (the first `upto` lines) as Claude Code does: one JSON a line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(json.dumps(line) + "\n" for line in self.lines[:upto])
        self.path.write_text(body)
        return self.path

    def payload(self, event: str, **fields: Any) -> dict[str, Any]:
        """A hook payload of this session."""
        return {
            "session_id": self.session_id,
            "transcript_path": str(self.path),
            "cwd": self.cwd,
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }


def coding_session(path: Path, cwd: str, topic: str = "flaky") -> tuple[Session, list[str]]:
    """A two-turn session: a debugging turn with tool uses and thinking, then a follow-up."""
    session = Session(path=path, cwd=cwd)
    first = session.prompt(
        f"the {topic} test_upload_retries fails on CI with ConnectionResetError, fix it"
    )
    msg = session.new_message()
    session.thinking("Secret chain of thought about sockets.", msg)
    session.text("Let me look at the test first.", msg)
    read = session.tool_use("Read", {"file_path": f"{cwd}/tests/test_upload.py"}, msg)
    session.tool_result(read, "def test_upload_retries(): ...")
    msg = session.new_message()
    bash = session.tool_use("Bash", {"command": "pytest -x", "description": "Run tests"}, msg)
    session.tool_result(bash, "1 failed", is_error=True)
    session.text(
        "The retry loop reuses a closed connection; I now open a fresh session per attempt and "
        "the upload retries test passes."
    )
    second = session.prompt("also add a changelog entry")
    msg = session.new_message()
    edit = session.tool_use("Edit", {"file_path": f"{cwd}/CHANGELOG.md"}, msg)
    session.tool_result(edit, "ok")
    session.text("Added a changelog entry under Fixed.")
    return session, [first, second]


def installed_command(settings: Settings, project: Path) -> str:
    """Install into the project and return the hook command Claude Code would run."""
    install(settings, project=project)
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    commands = {
        h["command"] for groups in data["hooks"].values() for g in groups for h in g["hooks"]
    }
    assert len(commands) == 1
    return commands.pop()


def cli_install(
    home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[CliRunner, Result]:
    """`ctxdb capture claude-code install --project` through the CLI, for user `ann` with the
    home `home`; the runner (for the commands after it) and its result, checked to succeed."""
    _register_all()
    monkeypatch.setenv("CTXDB_HOME", str(home))
    monkeypatch.setenv("CTXDB_CLAUDE_CODE_USER_ID", "ann")
    runner = CliRunner()
    result = runner.invoke(app, ["capture", "claude-code", "install", "--project", str(project)])
    assert result.exit_code == 0, result.output
    return runner, result


def run_hook(command: str, payload: dict | bytes) -> None:
    """Run the hook as Claude Code does (a shell command, payload on stdin): exit 0, no output."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    done = subprocess.run(command, shell=True, input=data, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def play(session: Session, command: str, answers: dict[str, str]) -> None:
    """Replay the session's transcript as Claude Code writes it, firing the hooks on the way:
    UserPromptSubmit before its prompt line is written, PostToolUse after each tool that succeeded
    (a failed one fires PostToolUseFailure, which ctxdb does not register), Stop once the answer
    is written (with `last_assistant_message`), SessionEnd at the end."""
    prompt_turn = None
    for i, line in enumerate(session.lines):
        content = line.get("message", {}).get("content")
        if line.get("type") == "user" and isinstance(content, str) and not line.get("isMeta"):
            if prompt_turn is not None:
                session.write(i)
                run_hook(
                    command, session.payload("Stop", last_assistant_message=answers[prompt_turn])
                )
            session.write(i)
            run_hook(command, session.payload("UserPromptSubmit", prompt=content))
            prompt_turn = line["uuid"]
        if line.get("type") == "user" and isinstance(content, list):
            block = content[0]
            if block.get("type") == "tool_result" and not block.get("is_error"):
                session.write(i)  # PostToolUse runs before the result line is written
                tool = next(
                    b
                    for earlier in session.lines[:i]
                    for b in earlier.get("message", {}).get("content", [])
                    if isinstance(b, dict) and b.get("id") == block["tool_use_id"]
                )
                run_hook(
                    command,
                    session.payload(
                        "PostToolUse",
                        tool_name=tool["name"],
                        tool_input=tool["input"],
                        tool_response={"stdout": block["content"]},
                        tool_use_id=tool["id"],
                    ),
                )
    session.write()
    run_hook(command, session.payload("Stop", last_assistant_message=answers[prompt_turn]))
    run_hook(command, session.payload("SessionEnd", reason="prompt_input_exit"))


def final_answers(session: Session) -> dict[str, str]:
    """Per prompt uuid, the last assistant text before the next prompt (the Stop hook's
    `last_assistant_message`)."""
    answers: dict[str, str] = {}
    current = None
    for line in session.lines:
        content = line.get("message", {}).get("content")
        if line.get("type") == "user" and isinstance(content, str) and not line.get("isMeta"):
            current = line["uuid"]
        elif line.get("type") == "assistant" and current and not line.get("isSidechain"):
            texts = [b["text"] for b in content if b.get("type") == "text"]
            if texts:
                answers[current] = texts[-1]
    return answers


FIXTURES = Path(__file__).parent / "data" / "claude_code"
"""Real Claude Code transcripts (tests/data/claude_code/SOURCE.md)."""


def fixture_transcripts() -> list[Path]:
    """The real session transcripts of the fixture folder (sub-agent files left out)."""
    return sorted(p for p in FIXTURES.rglob("*.jsonl") if "subagents" not in p.parts)


def _user_text(line: dict[str, Any]) -> str | None:
    """The text a user typed on a transcript line (a prompt or a command), else None."""
    if line.get("type") == "system" and line.get("subtype") == "local_command":
        content = line.get("content") or ""
        return content if "<command-name>" in content else None
    if line.get("type") != "user" or line.get("isMeta") or line.get("isSidechain"):
        return None
    if line.get("isCompactSummary"):
        return None
    content = line["message"]["content"]
    if isinstance(content, list):
        if any(b.get("type") == "tool_result" for b in content):
            return None
        content = "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
    text = content.strip()
    if not text or text.startswith(("[Request interrupted", "<local-command", "<task-notif")):
        return None
    return text


def hook_points(lines: list[dict[str, Any]], session: str, transcript: Path) -> list[tuple]:
    """Where Claude Code runs the hooks while it writes `lines`: (lines written by then,
    payload). UserPromptSubmit before a prompt or command line, PostToolUse before the result
    line of each tool that succeeded, Stop before each `stop_hook_summary` line (with
    `last_assistant_message`), SessionEnd at the end; none for interrupts and task notices."""
    cwd = next(line["cwd"] for line in lines if line.get("cwd"))
    base = {"session_id": session, "transcript_path": str(transcript), "cwd": cwd}
    tools: dict[str, dict] = {}
    answer = ""
    points: list[tuple] = []
    for i, line in enumerate(lines):
        content = (line.get("message") or {}).get("content")
        if line.get("type") == "assistant" and isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_use":
                    tools[block["id"]] = block
                elif block.get("type") == "text" and block["text"].strip():
                    answer = block["text"]
        text = _user_text(line)
        if text is not None:
            points.append((i, {**base, "hook_event_name": "UserPromptSubmit", "prompt": text}))
        elif line.get("type") == "user" and isinstance(content, list) and not line.get("isMeta"):
            for block in content:
                tool = tools.get(block.get("tool_use_id", ""))
                if block.get("type") == "tool_result" and tool and not block.get("is_error"):
                    post = {"tool_name": tool["name"], "tool_input": tool["input"]}
                    post = {**base, "hook_event_name": "PostToolUse", **post}
                    points.append((i, {**post, "tool_use_id": tool["id"]}))
        elif line.get("type") == "system" and line.get("subtype") == "stop_hook_summary":
            stop = {"hook_event_name": "Stop", "stop_hook_active": False}
            points.append((i, {**base, **stop, "last_assistant_message": answer}))
    points.append((len(lines), {**base, "hook_event_name": "SessionEnd", "reason": "other"}))
    return points


def _decoded(raw: bytes) -> dict[str, Any]:
    """A transcript line decoded; an empty one for a line Claude Code would fire no hook for
    because it cannot be decoded (a test's line nested too deep)."""
    try:
        return json.loads(raw)
    except RecursionError:
        return {}


def replay(source: Path, projects: Path, run: Any) -> Path:
    """Write the real transcript `source` into `projects/<folder>/` line by line as Claude Code
    does, calling `run(payload)` at each of its hook points; returns the transcript written."""
    raw = source.read_bytes().splitlines(keepends=True)
    lines = [_decoded(r) for r in raw]
    target = projects / source.parent.name / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"")
    written = 0
    with target.open("ab") as file:
        for upto, payload in hook_points(lines, source.stem, target):
            file.write(b"".join(raw[written:upto]))
            file.flush()
            written = upto
            run(payload)
    return target


_SETTLED_ID = re.compile(r"-settled-[0-9a-f]{12}$")


def as_hook_closes(event: dict[str, Any]) -> dict[str, Any]:
    """An imported event as the hook writes it when Claude Code ends the turn: the importer's
    `provisional` close of a last turn no line ended, under the hook's id and without the flag
    (every other event unchanged)."""
    payload = dict(event["payload"])
    if not payload.pop("provisional", False):
        return event
    return {**event, "event_id": _SETTLED_ID.sub("", event["event_id"]), "payload": payload}


def is_provisional(payload: str | dict[str, Any]) -> bool:
    """Whether an event payload (a dict or its JSON text) is `provisional`."""
    return bool((json.loads(payload) if isinstance(payload, str) else payload).get("provisional"))


def hook_ids(rows: list[dict[str, Any]]) -> set[str]:
    """The ids the hook gives the events of landed `rows` (payloads as JSON text)."""
    return {as_hook_closes({**r, "payload": json.loads(r["payload"])})["event_id"] for r in rows}
