"""Benchmark Claude Code capture (issue 13): the hook's latency as a cold process, and transcript
import throughput against the landing stage's own rate on the same events. Not a test.

    .venv/bin/python bench/bench_claude_code.py hook --turns 40 --tools 3 --prefill-mb 10
    .venv/bin/python bench/bench_claude_code.py import --sessions 200 --turns 40

`hook` installs the hooks into a temporary project and replays synthetic sessions through the
installed command exactly as Claude Code runs it (`sh -c '<command>'`, payload on stdin, a new
Python process per event, transcript written as the session goes), timing every process from
spawn to exit: p50/p95 per hook event and overall (target: p95 < 150 ms, interpreter included).
`--prefill-mb N` starts the session with N MB of earlier turns (each ending in the
`stop_hook_summary` line Claude Code writes): the first hook reads them all (timed apart, as
`first read`), the timed turns then run on a transcript of that size.

`import` writes synthetic transcripts in the documented shapes (prompts, thinking, text and
tool_use lines sharing message ids, tool results with output), imports them (transcript lines/s),
lands the events the import wrote into a fresh Delta root (landing events/s), and prints the
ratio import lines/s / landing events/s.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from claude_code_sessions import transcript_line  # noqa: E402

from ctxdb.capture.claude_code.config import HookConfig  # noqa: E402

WORDS = (
    "retry upload socket test flaky fixture parser config cache index query schema migration "
    "deploy container timeout branch commit lint coverage release docs benchmark"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


class Writer:
    """Synthetic transcript lines of one session (the shapes tests/claude_code_sessions.py uses);
    `events` are the hook payloads the session fires, each with the line count written by then."""

    def __init__(self, folder: Path, cwd: str, rng: random.Random) -> None:
        self.cwd, self.rng = cwd, rng
        self.session_id = str(uuid.uuid4())
        self.path = folder / f"{self.session_id}.jsonl"
        self.lines: list[str] = []
        self.hooks: list[tuple[int, dict]] = []
        self.parent: str | None = None
        self.clock = datetime(2026, 11, 1, tzinfo=UTC)

    def line(self, kind: str, message: dict, **extra) -> str:
        self.clock += timedelta(seconds=2)
        timestamp = self.clock.isoformat().replace("+00:00", "Z")
        record = transcript_line(
            kind, message, self.parent, self.cwd, self.session_id, timestamp, **extra
        )
        self.parent = record["uuid"]
        self.lines.append(json.dumps(record))
        return record["uuid"]

    def assistant(self, msg_id: str, block: dict) -> None:
        message = {"id": msg_id, "type": "message", "role": "assistant", "content": [block]}
        message["usage"] = {"input_tokens": 1200, "output_tokens": 80}
        self.line("assistant", message, requestId=f"req_{msg_id}")

    def payload(self, event: str, **fields) -> dict:
        base = {"session_id": self.session_id, "transcript_path": str(self.path), "cwd": self.cwd}
        return {**base, "hook_event_name": event, **fields}

    def turn(self, tools: int) -> None:
        rng = self.rng
        prompt = _sentence(rng, rng.randint(8, 40))
        self.hooks.append((len(self.lines), self.payload("UserPromptSubmit", prompt=prompt)))
        self.line("user", {"role": "user", "content": prompt})
        answer = ""
        for _ in range(tools):
            msg_id = f"msg_{uuid.uuid4().hex[:20]}"
            self.assistant(msg_id, {"type": "thinking", "thinking": _sentence(rng, 60)})
            self.assistant(msg_id, {"type": "text", "text": _sentence(rng, 15)})
            tool_id = f"toolu_{uuid.uuid4().hex[:24]}"
            tool_input = {"command": f"pytest -k {rng.choice(WORDS)}", "description": "Run tests"}
            self.assistant(
                msg_id, {"type": "tool_use", "id": tool_id, "name": "Bash", "input": tool_input}
            )
            post = self.payload(
                "PostToolUse", tool_name="Bash", tool_input=tool_input, tool_use_id=tool_id
            )
            self.hooks.append((len(self.lines), post))
            output = "\n".join(_sentence(rng, 12) for _ in range(rng.randint(5, 60)))
            block = {"tool_use_id": tool_id, "type": "tool_result", "content": output}
            self.line(
                "user",
                {"role": "user", "content": [block]},
                toolUseResult={"stdout": output, "stderr": "", "interrupted": False},
            )
        answer = _sentence(rng, rng.randint(20, 120))
        self.assistant(f"msg_{uuid.uuid4().hex[:20]}", {"type": "text", "text": answer})
        stop = self.payload("Stop", stop_hook_active=False, last_assistant_message=answer)
        self.hooks.append((len(self.lines), stop))
        self.summary()

    def summary(self) -> None:
        """The `stop_hook_summary` line Claude Code writes once the Stop hooks ran."""
        self.clock += timedelta(seconds=1)
        line = {"type": "system", "subtype": "stop_hook_summary", "hookCount": 1}
        line |= {"uuid": str(uuid.uuid4()), "timestamp": self.clock.isoformat()}
        line |= {"sessionId": self.session_id, "cwd": self.cwd, "isSidechain": False}
        self.lines.append(json.dumps(line))

    def write(self, upto: int | None = None) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(line + "\n" for line in self.lines[:upto]))


def report(text: str) -> None:
    print(text)  # noqa: T201


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def hook_setup(root: Path, plain: bool) -> tuple[str, HookConfig]:
    """The hook command and its config: installed into a project as `ctxdb capture claude-code
    install` does, or (`plain`: the standard library only, no settings) `python -m` the hook
    module with a config file written here."""
    project = root / "shop"
    if plain:
        config = HookConfig(
            spool=str(root / "spool"),
            state=str(root / "state"),
            tenant="local",
            app="claude-code",
            user_id="bench",
            projects=str(root / "projects"),
        )
        config.dump(root / "hook.json")
        hook = f"{sys.executable} -m ctxdb.capture.claude_code.hook --config {root / 'hook.json'}"
        return hook, config
    from ctxdb.capture.claude_code.install import hook_config, install
    from ctxdb.settings import Settings

    settings = Settings(home=root / "home", claude_code={"projects": str(root / "projects")})
    install(settings, project=project)
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    return data["hooks"]["Stop"][0]["hooks"][0]["command"], hook_config(settings)


def bench_hook(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="ctxdb-bench-hook-"))
    project = root / "shop"
    command, config = hook_setup(root, args.plain)
    rng = random.Random(args.seed)
    writer = Writer(root / "projects" / "-shop", str(project), rng)
    while sum(len(line) + 1 for line in writer.lines) < args.prefill_mb * 1e6:
        writer.turn(args.tools)
    writer.hooks.clear()
    first_read = None
    for _ in range(args.turns):
        writer.turn(args.tools)
    writer.hooks.append((len(writer.lines), writer.payload("SessionEnd", reason="other")))
    timings: dict[str, list[float]] = {}
    if args.prefill_mb:
        upto, payload = writer.hooks[0]
        writer.write(upto)
        start = time.perf_counter()
        subprocess.run(command, shell=True, input=json.dumps(payload).encode(), check=True)
        first_read = (time.perf_counter() - start) * 1000
    for upto, payload in writer.hooks:
        writer.write(upto)
        body = json.dumps(payload).encode()
        start = time.perf_counter()
        done = subprocess.run(command, shell=True, input=body, capture_output=True)
        elapsed = (time.perf_counter() - start) * 1000
        assert done.returncode == 0 and not done.stdout, done
        timings.setdefault(payload["hook_event_name"], []).append(elapsed)
    every = [t for values in timings.values() for t in values]
    size = writer.path.stat().st_size / 1e6
    report(f"hook processes: {len(every)} ({args.turns} turns x {args.tools} tools), {size:.1f} MB")
    if first_read is not None:
        report(f"  first read of {args.prefill_mb} MB by one hook: {first_read:.0f} ms")
    for name, values in [*timings.items(), ("all", every)]:
        report(
            f"  {name:17s} n={len(values):4d}  p50 {statistics.median(values):6.1f} ms  "
            f"p95 {_pct(values, 0.95):6.1f} ms  max {max(values):6.1f} ms"
        )
    published = sum(1 for _ in Path(config.spool).glob("*.jsonl"))
    log = Path(config.state) / "hook.log"
    errors = len(log.read_text().splitlines()) if log.exists() else 0
    report(f"  published files: {published}; hook log lines: {errors}")


def bench_import(args: argparse.Namespace) -> None:
    from ctxdb.capture.claude_code.importer import find_transcripts, import_transcripts
    from ctxdb.capture.claude_code.install import hook_config
    from ctxdb.landing.run import land
    from ctxdb.settings import Settings
    from ctxdb.storage.delta import DeltaStore

    root = Path(tempfile.mkdtemp(prefix="ctxdb-bench-import-"))
    rng = random.Random(args.seed)
    transcripts = root / "projects"
    for s in range(args.sessions):
        writer = Writer(transcripts / f"-p{s % 10}", f"/src/p{s % 10}", rng)
        for _ in range(args.turns):
            writer.turn(rng.randint(0, args.tools * 2))
        writer.write()
    settings = Settings(home=root / "home")
    config = hook_config(settings)
    spool_dir = Path(config.spool).parent
    paths = find_transcripts(transcripts)
    size = sum(p.stat().st_size for p in paths)
    start = time.perf_counter()
    stats = import_transcripts(paths, spool_dir, config.identity, settle_s=0)
    import_s = time.perf_counter() - start
    store = DeltaStore(settings.delta_uri)
    start = time.perf_counter()
    landed = land(store, settings.landing_uri)
    land_s = time.perf_counter() - start
    import_rate = stats.lines / import_s
    land_rate = landed.lines / land_s
    report(
        f"transcripts: {stats.files} files, {stats.lines} lines, {size / 1e6:.1f} MB, "
        f"{stats.turns} turns -> {stats.events} events"
    )
    report(
        f"  import: {import_s:.2f} s = {import_rate:,.0f} transcript lines/s "
        f"({stats.events / import_s:,.0f} events/s, {size / 1e6 / import_s:.1f} MB/s)"
    )
    report(f"  landing the same events: {land_s:.2f} s = {land_rate:,.0f} events/s")
    report(f"  ratio import lines/s / landing events/s: {import_rate / land_rate:.2f}")
    assert landed.landed == stats.events and landed.quarantined == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    hook = sub.add_parser("hook", help="cold hook process latency")
    hook.add_argument("--turns", type=int, default=40)
    hook.add_argument("--tools", type=int, default=3)
    hook.add_argument("--seed", type=int, default=7)
    hook.add_argument("--prefill-mb", type=float, default=0.0)
    hook.add_argument("--plain", action="store_true", help="python -m the hook, no settings")
    imp = sub.add_parser("import", help="transcript import vs landing throughput")
    imp.add_argument("--sessions", type=int, default=200)
    imp.add_argument("--turns", type=int, default=40)
    imp.add_argument("--tools", type=int, default=3)
    imp.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    (bench_hook if args.what == "hook" else bench_import)(args)


if __name__ == "__main__":
    main()
