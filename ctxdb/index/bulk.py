"""Streaming bulk writes with retries and per-document error collection.

`streaming_bulk` retries rejected-for-load (429) items with backoff; every other failed item is
collected with its id, status and reason, and the whole write fails loudly once the stream is
done (so good documents are written and nothing is lost silently).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import ConnectionError as ESConnectionError
from elasticsearch import ConnectionTimeout, Elasticsearch, helpers

log = logging.getLogger(__name__)


class ElasticsearchUnavailable(RuntimeError):
    """Elasticsearch could not be reached; nothing was recorded as indexed, so rerun later."""


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


def bulk_write(
    es: Elasticsearch,
    actions: Iterable[dict[str, Any]],
    *,
    chunk_size: int = 500,
    max_retries: int = 3,
    raise_on_failure: bool = True,
) -> BulkReport:
    """Stream index/delete actions; deleting a missing document is not a failure."""
    report = BulkReport()
    try:
        for ok, item in helpers.streaming_bulk(
            es,
            actions,
            chunk_size=chunk_size,
            max_retries=max_retries,
            initial_backoff=1,
            raise_on_error=False,
            raise_on_exception=True,
        ):
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
    except (ESConnectionError, ConnectionTimeout) as exc:
        raise ElasticsearchUnavailable(
            f"Elasticsearch is unreachable ({exc}); nothing was marked indexed, rerun to catch up"
        ) from exc
    if report.failures:
        for failure in report.failures:
            log.error("document %s rejected: %s", failure["id"], failure["reason"])
        if raise_on_failure:
            raise BulkWriteFailed(report.failures, report)
    return report
