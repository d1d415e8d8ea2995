"""A turn stopped before any answer never stops the main job, every face says it was
interrupted, and tokens per model are one `ctxdb sql` query over all three hosts (issue 40).

Real sessions, each imported through the real CLI (`ctxdb import claude-code`,
`ctxdb capture codex|gemini import`), then `ctxdb jobs run memory_job` once for the module:

* a Claude Code transcript of tests/data/claude_code (five answered turns, `usage` and `model`);

* the Codex rollout of tests/data/codex cut right after its second turn's `task_started` and
  `user_message`, followed by the `turn_aborted` line Codex CLI writes when Escape is pressed;
* the Gemini session of tests/data/gemini whose second prompt gets "Request cancelled." before any
  `gemini` message, and whose third gets it after the tool calls but before any answer text.

The job must succeed (before issue 40 the check `user_and_final_assistant_rows` failed it on the
Gemini turn with steps and no answer, and the two turns stopped before anything were dropped),
each cancelled turn must be in `turn_logs` with `status` cancelled, and `ctxdb turn`, the HTTP
API and MCP `get_turn` must mark it and show no empty answer. A role row removed on purpose then
makes the check fail, and the CLI names the offending turn.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import polars as pl
import pytest
from conftest import delete_prefix_indices
from fastapi.testclient import TestClient
from mcp import Client, StdioServerParameters, stdio_client

from ctxdb.index.client import make_client
from ctxdb.record.checks import turn_logs_have_user_and_final_rows
from ctxdb.serve.http import create_app
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, TURN_LOGS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import real_sessions  # noqa: E402

pytestmark = [pytest.mark.es, pytest.mark.model, pytest.mark.slow]

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
DATA = Path(__file__).parent / "data"
CODEX = DATA / "codex" / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
CODEX_ABORTED = "019e162b-0011-7240-abbc-f7b732e49728"
GEMINI = DATA / "gemini" / "session-2025-12-01T21-45-5b959dae.json"
CLAUDE_CODE = DATA / "claude_code" / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"
TOKENS_PER_MODEL = """
select adapter, model, count(*) as turns,
       sum(tokens_in) as tokens_in, sum(tokens_out) as tokens_out
from turn_logs
where model is not null
group by adapter, model
order by adapter, model
"""
"""The query of docs/analytics.md, "Tokens per model"."""
GEMINI_SILENT = "b64f43d0-fca0-415a-99dd-7acf5b276624"
"""The prompt cancelled before any `gemini` message."""
GEMINI_AFTER_TOOLS = "44b913a6-2096-49f7-984a-3a472e1fb765"
"""The prompt cancelled after its tool calls, before any answer text."""
USER = "ann"
CHECK = "role_rows:user_and_final_assistant_rows"


def codex_aborted(folder: Path) -> Path:
    """The rollout up to the second turn's `user_message`, then its `turn_aborted` line."""
    lines = CODEX.read_text().splitlines(keepends=True)
    started = next(i for i, line in enumerate(lines) if f'"turn_id":"{CODEX_ABORTED}"' in line)
    prompt = next(i for i in range(started, len(lines)) if '"type":"user_message"' in lines[i])
    aborted = {
        "timestamp": "2026-05-11T08:33:01.000Z",
        "type": "event_msg",
        "payload": {"type": "turn_aborted", "turn_id": CODEX_ABORTED, "reason": "interrupted"},
    }
    path = folder / CODEX.name
    path.write_text(
        "".join(lines[: prompt + 1]) + json.dumps(aborted, separators=(",", ":")) + "\n"
    )
    return path


def gemini_cancelled(folder: Path) -> Path:
    """The session with "Request cancelled." after its second prompt (no reply yet) and after
    the first tool-calling reply to its third (the rest of each turn dropped)."""
    data = json.loads(GEMINI.read_text())
    messages = data["messages"]

    def cancelled(after: dict[str, Any], n: int) -> dict[str, Any]:
        at = after["timestamp"].replace("Z", "").split(".")[0]
        return {"id": f"cancel-{n}", "timestamp": f"{at}.900Z", "type": "info",
                "content": "Request cancelled."}  # fmt: skip

    third = next(i for i, m in enumerate(messages) if m["id"] == GEMINI_AFTER_TOOLS)
    assert messages[2]["id"] == GEMINI_SILENT and messages[third + 1]["toolCalls"]
    data["messages"] = [
        *messages[:3],
        cancelled(messages[2], 1),
        messages[third],
        messages[third + 1],
        cancelled(messages[third + 1], 2),
    ]
    path = folder / GEMINI.name
    path.write_text(json.dumps(data))
    return path


@dataclass
class Memory:
    settings: Settings
    env: dict[str, str]
    job: subprocess.CompletedProcess[str]
    token: str

    def ctxdb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CTXDB, *args], env=self.env, capture_output=True, text=True, timeout=900
        )

    @property
    def store(self) -> DeltaStore:
        return DeltaStore(self.settings.delta_uri)


@pytest.fixture(scope="module")
def memory(
    es_base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Memory]:
    """The three sessions imported with the CLI and `memory_job` run once over them."""
    home = tmp_path_factory.mktemp("interrupted")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    settings = es_base_settings.replace(home=home, elasticsearch={"index_prefix": prefix})
    env = real_sessions.environment(home, prefix, settings.elasticsearch.url)
    env |= {"CTXDB_CLAUDE_CODE_USER_ID": USER}
    sessions = home / "sessions"
    sessions.mkdir()
    memory = Memory(settings, env, subprocess.CompletedProcess([], 0), "")
    for command in (
        ["import", "claude-code", str(CLAUDE_CODE)],
        ["capture", "codex", "import", str(codex_aborted(sessions))],
        ["capture", "gemini", "import", str(gemini_cancelled(sessions))],
    ):
        imported = memory.ctxdb(*command, "--settle-s", "0")
        assert imported.returncode == 0, imported.stderr
    memory.job = memory.ctxdb("jobs", "run", "memory_job")
    issued = memory.ctxdb("tokens", "issue", "--user", USER, "--tenant", "local")
    assert issued.returncode == 0, issued.stderr
    memory.token = issued.stdout.strip().splitlines()[-1]
    yield memory
    with make_client(settings) as client:
        delete_prefix_indices(client, prefix)


def _turn_logs(memory: Memory) -> pl.DataFrame:
    return memory.store.read(TURN_LOGS).sort("conversation_id", "started_at")


def test_memory_job_succeeds_and_records_each_cancelled_turn(memory: Memory) -> None:
    output = memory.job.stdout + memory.job.stderr
    assert memory.job.returncode == 0, output[-3000:]
    assert f"check {CHECK} failed" not in output
    logs = _turn_logs(memory)
    status = {t: (s, e) for t, s, e in logs.select("turn_id", "status", "error_type").iter_rows()}
    for turn in (CODEX_ABORTED, GEMINI_SILENT, GEMINI_AFTER_TOOLS):
        assert status[turn] == ("cancelled", "interrupted"), turn
    assert sum(s == ("ok", None) for s in status.values()) == 5 + 2  # Claude Code's, 1 + 1
    rows = memory.store.read(ROLE_ROWS)
    answers = rows.filter(pl.col("target") == "assistant")["turn_id"].to_list()
    assert not {CODEX_ABORTED, GEMINI_SILENT, GEMINI_AFTER_TOOLS} & set(answers)
    steps = rows.filter(pl.col("target") == "steps")
    assert GEMINI_AFTER_TOOLS in steps["turn_id"].to_list()  # what it ran stays searchable
    stepped = steps.join(_turn_logs(memory), on="turn_id").group_by("adapter").len()
    assert set(stepped["adapter"]) == {"claude_code", "codex", "gemini_cli"}


def test_tokens_per_model_over_all_three_hosts_is_one_sql_query(memory: Memory) -> None:
    done = memory.ctxdb("sql", TOKENS_PER_MODEL, "-f", "json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    for row in rows:  # DuckDB's sums are 128-bit: JSON writes them as strings
        row |= {k: int(row[k]) for k in ("turns", "tokens_in", "tokens_out")}
    by_host = {row["adapter"]: row for row in rows}
    assert {h: r["model"] for h, r in by_host.items()} == {
        "claude_code": "claude-haiku-4-5-20251001",
        "codex": "gpt-5.5",
        "gemini_cli": "gemini-3-pro-image-preview",
    }
    assert by_host["claude_code"]["turns"] == 5  # every answered turn
    assert by_host["codex"]["turns"] == 1 and by_host["gemini_cli"]["turns"] == 1
    assert all(row["tokens_in"] > row["tokens_out"] > 0 for row in rows)
    # each message's usage once (Claude Code repeats it on every line of a message), the
    # prompt with its cached tokens; Codex and Gemini as their sessions total them
    assert by_host["codex"]["tokens_in"] == 57906 and by_host["codex"]["tokens_out"] == 374
    assert (by_host["gemini_cli"]["tokens_in"], by_host["gemini_cli"]["tokens_out"]) == (2752, 55)
    assert by_host["claude_code"]["tokens_in"] == claude_code_prompt_tokens()


def claude_code_prompt_tokens() -> int:
    """The transcript's prompt tokens of its main-chain API messages, each message once."""
    usage: dict[str, dict] = {}
    for line in CLAUDE_CODE.read_text().splitlines():
        entry = json.loads(line)
        message = entry.get("message") or {}
        if entry.get("type") == "assistant" and not entry.get("isSidechain"):
            if message.get("usage") and message.get("model") != "<synthetic>":
                usage[message["id"]] = message["usage"]
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return sum(u.get(k, 0) for u in usage.values() for k in keys)


def _conversation(memory: Memory, turn_id: str) -> str:
    logs = _turn_logs(memory)
    return logs.filter(pl.col("turn_id") == turn_id)["conversation_id"].item()


def test_ctxdb_turn_marks_the_interrupted_turn(memory: Memory) -> None:
    conversation = _conversation(memory, CODEX_ABORTED)
    env = memory.env | {"CTXDB_TOKEN": memory.token}
    text = subprocess.run(
        [CTXDB, "turn", conversation, CODEX_ABORTED], env=env, capture_output=True, text=True
    )
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].endswith(" [interrupted]")
    assert lines[1] == "  user: let's update the defailt context compart to 90 in env var"
    assert lines[2] == "  (interrupted before an answer)"
    assert not any(line.startswith("  assistant:") for line in lines)
    as_json = subprocess.run(
        [CTXDB, "turn", conversation, CODEX_ABORTED, "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    view = json.loads(as_json.stdout)
    assert (view["status"], view["error_type"]) == ("cancelled", "interrupted")
    assert [m["role"] for m in view["messages"]] == ["user"]


def test_http_turn_json_carries_the_status(memory: Memory) -> None:
    conversation = _conversation(memory, GEMINI_AFTER_TOOLS)
    with make_client(memory.settings) as client:
        http = TestClient(create_app(memory.settings, client, load_model=False))
        got = http.get(
            f"/v1/conversations/{conversation}/turns/{GEMINI_AFTER_TOOLS}",
            headers={"Authorization": f"Bearer {memory.token}"},
        )
    assert got.status_code == 200, got.text
    view = got.json()
    assert (view["status"], view["error_type"]) == ("cancelled", "interrupted")
    assert [m["role"] for m in view["messages"]] == ["user"]
    assert view["steps"]  # the tool calls made before the stop


def test_mcp_get_turn_marks_the_interrupted_turn(memory: Memory, tmp_path: Path) -> None:
    conversation = _conversation(memory, GEMINI_SILENT)
    token_file = tmp_path / "token"
    token_file.write_text(memory.token)
    server = StdioServerParameters(
        command=CTXDB, args=["mcp", "--token-file", str(token_file)], env=memory.env
    )
    found: dict[str, Any] = {}

    async def main() -> None:
        async with Client(stdio_client(server, errlog=subprocess.DEVNULL)) as client:
            result = await client.call_tool(
                "get_turn", {"conversation_id": conversation, "turn_id": GEMINI_SILENT}
            )
            found["data"], found["text"] = result.structured_content, result.content[0].text

    anyio.run(main)
    assert (found["data"]["status"], found["data"]["error_type"]) == ("cancelled", "interrupted")
    assert [m["role"] for m in found["data"]["messages"]] == ["user"]
    lines = found["text"].splitlines()
    assert lines[0].endswith(" [interrupted]")
    assert lines[-1] == "(interrupted before an answer)"


def test_a_failing_check_names_its_offenders_in_the_cli_output(memory: Memory) -> None:
    """Breaks the record on purpose (the answered Codex turn loses its answer row) so the
    blocking check fails: the run fails, and its output names the turn and the counts."""
    answered = _turn_logs(memory).filter(
        (pl.col("status") == "ok") & (pl.col("adapter") == "codex")
    )
    conversation, turn = answered.select("conversation_id", "turn_id").row(0)
    memory.store.delete(
        ROLE_ROWS, f"turn_id = '{turn}' AND target = 'assistant'"
    )  # the fault this test is about
    outcome = turn_logs_have_user_and_final_rows(memory.store)
    assert (outcome.passed, outcome.count) == (False, 1)
    assert outcome.details["answered_turn_without_answer_row"] == 1
    offender = f"{conversation}/{turn} (status ok: 1 user, 0 assistant rows)"
    assert outcome.offenders == [offender]
    rerun = memory.ctxdb("jobs", "run", "memory_job")
    output = rerun.stdout + rerun.stderr
    assert rerun.returncode != 0
    failed = [line for line in output.splitlines() if f"check {CHECK} failed" in line]
    assert failed and failed[0].endswith(
        f"check {CHECK} failed: 1 offender(s) [answered_turn_without_answer_row: 1]: {offender}"
    )
