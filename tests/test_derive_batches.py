"""How many processes derive a run's batches (`ctxdb.record.batches.worker_count`)."""

from __future__ import annotations

import gc
import os
import pickle

import pytest

from ctxdb.record.batches import paused_gc, worker_count
from ctxdb.storage.errors import StorageError

CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("setting", "batches", "expected"),
    [
        (0, 1, 1),
        (0, 100, CORES),
        (0, 2, min(CORES, 2)),
        (1, 100, 1),
        (4, 3, 3),
        (4, 100, 4),
    ],
)
def test_processes_follow_the_setting_and_never_exceed_the_batches(
    setting: int, batches: int, expected: int
) -> None:
    assert worker_count(setting, batches) == expected


def test_the_collector_is_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_storage_error_crosses_a_process_boundary_whole() -> None:
    """A worker's `StorageError` reaches the caller with its table, action and reason."""
    error = pickle.loads(pickle.dumps(StorageError("turn_logs", "/d/turn_logs", "write", 28)))

    assert isinstance(error, StorageError)
    assert str(error) == (
        "cannot write table turn_logs at /d/turn_logs: disk full (no space left on device)"
    )
