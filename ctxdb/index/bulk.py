"""Streaming bulk writes with retries and per-document error collection.

Chunks go out on a small thread pool (requests in flight while the next chunk is built);
`streaming_bulk` retries rejected-for-load (429) items of each chunk with backoff; every other
failed item is collected with its id, status and reason, and the whole write fails loudly once
the stream is done (so good documents are written and nothing is lost silently).

Every bulk request waits at most `timeout_s` (client side, and as the server-side `timeout`), so a
node that stops answering (a frozen or overloaded JVM) fails the write with
`ElasticsearchUnavailable` after that time instead of hanging.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, TypedDict

from elasticsearch import ConnectionError as ESConnectionError
from elasticsearch import ConnectionTimeout, Elasticsearch, helpers

from ctxdb.settings.elasticsearch import ElasticsearchSettings
from ctxdb.storage.faults import reached

log = logging.getLogger(__name__)


class BulkOptions(TypedDict):
    """The keyword arguments of `bulk_write` a sync passes to each of its writes."""

    chunk_size: int
    threads: int
    timeout_s: float | None
    max_retries: int


DEFAULT_BULK = BulkOptions(chunk_size=500, threads=2, timeout_s=None, max_retries=3)


def bulk_options(settings: ElasticsearchSettings) -> BulkOptions:
    """The bulk options the Elasticsearch settings give every sync (incremental or reindex)."""
    return BulkOptions(
        chunk_size=settings.chunk_size,
        threads=settings.bulk_threads,
        timeout_s=settings.bulk_timeout_s,
        max_retries=DEFAULT_BULK["max_retries"],
    )


class ElasticsearchUnavailable(RuntimeError):
    """Elasticsearch could not be reached; nothing was recorded as indexed, so rerun later."""


@contextmanager
def outage_as_unavailable(url: str, operation: str) -> Iterator[None]:
    """Within the block, a connection failure or timeout is `ElasticsearchUnavailable`, one line
    naming `operation` and the URL (the client's own text names neither)."""
    try:
        yield
    except (ESConnectionError, ConnectionTimeout) as exc:
        raise ElasticsearchUnavailable(
            f"{operation}: Elasticsearch at {url} is unreachable ({type(exc).__name__}); "
            "nothing was swapped or marked indexed, rerun to catch up"
        ) from exc


class BulkWriteFailed(RuntimeError):
    """Some documents were rejected; `failures` has one entry per document with its reason."""

    def __init__(self, failures: list[dict[str, Any]], report: BulkReport) -> None:
        self.failures = failures
        self.report = report
        shown = "; ".join(f"{f['id']}: {f['status']} {f['reason']}" for f in failures[:5])
        more = f" (+{len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} documents rejected by Elasticsearch: {shown}{more}")


@dataclass
class BulkReport:
    """Counts of one bulk write."""

    indexed: int = 0
    deleted: int = 0
    not_found: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)


def _reason(result: dict[str, Any]) -> str:
    error = result.get("error")
    if isinstance(error, dict):
        reason, cause = str(error.get("reason")), error.get("caused_by", {}).get("reason")
        extra = f" ({cause})" if cause and cause not in reason else ""
        return f"{error.get('type')}: {reason}{extra}"
    return str(error or result.get("result"))


MAX_BACKOFF_S = 30
"""Longest wait between two retries of documents rejected for load."""


def _send_chunk(
    es: Elasticsearch, chunk: list[dict[str, Any]], max_retries: int, timeout_s: float | None
) -> list[tuple[bool, dict[str, Any]]]:
    """One bulk request (429s retried with backoff); results per action."""
    client = es if timeout_s is None else es.options(request_timeout=timeout_s)
    server: dict[str, Any] = {} if timeout_s is None else {"timeout": f"{max(int(timeout_s), 1)}s"}
    results = list(
        helpers.streaming_bulk(
            client,
            chunk,
            chunk_size=len(chunk),
            max_chunk_bytes=1 << 30,
            max_retries=max_retries,
            initial_backoff=1,
            max_backoff=MAX_BACKOFF_S,
            raise_on_error=False,
            raise_on_exception=True,
            **server,
        )
    )
    reached("es:bulk")
    return results


def _results(
    es: Elasticsearch,
    actions: Iterable[dict[str, Any]],
    chunk_size: int,
    max_retries: int,
    threads: int,
    timeout_s: float | None,
) -> Iterator[tuple[bool, dict[str, Any]]]:
    """Send chunks of `actions`, up to `threads` requests in flight, results in order.

    Documents are built on the calling thread while earlier chunks are serialized and indexed
    on worker threads, so building, serialization and Elasticsearch's own work overlap. Once a
    request fails, no further chunk is sent: a node that stopped answering holds the write for
    one request timeout, not one per queued chunk.
    """
    failed = threading.Event()

    def send(chunk: list[dict[str, Any]]) -> list[tuple[bool, dict[str, Any]]]:
        if failed.is_set():
            raise CancelledError("an earlier bulk request failed")
        try:
            return _send_chunk(es, chunk, max_retries, timeout_s)
        except BaseException:
            failed.set()
            raise

    iterator = iter(actions)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bulk") as pool:
        in_flight: deque[Future] = deque()
        while chunk := list(islice(iterator, chunk_size)):
            in_flight.append(pool.submit(send, chunk))
            if len(in_flight) > threads:
                yield from in_flight.popleft().result()
        while in_flight:
            yield from in_flight.popleft().result()


def _unavailable(
    exc: ConnectionTimeout | ESConnectionError, timeout_s: float | None
) -> ElasticsearchUnavailable:
    """The error a failed bulk write ends with: a timeout (also one a `failing_fast` client
    reports as an outage) says how long the request waited."""
    if isinstance(exc, ConnectionTimeout) or isinstance(exc.__cause__, ConnectionTimeout):
        waited = f"{timeout_s:g} s" if timeout_s is not None else "the request timeout"
        return ElasticsearchUnavailable(
            f"Elasticsearch did not answer a bulk request within {waited}; nothing was marked "
            "indexed, rerun to catch up"
        )
    return ElasticsearchUnavailable(
        f"Elasticsearch is unreachable ({exc}); nothing was marked indexed, rerun to catch up"
    )


def bulk_write(
    es: Elasticsearch,
    actions: Iterable[dict[str, Any]],
    *,
    chunk_size: int = 500,
    max_retries: int = 3,
    threads: int = 2,
    timeout_s: float | None = None,
    raise_on_failure: bool = True,
) -> BulkReport:
    """Stream index/delete actions; deleting a missing document is not a failure. Each bulk
    request waits at most `timeout_s` (default: the client's request timeout)."""
    report = BulkReport()
    try:
        for ok, item in _results(es, actions, chunk_size, max_retries, max(threads, 1), timeout_s):
            op, result = next(iter(item.items()))
            if op == "delete" and result.get("status") == 404:
                report.not_found += 1
            elif ok and op == "delete":
                report.deleted += 1
            elif ok:
                report.indexed += 1
            else:
                report.failures.append(
                    {
                        "id": result.get("_id"),
                        "status": result.get("status"),
                        "op": op,
                        "reason": _reason(result),
                    }
                )
    except (ConnectionTimeout, ESConnectionError) as exc:
        raise _unavailable(exc, timeout_s) from exc
    if report.failures:
        for failure in report.failures:
            log.error("document %s rejected: %s", failure["id"], failure["reason"])
        if raise_on_failure:
            raise BulkWriteFailed(report.failures, report)
    return report
