"""Bulk writes under load shedding: items the node rejects with 429 are retried with backoff and
land; when the retries run out they are reported, never dropped silently.

The node is real. Only its answer is altered, by `Throttled`, which forwards every bulk request
to the node and then marks some items of the response as 429 `es_rejected_execution_exception`,
as a node under indexing pressure does; the embedded node cannot be made to shed load on demand.
"""

from __future__ import annotations

from typing import Any

import pytest
from elasticsearch import Elasticsearch

from ctxdb.index.bulk import BulkWriteFailed, bulk_write

pytestmark = pytest.mark.es


class Throttled:
    """A client whose bulk answers claim 429 for the first item of the first `times` requests."""

    def __init__(self, es: Elasticsearch, times: int) -> None:
        self.es = es
        self.times = times
        self.requests = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.es, name)

    def options(self, **kwargs: Any) -> Throttled:
        self.es = self.es.options(**kwargs)
        return self

    def bulk(self, *args: Any, **kwargs: Any) -> Any:
        response = self.es.bulk(*args, **kwargs)
        self.requests += 1
        if self.requests <= self.times:
            item = next(iter(response.body["items"][0].values()))
            item["status"] = 429
            item["error"] = {
                "type": "es_rejected_execution_exception",
                "reason": "rejected execution of coordinating operation",
            }
            response.body["errors"] = True
        return response


def actions(index: str, n: int) -> list[dict[str, Any]]:
    return [{"_index": index, "_id": f"d{i}", "_source": {"n": i}} for i in range(n)]


def test_rejected_items_are_retried_and_land(es, settings) -> None:
    index = f"{settings.elasticsearch.index_prefix}-throttle"
    es.indices.create(index=index)
    client = Throttled(es, times=2)
    report = bulk_write(client, actions(index, 5), chunk_size=5, max_retries=3, threads=1)
    assert (report.indexed, report.failures) == (5, [])
    assert client.requests == 3  # the first request and two retries of the rejected item
    es.indices.refresh(index=index)
    assert es.count(index=index)["count"] == 5


def test_items_still_rejected_after_the_retries_are_reported(es, settings) -> None:
    index = f"{settings.elasticsearch.index_prefix}-throttle"
    es.indices.create(index=index)
    client = Throttled(es, times=10)
    with pytest.raises(BulkWriteFailed, match="es_rejected_execution_exception") as info:
        bulk_write(client, actions(index, 3), chunk_size=3, max_retries=1, threads=1)
    assert [(f["id"], f["status"]) for f in info.value.failures] == [("d0", 429)]
    assert info.value.report.indexed == 2
