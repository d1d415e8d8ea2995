"""The recorder's background writer: a bounded queue drained by one thread into the spool.

The host's thread only validates an event and appends its line to a deque (no lock, never
waiting: a full queue drops the event and counts it), waking the writer when it sleeps. The
writer thread first recovers what dead writers left (`spool.recover`), then appends lines in
batches, fsyncs when a turn closes, and publishes the part file when it is due. A failed write
(folder not writable, disk full) keeps the batch and tries again with a growing pause; while it
fails, further events wait in memory up to the queue's size, and later ones are dropped (counted,
logged).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxdb.capture.spool import Publisher, Recovered, Spool, TurnKey, recover

log = logging.getLogger(__name__)

BATCH = 512
"""Queue items the writer takes per write (a short stretch of Python: the host's thread waits for
the GIL at most that long)."""
MAX_RETRY_S = 30.0
DROP_LOG_S = 10.0
"""At most one log line per this many seconds about dropped events."""


@dataclass(frozen=True)
class Line:
    """One validated event line; `opens` (its envelope) when it starts a turn, `closes` when it
    ends one."""

    data: bytes
    opens: dict[str, Any] | None = None
    closes: TurnKey | None = None


@dataclass
class Flush:
    """A marker: set once every line queued before it is written (`ok`) or given up."""

    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False


_STOP = object()


@dataclass
class WriterStats:
    """Counters of one writer (read by the host at any time)."""

    written: int = 0
    dropped: int = 0
    io_errors: int = 0
    published: int = 0
    recovered: Recovered | None = None


class Writer:
    """A thread that writes queued `Line`s into `spool` (see the module docstring)."""

    def __init__(
        self,
        spool: Spool,
        root: Path,
        queue_size: int,
        publish: Publisher | None = None,
        retry_s: float = 1.0,
    ) -> None:
        self.spool = spool
        self.root = root
        self.publish = publish
        self.queue: deque[Any] = deque()
        self.capacity = queue_size
        self._wake = threading.Event()
        self.retry_s = retry_s
        self.stats = WriterStats()
        self.error: OSError | None = None
        """The last write error, until a write succeeds again."""
        self._last_drop_log = 0.0
        self._drops_logged = 0
        self._thread = threading.Thread(target=self._run, name="ctxdb-capture-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def put(self, line: Line) -> bool:
        """Queue `line` without waiting; False (counted as dropped) when the queue is full."""
        if len(self.queue) >= self.capacity:
            self._dropped(1)
            return False
        self.queue.append(line)
        if not self._wake.is_set():
            self._wake.set()
        return True

    def flush(self, timeout: float | None) -> bool:
        """Wait until every line queued so far is written; False on timeout or a failed write."""
        marker = Flush()
        self.queue.append(marker)
        self._wake.set()
        return marker.done.wait(timeout) and marker.ok

    def stop(self, timeout: float | None) -> bool:
        """Write what is queued, publish the part file, release the lock; False on timeout."""
        if not self._thread.is_alive():
            return True
        self.queue.append(_STOP)
        self._wake.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _dropped(self, count: int) -> None:
        self.stats.dropped += count
        now = time.monotonic()
        if now - self._last_drop_log >= DROP_LOG_S:
            self._last_drop_log = now
            log.warning(
                "capture: %d event(s) dropped so far (queue of %d full or spool failing)",
                self.stats.dropped,
                self.capacity,
            )
            self._drops_logged = self.stats.dropped

    def _run(self) -> None:
        try:
            self.stats.recovered = recover(self.root, self.publish)
        except Exception:
            log.exception("capture: recovery of dead writers under %s failed", self.root)
        pending: list[Line] = []
        markers: list[Flush] = []
        stopping = False
        failures = 0
        next_try = 0.0
        while True:
            for item in self._batch(self._wait(pending, next_try)):
                if item is _STOP:
                    stopping = True
                elif isinstance(item, Flush):
                    markers.append(item)
                elif len(pending) < self.capacity:
                    pending.append(item)
                else:
                    self._dropped(1)
            if pending and (time.monotonic() >= next_try or stopping):
                if self._write(pending, must_sync=bool(markers) or stopping):
                    pending, failures = [], 0
                else:
                    failures += 1
                    pause = min(self.retry_s * 2 ** (failures - 1), MAX_RETRY_S)
                    next_try = time.monotonic() + pause
            elif markers and not pending:
                self._sync()
            if not pending:
                self._rotate_if_due()
            for marker in markers:
                marker.ok = not pending
                marker.done.set()
            markers = []
            if stopping:
                self._close(pending)
                return

    def _wait(self, pending: list[Line], next_try: float) -> float:
        if pending:
            return max(0.01, next_try - time.monotonic())
        due = self.spool.due()
        return 1.0 if due is None else min(1.0, max(0.01, due))

    def _batch(self, timeout: float) -> list[Any]:
        """The queued items (up to `BATCH`), waiting at most `timeout` seconds for the first."""
        if not self.queue:
            self._wake.wait(timeout)
        self._wake.clear()
        items: list[Any] = []
        popleft = self.queue.popleft
        try:
            while len(items) < BATCH:
                items.append(popleft())
        except IndexError:
            pass
        return items

    def _write(self, lines: list[Line], must_sync: bool) -> bool:
        """Append `lines` (fsync'd when one closes a turn, or `must_sync`); False on failure."""
        closes = [line.closes for line in lines if line.closes is not None]
        try:
            self.spool.write(
                [line.data for line in lines],
                [line.opens for line in lines if line.opens is not None],
                closes,
            )
            if closes or must_sync:
                self.spool.sync()
        except OSError as exc:
            self.stats.io_errors += 1
            if self.error is None:
                log.error(
                    "capture: cannot write %d event(s) to %s: %s (kept, retrying)",
                    len(lines),
                    self.spool.directory,
                    exc,
                )
            self.error = exc
            return False
        if self.error is not None:
            log.warning("capture: spool %s writable again", self.spool.directory)
            self.error = None
        self.stats.written += len(lines)
        return True

    def _sync(self) -> None:
        try:
            self.spool.sync()
        except OSError as exc:
            self.stats.io_errors += 1
            self.error = exc
            log.error("capture: fsync of %s failed: %s", self.spool.directory, exc)

    def _rotate_if_due(self) -> None:
        self._publishing(self.spool.rotate_if_due, "publishing a file of")

    def _close(self, pending: list[Line]) -> None:
        if pending:
            self._dropped(len(pending))
            log.error("capture: %d event(s) never written (spool failing)", len(pending))
        self._publishing(self.spool.close, "closing the spool")

    def _publishing(self, step: Callable[[], object], what: str) -> None:
        """Run a spool `step` that may publish a file (it returns it): counted as published, or
        its I/O error counted and logged as `what` of the spool failed."""
        try:
            if step() is not None:
                self.stats.published += 1
        except OSError as exc:
            self.stats.io_errors += 1
            log.error("capture: %s %s failed: %s", what, self.spool.directory, exc)
        if self.stats.dropped > self._drops_logged:
            log.warning("capture: %d event(s) dropped in all", self.stats.dropped)
