"""Latency of the context hooks (issue 45 targets) with 10,000 turns in memory. Not a test.

    nice -n 10 .venv/bin/python bench/bench_context_hook.py build --home /tmp/hook-bench
    .venv/bin/python bench/bench_context_hook.py measure --home /tmp/hook-bench --rounds 30

`build` writes 10,000 Claude-Code-like turns of one user (20 projects x 25 sessions x 20 turns;
each turn edits a file and runs a command, 1 in 40 is cancelled) as landing JSONL, then runs the
real pipeline through the CLI: `ctxdb land`, `ctxdb derive`, `ctxdb index sync` (embedding every
role row). Built once, reused.

`measure` first runs `ctxdb capture claude-code install` with both context hooks on, which issues
the capture user's token and writes the commands Claude Code would run; then it runs, round after
round, each installed hook command as Claude Code runs it (a new process through the shell, the
payload on stdin): the `SessionStart` pack and the `UserPromptSubmit` lookup, both in-process (no
server) and through a running `ctxdb serve` (`--url`), the in-process SessionStart both from the
project's pack snapshot (written by the run before) and from Delta (the snapshots removed before
each such run, untimed), interleaved so every case sees the same load, with two references measured
in the same rounds: a bare `python -c pass` (the interpreter's start, through the same shell and
pin) and the pack's request alone from the warm bench process (the server's share). Each hook
process is pinned to 2 cores (`taskset -c 0,1`, the issue's "cold process on 2 cores"). Printed per
case: p50 / p95 / max wall time (ms), how many answers held context (`{}`: past the bound or nothing
found), p50 as a multiple of the `python -c pass` baseline's, and the load average before and after.
Targets: SessionStart p95 <= 400 ms, UserPromptSubmit p95 <= 250 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
PROJECTS, SESSIONS, TURNS = 20, 25, 20
USER, TENANT = "ann", "acme"
PREFIX = "hookbench"
TOPICS = [
    ("checkout", "rounding of the cart total", "Decimal arithmetic"),
    ("invoices", "PDF export of invoices", "a streaming writer"),
    ("auth", "expired session tokens", "a refresh on 401"),
    ("search", "slow product search", "a trigram index"),
    ("orders", "orders table migration to UUID keys", "a two-step migration"),
    ("emails", "duplicate welcome emails", "an idempotency key"),
    ("uploads", "large image uploads timing out", "chunked uploads"),
    ("reports", "monthly revenue report totals", "a timezone-aware grouping"),
    ("cache", "stale prices after an update", "cache invalidation on write"),
    ("i18n", "missing German translations", "a fallback locale"),
]


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def project_folder(n: int) -> str:
    return f"/home/{USER}/src/project{n:02d}"


def turn_events(project: int, session: int, turn: int, at: datetime) -> list[dict]:
    """The contract events of one turn: started (with its project), prompt, two steps, answer,
    closed (cancelled for 1 turn in 40)."""
    topic, problem, fix = TOPICS[(project + session + turn) % len(TOPICS)]
    conversation = f"p{project:02d}-s{session:02d}"
    turn_id = f"t{turn:02d}"
    folder = project_folder(project)
    agent = folder.strip("/").replace("/", "-")
    ident = {"tenant": TENANT, "app": "claude-code", "user_id": USER, "agent": agent}
    cancelled = (project * 7 + session * 3 + turn) % 40 == 0
    steps = [
        ("Edit", {"file_path": f"src/{topic}/module{turn % 7}.py", "old_string": "x"}),
        ("Bash", {"command": f"pytest -q tests/test_{topic}.py"}),
    ]
    payloads: list[tuple[str, dict]] = [
        ("turn.started", {"project": folder}),
        (
            "user.submission",
            {"text": f"Fix the {problem} in {topic} (ticket {project}-{session}-{turn})"},
        ),
        *[
            (
                "chat.step",
                {
                    "step": f"s{i}",
                    "phase": "complete",
                    "tool": tool,
                    "title": tool,
                    "input": json.dumps(data, separators=(",", ":")),
                },
            )
            for i, (tool, data) in enumerate(steps)
        ],
    ]
    if not cancelled:
        answer = f"The {problem} is fixed with {fix}; tests pass. " + "Details follow. " * 10
        payloads.append(("assistant.completion", {"text": answer, "tokens_in": 900}))
    payloads.append(("turn.closed", {"status": "cancelled"} if cancelled else {}))
    return [
        {
            "event_id": f"{conversation}-{turn_id}-{n}",
            "schema_version": 1,
            "type": kind,
            "occurred_at": (at + timedelta(seconds=5 * n)).isoformat().replace("+00:00", "Z"),
            **ident,
            "adapter": "minimal",
            "conversation_id": conversation,
            "turn_id": turn_id,
            "payload": payload,
        }
        for n, (kind, payload) in enumerate(payloads)
    ]


def environment(home: Path) -> dict[str, str]:
    """The memory's environment (its own home and index prefix, both hooks installed on)."""
    return {
        **os.environ,
        "CTXDB_HOME": str(home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": PREFIX,
        "CTXDB_CLAUDE_CODE_USER_ID": USER,
        "CTXDB_CLAUDE_CODE_TENANT": TENANT,
        "CTXDB_CLAUDE_CODE_CONTEXT": "true",
        "CTXDB_CLAUDE_CODE_LOOKUP": "true",
    }


def ctxdb(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([CTXDB, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ctxdb {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def build(home: Path) -> None:
    """Write the landing files and run the pipeline and the install (see the module doc)."""
    env = environment(home)
    landing = home / "landing" / "bench"
    landing.mkdir(parents=True, exist_ok=True)
    start = datetime.now(UTC) - timedelta(days=60)
    for project in range(PROJECTS):
        lines = []
        for session in range(SESSIONS):
            at = start + timedelta(days=session * 2, hours=project)
            for turn in range(TURNS):
                lines += turn_events(project, session, turn, at + timedelta(minutes=3 * turn))
        path = landing / f"project{project:02d}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    for step in (("land",), ("derive",), ("index", "sync")):
        began = time.monotonic()
        ctxdb(env, *step)
        say(f"ctxdb {' '.join(step)}: {time.monotonic() - began:.0f} s")
    say(ctxdb(env, "tables"))


def install(home: Path) -> None:
    """`ctxdb capture claude-code install` with both context hooks on (issues the token)."""
    (home / "project").mkdir(exist_ok=True)
    project = str(home / "project")
    ctxdb(environment(home), "capture", "claude-code", "install", "--project", project)


def hook_commands(home: Path) -> dict[str, str]:
    """The installed command of each context hook, by event."""
    settings = json.loads((home / "project" / ".claude" / "settings.local.json").read_text())
    found = {}
    for event in ("SessionStart", "UserPromptSubmit"):
        for group in settings["hooks"].get(event, []):
            for entry in group["hooks"]:
                if "capture claude-code context" in entry["command"]:
                    found[event] = entry["command"]
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(home: Path, port: int) -> subprocess.Popen:
    """`ctxdb serve` on `port`, once it answers."""
    env = environment(home)
    server = subprocess.Popen(
        [CTXDB, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("ctxdb serve did not start")


def server_alone(home: Path, port: int) -> float:
    """Wall seconds of the SessionStart pack's request from this (warm) process: the server's
    share of the `--url` case."""
    token = (home / "auth" / "claude-code-mcp.token").read_text().strip()
    query = urllib.parse.urlencode({"project": project_folder(3), "max_chars": 9500})
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/context?{query}", headers={"Authorization": f"Bearer {token}"}
    )
    began = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
    return time.monotonic() - began


def run_once(command: str, payload: dict) -> tuple[float, bool]:
    """Wall seconds of one hook process and whether it answered with context."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXDB_")}
    began = time.monotonic()
    done = subprocess.run(
        ["taskset", "-c", "0,1", "sh", "-c", command],
        input=json.dumps(payload),
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"hook failed: {done.stderr.strip()[-2000:]}")
    return took, done.stdout.strip() not in ("", "{}")


def forget_snapshots(home: Path) -> None:
    """Remove the pack snapshots (untimed), so the next SessionStart reads Delta."""
    shutil.rmtree(home / "packs", ignore_errors=True)


def cases(home: Path, port: int) -> dict[str, tuple[str, dict]]:
    """Each measured case: the command and its payload (a case named "from Delta" runs with
    the snapshots removed first)."""
    commands = hook_commands(home)
    url = f" --url http://127.0.0.1:{port}"
    start = {"hook_event_name": "SessionStart", "source": "startup", "cwd": project_folder(3)}
    topic, problem, _ = TOPICS[4]
    prompt = {
        "hook_event_name": "UserPromptSubmit",
        "cwd": project_folder(3),
        "prompt": f"the {problem} in {topic} broke again, what did we do last time?",
    }
    python = shlex.quote(sys.executable)
    return {
        "baseline: python -c pass": (f"{python} -c pass", start),
        "SessionStart in-process (snapshot)": (commands["SessionStart"], start),
        "SessionStart in-process from Delta": (commands["SessionStart"], start),
        "SessionStart via serve": (commands["SessionStart"] + url, start),
        "UserPromptSubmit in-process": (commands["UserPromptSubmit"], prompt),
        "UserPromptSubmit via serve": (commands["UserPromptSubmit"] + url, prompt),
    }


def measure(home: Path, rounds: int) -> None:
    install(home)
    port = free_port()
    server = serve(home, port)
    try:
        table = cases(home, port)
        for name, (command, payload) in table.items():
            run_once(command, payload)  # warm the page cache and the server
            say(f"{name}: {shlex.split(command)[-8:]}")
        alone = "server alone: GET /v1/context (pack)"
        times: dict[str, list[float]] = {name: [] for name in [*table, alone]}
        answered: dict[str, int] = dict.fromkeys([*table, alone], 0)
        say(f"load before: {os.getloadavg()}")
        for n in range(rounds):
            order = list(table.items())
            random.Random(n).shuffle(order)
            for name, (command, payload) in order:
                if "from Delta" in name:
                    forget_snapshots(home)
                took, context = run_once(command, payload)
                times[name].append(took)
                answered[name] += context
            times[alone].append(server_alone(home, port))
        say(f"load after: {os.getloadavg()}")
        base = statistics.median(times["baseline: python -c pass"])
        for name, samples in times.items():
            cut = statistics.quantiles(samples, n=20)
            say(
                f"{name:38s} p50 {statistics.median(samples) * 1000:6.0f} ms  "
                f"p95 {cut[18] * 1000:6.0f} ms  max {max(samples) * 1000:6.0f} ms  "
                f"answered {answered[name]}/{len(samples)}  "
                f"p50 = {statistics.median(samples) / base:4.1f} x python -c pass"
            )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["build", "measure"])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    if args.phase == "build":
        build(args.home)
    else:
        measure(args.home, args.rounds)


if __name__ == "__main__":
    main()
