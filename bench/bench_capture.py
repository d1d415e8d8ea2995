"""Benchmark the recorder SDK (issue 13): what recording costs the host's thread, per event and
per turn, against a bare emitter measured in the same run. Not a test.

    .venv/bin/python bench/bench_capture.py --turns 2000 --steps 4 --repeats 3

Each turn is `turn.started`, a prompt, `--steps` steps, a completion and `turn.closed`
(`--steps` + 4 events, realistic text sizes). The **recorder** run times every call on the host's
thread (`perf_counter_ns` around it): building the event, removing `<private>` spans, validating
it against the contract and queueing it; the writer thread appends, fsyncs at each turn's close
and publishes meanwhile, competing for the GIL as it would in a host. The **baseline** is the
cheapest emitter a host could hand-write: `json.dumps` of the same event dict and a write to an
open file (buffered, never fsync'd, no validation). Both run `--repeats` times in alternation;
the medians are reported with p50/p95/p99 per call, the ratio recorder/baseline, and the writer's
own throughput (events/s until everything is fsync'd and published). Target: under 1 ms per event
on the host's thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ctxdb.capture import Recorder

PROMPT = "My upload test fails with ConnectionResetError after the third retry; " * 3
ANSWER = "The retry loop reuses a closed connection: open a new session per attempt. " * 12
TITLE = "Running pytest tests/test_upload.py -k retries"


def report(text: str) -> None:
    print(text)  # noqa: T201


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0


def run_recorder(landing: Path, turns: int, steps: int) -> tuple[list[int], float, dict]:
    """Per-call host-thread times (ns), writer seconds until all is published, stats."""
    rec = Recorder(landing, tenant="bench", app="chat", agent="helper", queue_size=1_000_000)
    times: list[int] = []

    def timed(call: Callable[[], object]) -> None:
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)

    began = time.perf_counter()
    for n in range(turns):
        holder: list = []
        timed(
            lambda h=holder, n=n: h.append(
                rec.turn(user_id=f"u{n % 50}", conversation_id=f"c{n % 400}")
            )
        )
        turn = holder[0]
        timed(lambda t=turn: t.submission(PROMPT))
        for s in range(steps):
            timed(lambda s=s, t=turn: t.step(f"s{s}", tool="bash", status="ok", title=TITLE))
        timed(lambda t=turn: t.completion(ANSWER, tokens_in=812, tokens_out=164))
        timed(turn.close)
    rec.close(timeout=600)
    written = time.perf_counter() - began
    stats = rec.stats
    return times, written, {"written": stats.written, "dropped": stats.dropped}


def run_baseline(landing: Path, turns: int, steps: int) -> list[int]:
    """Per-event times (ns) of json.dumps + a buffered file write of the same events."""
    landing.mkdir(parents=True, exist_ok=True)
    times: list[int] = []
    base = {"schema_version": 1, "tenant": "bench", "app": "chat", "agent": "helper"}
    with open(landing / "baseline.jsonl", "a", encoding="utf-8") as out:

        def emit(kind: str, turn: dict, payload: dict) -> None:
            start = time.perf_counter_ns()
            event = {
                "event_id": uuid.uuid4().hex,
                "type": kind,
                "occurred_at": datetime.now(UTC).isoformat(),
                **base,
                "adapter": "minimal",
                **turn,
                "payload": payload,
            }
            out.write(json.dumps(event, ensure_ascii=False) + "\n")
            times.append(time.perf_counter_ns() - start)

        for n in range(turns):
            turn = {
                "user_id": f"u{n % 50}",
                "conversation_id": f"c{n % 400}",
                "turn_id": uuid.uuid4().hex,
            }
            emit("turn.started", turn, {})
            emit("user.submission", turn, {"text": PROMPT, "event_type": "prompt"})
            for s in range(steps):
                step = {"step": f"s{s}", "phase": "complete", "tool": "bash", "title": TITLE}
                emit("chat.step", turn, step)
            emit("assistant.completion", turn, {"text": ANSWER, "tokens_in": 812})
            emit("turn.closed", turn, {"status": "ok"})
        out.flush()
        os.fsync(out.fileno())
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    events = args.turns * (args.steps + 4)
    recorder_runs, baseline_runs, writer_s, stats = [], [], [], {}
    with tempfile.TemporaryDirectory(prefix="ctxdb-bench-capture-") as tmp:
        for repeat in range(args.repeats):
            times, seconds, stats = run_recorder(Path(tmp) / f"rec{repeat}", args.turns, args.steps)
            recorder_runs.append(times)
            writer_s.append(seconds)
            baseline_runs.append(run_baseline(Path(tmp) / f"base{repeat}", args.turns, args.steps))

    def summary(runs: list[list[int]]) -> dict[str, float]:
        return {
            "mean_us": statistics.median(sum(r) / len(r) / 1000.0 for r in runs),
            "p50_us": statistics.median(percentile(r, 0.50) for r in runs),
            "p95_us": statistics.median(percentile(r, 0.95) for r in runs),
            "p99_us": statistics.median(percentile(r, 0.99) for r in runs),
        }

    rec, base = summary(recorder_runs), summary(baseline_runs)
    result = {
        "turns": args.turns,
        "events": events,
        "recorder": rec,
        "baseline": base,
        "ratio_mean": rec["mean_us"] / base["mean_us"],
        "per_turn_us": rec["mean_us"] * (args.steps + 4),
        "written_events_per_s": events / statistics.median(writer_s),
        "last_run": stats,
    }
    report(
        f"{events} events ({args.turns} turns of {args.steps + 4}), median of {args.repeats} runs"
    )
    for name, row in (("recorder (host thread)", rec), ("baseline dumps+write", base)):
        report(
            f"{name:24s} mean {row['mean_us']:7.1f} us  p50 {row['p50_us']:7.1f}  "
            f"p95 {row['p95_us']:7.1f}  p99 {row['p99_us']:7.1f}"
        )
    report(f"ratio recorder/baseline (mean per event): {result['ratio_mean']:.2f}x")
    report(f"recorder per turn on the host thread: {result['per_turn_us']:.0f} us")
    report(
        f"writer: {result['written_events_per_s']:,.0f} events/s until fsync'd and published; "
        f"written {stats['written']}, dropped {stats['dropped']}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
