"""Run the embedded single-node Elasticsearch: start, stop, status and logs, every wait bounded.

The distribution home is shared; each HTTP port gets its own instance directory (config, data,
logs, pid file) under the cache, so several nodes can run side by side. Under root the node runs
as an unprivileged system user, because Elasticsearch refuses to run as root.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxdb.node.distribution import (
    DOWNLOAD_TIMEOUT_S,
    cache_root,
    ensure_home,
    file_lock,
    home_path,
)
from ctxdb.node.errors import NodeStartError, PortInUseError, SystemUserError
from ctxdb.node.java import Jdk, find_jdk
from ctxdb.settings import Settings

log = logging.getLogger(__name__)

TRANSPORT_OFFSET = 100
LOG_TAIL_LINES = 20
SYSTEM_USER = "ctxdb-es"  # the account the node runs as when ctxdb runs as root
STOP_TIMEOUT_S = 60.0  # how long a stop waits for a clean shutdown before SIGKILL
PORT_RELEASE_S = 15.0  # how long a stop waits for the HTTP port to be free again
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class EmbeddedNode:
    """Where one embedded node (identified by its HTTP port) keeps its files."""

    cache: Path
    version: str
    port: int

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddedNode:
        return cls(cache_root(settings), settings.node.version, settings.node.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def transport_port(self) -> int:
        return self.port + TRANSPORT_OFFSET

    @property
    def home(self) -> Path:
        return home_path(self.cache, self.version)

    @property
    def instance(self) -> Path:
        return self.cache / "nodes" / str(self.port)

    @property
    def config_dir(self) -> Path:
        return self.instance / "config"

    @property
    def data_dir(self) -> Path:
        return self.instance / "data"

    @property
    def logs_dir(self) -> Path:
        return self.instance / "logs"

    @property
    def pid_file(self) -> Path:
        return self.instance / "node.pid"

    @property
    def cluster_name(self) -> str:
        return f"ctxdb-{self.port}"

    @property
    def log_file(self) -> Path:
        return self.logs_dir / f"{self.cluster_name}.log"

    @property
    def launcher_log(self) -> Path:
        return self.logs_dir / "launcher.out"


@dataclass(frozen=True)
class StartResult:
    url: str
    pid: int
    already_running: bool


def node_config(node: EmbeddedNode, extra: Mapping[str, str] | None = None) -> str:
    """elasticsearch.yml of a loopback-only, single-node, security-off development node."""
    settings = {
        "cluster.name": node.cluster_name,
        "node.name": node.cluster_name,
        "discovery.type": "single-node",
        "network.host": "127.0.0.1",
        "http.port": str(node.port),
        "transport.port": str(node.transport_port),
        "path.data": str(node.data_dir),
        "path.logs": str(node.logs_dir),
        "xpack.security.enabled": "false",
        "cluster.routing.allocation.disk.threshold_enabled": "false",
        **(extra or {}),
    }
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())


def running_pid(node: EmbeddedNode) -> int | None:
    """The pid of this node's server process, when its pid file names a live one."""
    try:
        pid = int(node.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    homes = {f"-Des.path.home={node.home}", f"-Des.path.home={node.home.resolve()}"}
    return pid if homes.intersection(args) and pid_alive(pid) else None


def port_busy(port: int) -> bool:
    """True when something accepts connections on, or holds, 127.0.0.1:`port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        # A free port in the ephemeral range can be "connected" to itself (TCP simultaneous
        # open, when the kernel picks that very port as the source): that is not a listener.
        if (
            probe.connect_ex(("127.0.0.1", port)) == 0
            and probe.getsockname() != probe.getpeername()
        ):
            return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` lines of a text file (empty when it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 256 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def node_logs(node: EmbeddedNode, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The node's server log tail, or the launcher's output when the server never logged."""
    return tail(node.log_file, lines) or tail(node.launcher_log, lines)


def failure_lines(node: EmbeddedNode, lines: int = 12) -> list[str]:
    """The last meaningful start-up lines (stack frames dropped, long lines cut)."""
    raw = tail(node.launcher_log, 400) or tail(node.log_file, 400)
    useful = [
        line[:400] for line in raw if line.strip() and not line.lstrip().startswith(("at ", "..."))
    ]
    return useful[-lines:]


def _with_log(message: str, node: EmbeddedNode) -> str:
    lines = failure_lines(node)
    return message + ("\n--- last log lines ---\n" + "\n".join(lines) if lines else "")


def ensure_system_user(name: str, home: Path) -> pwd.struct_passwd:
    """The unprivileged system user the node runs as under root (created on first use)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd", path=_SYSTEM_PATH)
    if useradd is None:
        raise SystemUserError(f"cannot create system user {name!r}: useradd not found")
    done = subprocess.run(
        [
            useradd,
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            str(home),
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise SystemUserError(f"useradd {name} failed: {done.stderr.strip()}")
    log.info("created system user %s", name)
    return pwd.getpwnam(name)


def _chown_tree(root: Path, account: pwd.struct_passwd) -> None:
    os.chown(root, account.pw_uid, account.pw_gid)
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)


def _hand_over(node: EmbeddedNode, settings: Settings) -> dict:
    """Under root: give the node's files to its system user; the subprocess identity to use."""
    if os.geteuid() != 0:
        return {}
    account = ensure_system_user(SYSTEM_USER, node.cache)
    for directory in (node.cache, node.cache / "nodes"):
        directory.chmod(0o755)
    if node.home.stat().st_uid != account.pw_uid:
        _chown_tree(node.home, account)
    _chown_tree(node.instance, account)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def prepare_instance(node: EmbeddedNode, home: Path, extra: Mapping[str, str] | None) -> None:
    """Create the instance directories and (re)write its elasticsearch.yml."""
    if not node.config_dir.is_dir():
        shutil.copytree(home / "config", node.config_dir)
    for directory in (node.data_dir, node.logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    (node.config_dir / "elasticsearch.yml").write_text(node_config(node, extra))
    node.launcher_log.write_text("")
    node.pid_file.unlink(missing_ok=True)


def _check_ports(node: EmbeddedNode) -> None:
    for port, role in ((node.port, "HTTP"), (node.transport_port, "transport")):
        if port_busy(port):
            raise PortInUseError(
                f"port {port} ({role}) on 127.0.0.1 is in use by another process; stop it or "
                "choose another port with CTXDB_ES_PORT (the transport port is that + 100)"
            )


def _health(url: str, timeout: float) -> str | None:
    """The cluster status colour, or None while the node does not answer."""
    request = f"{url}/_cluster/health?wait_for_status=yellow&timeout={max(1, int(timeout))}s"
    try:
        with urllib.request.urlopen(request, timeout=timeout + 5) as response:
            return json.load(response).get("status")
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _kill(pid: int, timeout: float) -> None:
    """SIGTERM `pid`, then SIGKILL it if it has not exited within `timeout` seconds."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.2)


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (an exited process waiting to be reaped counts as gone)."""
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def launch(node: EmbeddedNode, home: Path, jdk: Jdk, settings: Settings, deadline: float) -> None:
    """Start the prepared node `node` daemonized (as its system user under root); returns once
    the launcher reports it started, raises NodeStartError when it died or `deadline` passed."""
    env = {
        "PATH": _SYSTEM_PATH,
        "HOME": str(node.instance),
        "LANG": "C.UTF-8",
        "ES_JAVA_HOME": str(jdk.home),
        "ES_PATH_CONF": str(node.config_dir),
        "ES_JAVA_OPTS": f"-Xms{settings.node.heap} -Xmx{settings.node.heap}",
    }
    command = [str(home / "bin" / "elasticsearch"), "-d", "-p", str(node.pid_file)]
    user = _hand_over(node, settings)
    log.info("starting Elasticsearch %s on %s with Java %d", node.version, node.url, jdk.major)
    with node.launcher_log.open("a") as out:
        launcher = subprocess.Popen(
            command,
            env=env,
            cwd=node.logs_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **user,
        )
    try:
        code = launcher.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired as exc:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
        pid = running_pid(node)
        if pid:
            _kill(pid, 10.0)
        message = f"node on {node.url} did not start within {settings.node.start_timeout_s:.0f} s"
        raise NodeStartError(_with_log(message, node)) from exc
    if code != 0:
        message = f"node on {node.url} died during start-up (exit {code})"
        raise NodeStartError(_with_log(message, node))


def start(settings: Settings, extra_config: Mapping[str, str] | None = None) -> StartResult:
    """Start the node (installing it on first use); idempotent; waits for health yellow.

    Concurrent starts of the same node queue on a lock: the later ones find it running.
    """
    node = EmbeddedNode.from_settings(settings)
    wait = DOWNLOAD_TIMEOUT_S + 2 * settings.node.start_timeout_s
    with file_lock(node.cache / "nodes" / f"{node.port}.lock", wait):
        return _start_locked(node, settings, extra_config)


def _start_locked(
    node: EmbeddedNode, settings: Settings, extra_config: Mapping[str, str] | None
) -> StartResult:
    pid = running_pid(node)
    if pid is not None:
        return StartResult(node.url, pid, already_running=True)
    _check_ports(node)
    jdk = find_jdk(settings)
    home = ensure_home(settings, node.cache)
    deadline = time.monotonic() + settings.node.start_timeout_s
    prepare_instance(node, home, extra_config)
    launch(node, home, jdk, settings, deadline)
    while time.monotonic() < deadline:
        pid = running_pid(node)
        if pid is None:
            raise NodeStartError(_with_log(f"node on {node.url} exited during start-up", node))
        wait = min(5.0, max(1.0, deadline - time.monotonic()))
        if _health(node.url, wait) in {"yellow", "green"}:
            return StartResult(node.url, pid, already_running=False)
        time.sleep(0.5)
    stop(settings)
    raise NodeStartError(
        _with_log(
            f"node on {node.url} not healthy after {settings.node.start_timeout_s:.0f} s", node
        )
    )


def stop(settings: Settings) -> bool:
    """Stop the node cleanly (SIGTERM, SIGKILL after the stop timeout); False if not running."""
    node = EmbeddedNode.from_settings(settings)
    pid = running_pid(node)
    if pid is None:
        return False
    _kill(pid, STOP_TIMEOUT_S)
    node.pid_file.unlink(missing_ok=True)
    if not _port_released(node.port, PORT_RELEASE_S):
        log.warning("port %d still busy %.0f s after the node stopped", node.port, PORT_RELEASE_S)
    log.info("stopped Elasticsearch on %s (pid %d)", node.url, pid)
    return True


def _port_released(port: int, timeout: float) -> bool:
    """Wait until nothing holds `port`: the kernel may release the listener a moment after the
    process is gone (on a loaded machine), and a start right after a stop needs it free."""
    deadline = time.monotonic() + timeout
    while port_busy(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True
