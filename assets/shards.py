"""The shard partitions of the embedding and index assets (issue 17: partitions that fan out).

`role_row_embeddings` and `search_index` are partitioned into `CTXDB_SHARDS` static hash shards of
the conversation id (`ctxdb.storage.shards`; the count is read when the code location loads). A
run of one partition embeds and indexes only that shard's role rows and turns, under the shard's
own watermarks, index state and writer lease, so Dagster runs the shards side by side (a backfill
of every partition, `shards_job`, or the multiprocess/Celery/Kubernetes executors of
docs/scale-out.md) and shows each shard's status. `memory_job` runs over the whole partition range
(`ALL_SHARDS_TAGS`) in one run: its steps cover every shard at once, under the global watermarks,
index state and lease, and Dagster records every partition as materialized.
"""

from __future__ import annotations

from dagster import AssetExecutionContext, StaticPartitionsDefinition

from ctxdb.settings import get_settings
from ctxdb.storage.shards import Shard

SHARD_COUNT = get_settings().shards
SHARDS = StaticPartitionsDefinition([str(index) for index in range(SHARD_COUNT)])
SHARD_TAG = "ctxdb/shard"
"""Run tag of a shard run (for the eye: the run queue limits runs per `dagster/partition`)."""
ALL_SHARDS_TAGS = {
    "dagster/asset_partition_range_start": "0",
    "dagster/asset_partition_range_end": str(SHARD_COUNT - 1),
}
"""Run tags of a run over every shard partition at once (`memory_job`)."""


def run_shards(context: AssetExecutionContext) -> list[Shard | None]:
    """The shards a run covers, one after another: [None] (every shard at once) in a run over the
    whole range or without partitions, else the shard of each partition in the run."""
    if not (context.has_partition_key or context.has_partition_key_range):
        return [None]
    keys = context.partition_keys
    if len(keys) == SHARD_COUNT:
        return [None]
    return [Shard(int(key), SHARD_COUNT) for key in keys]


def shards_label(shards: list[Shard | None]) -> str:
    """`all`, or the names of the shards a run covered."""
    return ", ".join("all" if shard is None else shard.name for shard in shards)
