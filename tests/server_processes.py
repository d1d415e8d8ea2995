"""Server processes for the tests that run real servers (Redis as the Celery broker here, and
the cluster stack's nodes and S3 endpoint in tests/cluster): start in a session of their own,
wait for readiness under a deadline, stop the whole process group."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from conftest_ports import free_port_pair

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
SERVER_START_S = 60.0


def log_tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(
    what: str, ready: Callable[[], bool], process: subprocess.Popen, log: Path, timeout_s: float
) -> None:
    """Poll `ready` until it holds; RuntimeError with `log`'s tail when `process` exits first or
    `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited ({process.returncode}):\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout_s:.0f} s:\n{log_tail(log)}")
        time.sleep(0.2)


def start_process(
    command: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.Popen:
    """A server process in a session of its own (it and its children stop together)."""
    with log.open("w") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM the process group of `process`, SIGKILL it when it outlives `timeout_s`."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass(frozen=True)
class RedisServer:
    port: int
    process: subprocess.Popen

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def alive(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=2).ping())
        except redis.RedisError:
            return False


@contextmanager
def redis_server_running(folder: Path) -> Iterator[RedisServer]:
    """Debian's redis-server on a free loopback port, nothing persisted, stopped on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found: apt-get install -y redis-server")
    port = free_port_pair()
    log = folder / "redis.log"
    command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder)]
    command += ["--save", "", "--appendonly", "no"]
    process = start_process(command, log)
    server = RedisServer(port, process)
    try:
        wait_ready(f"redis-server on port {port}", server.alive, process, log, SERVER_START_S)
        yield server
    finally:
        stop_process(process)
