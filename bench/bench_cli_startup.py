"""Cold-process start of the `ctxdb` command line (issue 44 item 4). Not a test.

    .venv/bin/python bench/bench_cli_startup.py --rounds 20
    .venv/bin/python bench/bench_cli_startup.py --rounds 10 --tree /tmp/old-checkout

Each round runs every case once, interleaved, each in a new process, as a user (or an agent's
hook) starts `ctxdb`: `ctxdb --help`, `ctxdb tokens issue`, `ctxdb conversations --help`, and
`ctxdb capture gemini hook` with an AfterAgent payload naming a small real Gemini CLI session
(tests/data/gemini, 19 KB), from the settings and with `--config` (the hook config `ctxdb capture
claude-code install` writes, which spares the hook the settings, as for the Claude Code hook).
Two baselines run in the same rounds: `python -c pass` and `python -c "import ctxdb.cli.app"`.
Printed per case: wall p50 / p95 (ms), peak RSS (MB, the child's own, from `os.wait4`), and p50
as a ratio of each baseline; the load average is printed before and after, since absolute times
mean something only on an idle machine.

`--tree DIR` runs the same cases against another checkout of the repository (e.g. a `git worktree`
of an older commit, put first on PYTHONPATH), for before / after numbers; a case that checkout
cannot run (its warm-up run fails) is left out with its error.
Targets: `--help` <= 0.3 s and <= 80 MB; a light command <= 0.5 s plus its work; the Gemini hook on
a small session <= 0.3 s p95 (idle machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "tests" / "data" / "gemini" / "session-2025-10-11T13-00-2d9ea14f.json"
MAIN = "import sys; sys.argv[0] = 'ctxdb'; from ctxdb.cli import main; main()"
"""What the installed `ctxdb` script runs."""


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Failed(RuntimeError):
    """A case exited non-zero."""


def run(command: list[str], env: dict[str, str], stdin: bytes, cwd: Path) -> tuple[float, float]:
    """Run `command` in `cwd` to the end: wall seconds and its own peak RSS in MB; `Failed` when
    it exits non-zero."""
    start = time.perf_counter()
    child = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stderr is not None
    child.stdin.write(stdin)
    child.stdin.close()
    err = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise Failed(f"{' '.join(command[-4:])} exited {code}: {err.decode()[-400:]}")
    return wall, usage.ru_maxrss / 1024


def cases(home: Path, config: Path) -> dict[str, tuple[list[str], bytes]]:
    """Each case: its arguments after the interpreter, and its stdin (`config`: the hook config
    `ctxdb capture claude-code install` wrote)."""
    chats = home / ".gemini" / "tmp" / "bench" / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    session = chats / SESSION.name
    shutil.copy(SESSION, session)
    payload = {"hook_event_name": "AfterAgent", "session_id": "s", "transcript_path": str(session)}
    ctxdb = ["-c", MAIN]
    return {
        "python -c pass": (["-c", "pass"], b""),
        "import ctxdb.cli.app": (["-c", "import ctxdb.cli.app"], b""),
        "ctxdb --help": ([*ctxdb, "--help"], b""),
        "ctxdb tokens issue": ([*ctxdb, "tokens", "issue", "--user", "ann", "--tenant", "t"], b""),
        "ctxdb conversations --help": ([*ctxdb, "conversations", "--help"], b""),
        "ctxdb capture gemini hook": (
            [*ctxdb, "capture", "gemini", "hook"],
            json.dumps(payload).encode(),
        ),
        "... gemini hook --config": (
            [*ctxdb, "capture", "gemini", "hook", "--config", str(config)],
            json.dumps(payload).encode(),
        ),
    }


def measure(rounds: int, tree: Path | None) -> dict[str, list[tuple[float, float]]]:
    """`rounds` interleaved rounds of every case in a fresh home: (wall s, peak MB) per run."""
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        env = os.environ | {"CTXDB_HOME": str(home / "ctxdb"), "HOME": str(home)}
        if tree is not None:
            env["PYTHONPATH"] = str(tree.resolve())
        cwd = home / "cwd"  # not `home`: its `ctxdb` folder would shadow the package
        (home / "project").mkdir(parents=True)
        cwd.mkdir()
        install = ["capture", "claude-code", "install", "--project", str(home / "project")]
        run([sys.executable, "-c", MAIN, *install], env, b"", cwd)
        table = cases(home, home / "ctxdb" / "capture" / "claude_code" / "hook.json")
        for name, (args, stdin) in list(table.items()):  # warm the page cache and .pyc files
            try:
                run([sys.executable, *args], env, stdin, cwd)
            except Failed as exc:
                say(f"left out {name}: {exc}")
                del table[name]
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in table}
        for _ in range(rounds):
            for name, (args, stdin) in table.items():
                wall, peak = run([sys.executable, *args], env, stdin, cwd)
                samples[name].append((wall, peak))
        return samples


def p95(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def report(samples: dict[str, list[tuple[float, float]]]) -> None:
    """One line per case: p50 / p95 wall, peak RSS, p50 ratios to both baselines."""
    p50 = {name: statistics.median(w for w, _ in runs) for name, runs in samples.items()}
    bare, app = p50["python -c pass"], p50["import ctxdb.cli.app"]
    say(f"{'case':28} {'p50 ms':>8} {'p95 ms':>8} {'peak MB':>8} {'x pass':>7} {'x app':>7}")
    for name, runs in samples.items():
        walls = [w for w, _ in runs]
        peak = max(m for _, m in runs)
        say(
            f"{name:28} {p50[name] * 1000:8.0f} {p95(walls) * 1000:8.0f} {peak:8.1f} "
            f"{p50[name] / bare:7.2f} {p50[name] / app:7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--tree", type=Path, help="another checkout to measure instead")
    args = parser.parse_args()
    say("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    say(f"code: {args.tree or ROOT}; {args.rounds} rounds, each case a new process")
    report(measure(args.rounds, args.tree))
    say("load average after:  {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
