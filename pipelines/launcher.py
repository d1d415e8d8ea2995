"""The run launcher of the local Dagster instance (dagster.yaml `run_launcher`): Dagster's
`DefaultRunLauncher`, plus a worker health check so run monitoring can fail a dead run.

`DefaultRunLauncher` starts each run's worker as a process on this machine but cannot tell run
monitoring whether that process still lives. A worker killed mid-run (SIGKILL, the OOM killer)
then leaves its run `STARTED` forever, and with one run allowed at a time every queued run
(retention, compaction) waits behind it. The worker records its pid in the run's first engine
event that carries one ("Started process for run (pid: N)"); the health check looks that process
up, and the monitoring daemon (dagster.yaml `run_monitoring`) marks the run failed when it is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterEventType, DagsterInstance, DagsterRun, DefaultRunLauncher
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus

CLOCK_SLACK_S = 2.0
"""A process started this much after its pid was recorded is another one (the pid was reused)."""


def worker_pid(instance: DagsterInstance, run_id: str) -> tuple[int, float] | None:
    """The pid of the run's worker and when it was recorded (None before the worker reports)."""
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        data = event.engine_event_data if event is not None else None
        pid = data.metadata.get("pid") if data is not None else None
        if pid is not None:
            return int(str(pid.value)), record.timestamp
    return None


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def process_alive(pid: int, recorded_at: float) -> bool:
    """Whether `pid` still runs and is the process that was recorded at `recorded_at` (a zombie
    or a newer process with the same pid is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat.rsplit(") ", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return False
    started = _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started <= recorded_at + CLOCK_SLACK_S


class LocalRunLauncher(DefaultRunLauncher):
    """`DefaultRunLauncher` whose run workers run monitoring can check (same machine)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        found = worker_pid(self._instance, run.run_id)
        if found is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "worker pid not recorded yet")
        pid, recorded_at = found
        if process_alive(pid, recorded_at):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"worker process {pid} runs")
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"worker process {pid} is gone (killed or crashed)"
        )
