"""A job whose only step blocks until released: the run worker that tests/test_run_monitoring.py
kills. The step writes the file named by CTXDB_TEST_STARTED when it runs, then waits (at most
CTXDB_TEST_HOLD_S seconds) for the file named by CTXDB_TEST_RELEASE."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dagster import in_process_executor, job, op


@op
def hold() -> None:
    Path(os.environ["CTXDB_TEST_STARTED"]).write_text(str(os.getpid()))
    release = Path(os.environ["CTXDB_TEST_RELEASE"])
    deadline = time.monotonic() + float(os.environ.get("CTXDB_TEST_HOLD_S", "120"))
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.2)


@job(executor_def=in_process_executor)
def blocking_job() -> None:
    hold()
