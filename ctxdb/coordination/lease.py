"""The writer lease: one Elasticsearch-writing operation at a time, across processes and machines.

Dagster keeps its writer jobs apart with a tag concurrency limit, but the CLI and other Dagster
instances do not see it. So every operation that writes the indices (live sync, reindex,
retention sweep, erasure) holds this lease: a document in `<prefix>-leases` created with
`op_type=create`, so exactly one holder wins. The holder renews it from a background thread;
a holder that dies stops renewing and its lease expires after `ttl_s`, when the next operation
takes it over (with the sequence number it read, so two cannot both take it over). Through the
same client the lease is re-entrant, so an operation may call another that also takes it.

Elasticsearch itself has no lock API; a conditional create/index on one document is the
documented way to get compare-and-set semantics, which is why this is written here.

Shard leases. The embedding and index stages of one shard of conversations
(`ctxdb.storage.shards`) write only that shard's documents, so shards may run at once: each holds
`writer-shard-<i>-of-<n>` (in `<prefix>-leases-shards`) instead of the global lease. A shard
lease and the global lease exclude each other: each holder first takes its own document, then
looks for the other kind (the global holder refreshes and searches the shard leases, a shard
holder reads the global document in real time) and gives its own back when it finds one live;
whichever of two racing holders looks second sees the first. Landing, derivation, reindex,
retention, erasure and compaction keep the global lease.

Landing and derivation are exactly-once by their Delta writes alone (keyed MERGEs), so for them
the lease guards throughput, not correctness. They require it (`delta_writer_lease_for`: refused
with `LeaseUnavailable` while Elasticsearch does not answer, unless
`CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false`) and fence every commit with `Lease.check()`,
which reads the lease document itself.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from elasticsearch import ApiError, ConflictError, Elasticsearch, NotFoundError, TransportError

from ctxdb.elastic.replicas import DEFAULT_REPLICAS, ensure_single_shard_index
from ctxdb.settings import Settings
from ctxdb.storage.shards import Shard

log = logging.getLogger(__name__)

WRITER = "writer"
SHARD_WRITER = "writer-"
"""Prefix of the shard leases' names: `writer-shard-<i>-of-<n>`."""
POLL_S = 2.0
"""How often a waiting writer tries the lease again."""
KEEP_TIMEOUT_S = 10.0
"""Longest wait for a renewal or a release (no retries): a writer failing on an unresponsive
node is not held up by its lease, which expires by itself."""
MAPPING = {
    "dynamic": "strict",
    "properties": {
        "owner": {"type": "keyword"},
        "operation": {"type": "keyword"},
        "acquired_at": {"type": "date"},
        "expires_at": {"type": "date"},
    },
}


class LeaseHeld(RuntimeError):
    """Another live operation holds the lease."""


class LeaseLost(RuntimeError):
    """The lease expired and was taken over while this operation still ran."""


class LeaseUnavailable(RuntimeError):
    """The lease store (Elasticsearch) does not answer and the operation requires the lease."""


@dataclass
class Lease:
    """A held lease; `check()` raises if it was lost (call it before each commit)."""

    es: Elasticsearch
    index: str
    name: str
    owner: str
    operation: str
    ttl_s: float
    seq_no: int
    primary_term: int
    acquired_at: str
    lost: threading.Event = field(default_factory=threading.Event)
    lost_because: str = "expired or taken over"
    unreachable: bool = False
    depth: int = 1

    def check(self) -> None:
        """Fencing: raise `LeaseLost` unless the lease is still this holder's, read from the lease
        document itself (a realtime get): there, naming this owner and acquisition, and not
        expired. A check that cannot reach Elasticsearch fails too (the lease cannot be shown to
        be ours), as `LeaseUnavailable` naming the outage: nobody took the lease over."""
        if not self.lost.is_set():
            problem, unreachable = self._held_problem()
            if problem is not None:
                self.lost_because, self.unreachable = problem, unreachable
                self.lost.set()
                log.error("lost the %s lease of %s: %s", self.name, self.operation, problem)
        if not self.lost.is_set():
            return
        if self.unreachable:
            raise LeaseUnavailable(
                f"{self.operation} lost Elasticsearch mid-run, so the {self.name} lease cannot be"
                f" shown to be held ({self.lost_because}); stopped before the next commit"
            )
        raise LeaseLost(
            f"the {self.name} lease of {self.operation} ({self.owner}) was lost"
            f" ({self.lost_because}); stopping before the next commit"
        )

    def _held_problem(self) -> tuple[str | None, bool]:
        """Why the lease document does not show this holder holding the lease (None: it does),
        and whether that is because Elasticsearch did not answer."""
        try:
            source = _bounded(self.es).get(index=self.index, id=self.name)["_source"]
        except NotFoundError:
            return "the lease document is gone", False
        except (TransportError, ApiError) as exc:
            return f"cannot read the lease document: {_first_line(exc)}", True
        if (source["owner"], source["acquired_at"]) != (self.owner, self.acquired_at):
            return f"now held by {source['operation']} ({source['owner']})", False
        if datetime.fromisoformat(source["expires_at"]) <= datetime.now(UTC):
            return f"expired at {source['expires_at']}", False
        return None, False

    def renew(self) -> None:
        """Push the expiry `ttl_s` ahead, conditional on still holding the lease."""
        try:
            response = _bounded(self.es).index(
                index=self.index,
                id=self.name,
                document=_document(self.owner, self.operation, self.ttl_s, self.acquired_at),
                if_seq_no=self.seq_no,
                if_primary_term=self.primary_term,
            )
        except (ConflictError, NotFoundError):
            self.lost_because = "another holder changed or removed the lease document"
            self.lost.set()
            log.error("lost the %s lease of %s", self.name, self.operation)
            return
        self.seq_no, self.primary_term = response["_seq_no"], response["_primary_term"]


_HELD: dict[tuple[int, str, str], Lease] = {}
_HELD_LOCK = threading.Lock()


def lease_index(prefix: str) -> str:
    return f"{prefix}-leases"


def shard_lease_index(prefix: str) -> str:
    return f"{prefix}-leases-shards"


def shard_lease_name(shard_name: str) -> str:
    """The lease of one shard (`shard_name` as `Shard.name` spells it)."""
    return f"{SHARD_WRITER}{shard_name}"


def _is_shard(name: str) -> bool:
    return name.startswith(SHARD_WRITER)


def owner_id() -> str:
    """Who holds a lease: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


@contextmanager
def writer_lease(
    es: Elasticsearch,
    prefix: str,
    operation: str,
    *,
    ttl_s: float,
    wait_s: float = 0.0,
    name: str = WRITER,
    replicas: str = DEFAULT_REPLICAS,
) -> Iterator[Lease]:
    """Hold the `name` lease under `prefix` while the block runs (raises `LeaseHeld` when a live
    operation elsewhere still holds it after `wait_s` seconds). The lease index has the replicas
    `replicas` asks for (`CTXDB_ELASTICSEARCH_REPLICAS` through `writer_lease_for`)."""
    key = (id(es), prefix, name)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held.depth += 1
    if held is not None:
        try:
            yield held
        finally:
            held.depth -= 1
        return
    lease = acquire_waiting(
        es, prefix, operation, ttl_s=ttl_s, wait_s=wait_s, name=name, replicas=replicas
    )
    with _HELD_LOCK:
        _HELD[key] = lease
    stop = threading.Event()
    heartbeat = threading.Thread(
        target=_heartbeat, args=(lease, stop), name=f"lease-{name}", daemon=True
    )
    heartbeat.start()
    try:
        yield lease
    finally:
        stop.set()
        heartbeat.join()
        with _HELD_LOCK:
            _HELD.pop(key, None)
        release(lease)


@contextmanager
def optional_writer_lease(
    es: Elasticsearch | None,
    prefix: str,
    operation: str,
    *,
    ttl_s: float,
    wait_s: float = 0.0,
    required: bool = False,
    replicas: str = DEFAULT_REPLICAS,
) -> Iterator[Lease | None]:
    """The writer lease for operations that may also run while Elasticsearch is down: held when
    Elasticsearch answers; when it does not, `LeaseUnavailable` if `required`, else None (with a
    warning). Retention and erasure run without it (they then leave their Elasticsearch deletes
    pending instead of writing); landing and derivation require it unless
    `CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false` (`delta_writer_lease_for`)."""
    if es is None:
        if required:
            raise LeaseUnavailable(f"{operation} requires the writer lease: no Elasticsearch")
        yield None
        return
    with ExitStack() as stack:
        try:
            lease = stack.enter_context(
                writer_lease(es, prefix, operation, ttl_s=ttl_s, wait_s=wait_s, replicas=replicas)
            )
        except (TransportError, ApiError) as exc:
            if isinstance(exc, ConflictError):
                raise
            if required:
                raise LeaseUnavailable(
                    f"{operation} refuses to run without the writer lease: Elasticsearch does not"
                    f" answer ({_first_line(exc)}); start it, or set"
                    " CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false to run without the lease"
                    " (unsafe)"
                ) from None
            log.warning("%s runs without the writer lease (Elasticsearch: %s)", operation, exc)
            lease = None
        yield lease


def writer_lease_for(
    es: Elasticsearch, settings: Settings, operation: str, shard: Shard | None = None
) -> AbstractContextManager[Lease]:
    """`writer_lease` with the prefix, ttl, wait and replicas of `settings`: the lease of `shard`
    when given, else the global one."""
    return writer_lease(
        es,
        settings.elasticsearch.index_prefix,
        operation,
        ttl_s=settings.elasticsearch.writer_lease_ttl_s,
        wait_s=settings.elasticsearch.writer_lease_wait_s,
        name=WRITER if shard is None else shard_lease_name(shard.name),
        replicas=settings.elasticsearch.replicas,
    )


def optional_writer_lease_for(
    es: Elasticsearch | None, settings: Settings, operation: str, required: bool = False
) -> AbstractContextManager[Lease | None]:
    """`optional_writer_lease` with the prefix, ttl, wait and replicas of `settings`."""
    return optional_writer_lease(
        es,
        settings.elasticsearch.index_prefix,
        operation,
        ttl_s=settings.elasticsearch.writer_lease_ttl_s,
        wait_s=settings.elasticsearch.writer_lease_wait_s,
        required=required,
        replicas=settings.elasticsearch.replicas,
    )


def delta_writer_lease_for(
    es: Elasticsearch | None, settings: Settings, operation: str
) -> AbstractContextManager[Lease | None]:
    """The writer lease of landing and derivation: `optional_writer_lease` with the settings'
    prefix, ttl and wait, required unless `CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false`. Their
    Delta writes are exactly-once by themselves (keyed MERGEs); the lease keeps two runs from doing
    the same work at once, and its `check()` fences every commit."""
    return optional_writer_lease_for(
        es, settings, operation, required=settings.elasticsearch.writer_lease_required
    )


def acquire_waiting(
    es: Elasticsearch,
    prefix: str,
    operation: str,
    *,
    ttl_s: float,
    wait_s: float,
    name: str = WRITER,
    replicas: str = DEFAULT_REPLICAS,
) -> Lease:
    """`acquire`, retried every `POLL_S` while another holder keeps the lease, for `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return acquire(es, prefix, operation, ttl_s=ttl_s, name=name, replicas=replicas)
        except LeaseHeld as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            log.info("%s waits for the %s lease: %s", operation, name, exc)
            time.sleep(min(POLL_S, left))


def acquire(
    es: Elasticsearch,
    prefix: str,
    operation: str,
    *,
    ttl_s: float,
    name: str = WRITER,
    replicas: str = DEFAULT_REPLICAS,
) -> Lease:
    """Take the lease now, taking over an expired one; raise `LeaseHeld` otherwise (also when
    a lease of the other kind, global or shard, is live; see the module docstring). The lease
    indices are created with, or brought to, the replicas `replicas` asks for."""
    lease = _acquire_own(es, prefix, operation, ttl_s=ttl_s, name=name, replicas=replicas)
    other = _live_shard_holder(es, prefix, replicas) if name == WRITER else None
    if _is_shard(name):
        other = _live_holder(es, lease_index(prefix), WRITER)
    if other is not None:
        release(lease)
        raise LeaseHeld(
            f"{other['operation']} ({other['owner']}) holds a writer lease on {prefix} that "
            f"excludes the {name} lease (if that process was killed, it frees itself in"
            f" {_left_s(other)} s, at {other['expires_at']})"
        )
    return lease


def _live_holder(es: Elasticsearch, index: str, name: str) -> dict | None:
    """The holder of lease `name` when it is live (a realtime get)."""
    try:
        source = es.get(index=index, id=name)["_source"]
    except NotFoundError:
        return None
    return source if datetime.fromisoformat(source["expires_at"]) > datetime.now(UTC) else None


def _live_shard_holder(es: Elasticsearch, prefix: str, replicas: str) -> dict | None:
    """A live shard lease's holder, if any (the shard lease index refreshed first, so every
    lease taken before this call is seen)."""
    index = shard_lease_index(prefix)
    ensure_single_shard_index(es, index, MAPPING, replicas)
    es.indices.refresh(index=index)
    hits = es.search(
        index=index,
        query={"range": {"expires_at": {"gt": datetime.now(UTC).isoformat()}}},
        size=1,
    )["hits"]["hits"]
    return hits[0]["_source"] if hits else None


def _acquire_own(
    es: Elasticsearch, prefix: str, operation: str, *, ttl_s: float, name: str, replicas: str
) -> Lease:
    index = shard_lease_index(prefix) if _is_shard(name) else lease_index(prefix)
    ensure_single_shard_index(es, index, MAPPING, replicas)
    owner = owner_id()
    document = _document(owner, operation, ttl_s)
    try:
        response = es.create(index=index, id=name, document=document)
    except ConflictError:
        current = es.get(index=index, id=name)
        holder = current["_source"]
        if datetime.fromisoformat(holder["expires_at"]) > datetime.now(UTC):
            raise LeaseHeld(
                f"{holder['operation']} ({holder['owner']}) holds the {name} lease on "
                f"{prefix} since {holder['acquired_at']}; try again when it has finished (if"
                f" that process was killed, the lease frees itself in {_left_s(holder)} s, at"
                f" {holder['expires_at']})"
            ) from None
        try:
            response = es.index(
                index=index,
                id=name,
                document=document,
                if_seq_no=current["_seq_no"],
                if_primary_term=current["_primary_term"],
            )
        except ConflictError:
            raise LeaseHeld(f"another operation took over the expired {name} lease") from None
        log.warning(
            "took over the expired %s lease of %s (%s)", name, holder["operation"], holder["owner"]
        )
    return Lease(
        es=es,
        index=index,
        name=name,
        owner=owner,
        operation=operation,
        ttl_s=ttl_s,
        seq_no=response["_seq_no"],
        primary_term=response["_primary_term"],
        acquired_at=document["acquired_at"],
    )


def release(lease: Lease) -> None:
    """Give the lease back (a lease already lost or gone is left alone)."""
    try:
        _bounded(lease.es).delete(
            index=lease.index,
            id=lease.name,
            if_seq_no=lease.seq_no,
            if_primary_term=lease.primary_term,
        )
    except (ConflictError, NotFoundError):
        log.warning("the %s lease was no longer ours to release", lease.name)
    except (TransportError, ApiError) as exc:
        log.warning("could not release the %s lease (%s); it expires by itself", lease.name, exc)


def _left_s(holder: dict) -> int:
    """Whole seconds until a live holder's lease expires unless renewed."""
    left = datetime.fromisoformat(holder["expires_at"]) - datetime.now(UTC)
    return max(0, int(left.total_seconds() + 0.999))


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def _bounded(es: Elasticsearch) -> Elasticsearch:
    return es.options(request_timeout=KEEP_TIMEOUT_S, max_retries=0, retry_on_timeout=False)


def _heartbeat(lease: Lease, stop: threading.Event) -> None:
    while not stop.wait(lease.ttl_s / 3) and not lease.lost.is_set():
        try:
            lease.renew()
        except Exception:  # noqa: BLE001  (a failed renewal is retried; expiry is the backstop)
            log.exception("could not renew the %s lease; retrying", lease.name)


def _document(
    owner: str, operation: str, ttl_s: float, acquired_at: str | None = None
) -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "owner": owner,
        "operation": operation,
        "acquired_at": acquired_at or now.isoformat(),
        "expires_at": (now + timedelta(seconds=ttl_s)).isoformat(),
    }
