"""Two landings racing on the same corrupt file record it once in `quarantined_files` (a keyed
MERGE on path, size, mtime and reason), on real Delta tables, in two threads released together
just before their first commit."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from conftest_turn_record import NOW, Turn, write_jsonl

from ctxdb.landing.run import LandingStats, land
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, QUARANTINED_FILES, RAW_TURN_EVENTS


class StartLine:
    """A fence both landings hold: its first check (just before each run's first commit) waits
    until the other run has got there too, so both commit the same wave at the same time."""

    def __init__(self, runs: int) -> None:
        self.barrier = threading.Barrier(runs, timeout=60)
        self.waited = threading.local()

    def check(self) -> None:
        if not getattr(self.waited, "done", False):
            self.waited.done = True
            self.barrier.wait()

    @contextmanager
    def held(self) -> Iterator[StartLine]:
        yield self


def test_two_landings_of_one_corrupt_file_record_it_once(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", Turn("c-a", "t1").basic().events)
    data = gzip.compress(
        "".join(json.dumps(e) + "\n" for e in Turn("c-b", "t1").basic().events).encode()
    )
    (landing / "b.jsonl.gz").write_bytes(data[: len(data) // 2])  # a truncated gzip
    store = DeltaStore(str(tmp_path / "delta"))
    start = StartLine(2)

    def run() -> LandingStats:
        return land(store, str(landing), now=NOW, writer=start.held())

    with ThreadPoolExecutor(max_workers=2) as pool:
        stats = [f.result() for f in [pool.submit(run), pool.submit(run)]]

    assert [s.quarantined_files for s in stats] == [1, 1]  # each run read the file as corrupt
    files = store.read(QUARANTINED_FILES)
    assert files["source_file"].to_list() == [str(landing / "b.jsonl.gz")]
    assert files["reason"].to_list() == ["corrupt_gzip"]
    assert store.read(RAW_TURN_EVENTS).height == 4  # the good file's events, once
    assert sorted(store.read(LANDED_FILES)["source_file"]) == [str(landing / "a.jsonl")]
