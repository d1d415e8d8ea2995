"""The shard partitions of the embedding and index assets (issue 17: partitions that fan out).

`role_row_embeddings` and `search_index` are partitioned into `CTXDB_SHARDS` static hash shards of
the conversation id (`ctxdb.storage.shards`). The count is read once per process, the first time
Dagster asks for the partition keys (when the code location's Definitions are built), never at
import. A run of one partition embeds and indexes only that shard's role rows and turns, under the
shard's own watermarks, index state and writer lease, so Dagster runs the shards side by side (a
backfill of every partition, `shards_job`, or the multiprocess/Celery/Kubernetes executors of
docs/scale-out.md) and shows each shard's status. `memory_job` runs over the whole partition range
(`all_shards_tags()`) in one run: its steps cover every shard at once, under the global
watermarks, index state and lease, and Dagster records every partition as materialized.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime

from dagster import AssetExecutionContext, Failure, StaticPartitionsDefinition

from ctxdb.settings import get_settings
from ctxdb.storage.shards import WHOLE_RANGE_JOBS, Shard

SHARD_TAG = "ctxdb/shard"
"""Run tag of a shard run (for the eye: the run queue limits runs per `dagster/partition`)."""


@functools.cache
def shard_count() -> int:
    """CTXDB_SHARDS, read once per process (the partitions must not change under a loaded
    code location)."""
    return get_settings().shards


class ShardPartitions(StaticPartitionsDefinition):
    """The static partitions "0" .. "<shards - 1>": Dagster's static partitions whose keys
    (`get_partition_keys`, the public method every other one here goes through) are made from
    `shard_count()` when first asked for, so importing the assets reads no settings."""

    def __init__(self) -> None:
        """No keys yet: `get_partition_keys` makes them."""

    def get_partition_keys(
        self,
        current_time: datetime | None = None,
        dynamic_partitions_store: object = None,
    ) -> Sequence[str]:
        return [str(index) for index in range(shard_count())]

    def filter_valid_partition_keys(self, partition_keys: set[str]) -> AbstractSet[str]:
        return set(self.get_partition_keys()) & partition_keys

    # Without the keys: Dagster formats, hashes and compares it while defining the assets.
    def __str__(self) -> str:
        return "Hash shards of the conversation id (CTXDB_SHARDS)"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardPartitions)

    def __hash__(self) -> int:
        return hash(repr(self))


SHARDS = ShardPartitions()


def all_shards_tags() -> dict[str, str]:
    """Run tags of a run over every shard partition at once (`memory_job`)."""
    return {
        "dagster/asset_partition_range_start": "0",
        "dagster/asset_partition_range_end": str(shard_count() - 1),
    }


def covers_every_shard(tags: Mapping[str, str]) -> bool:
    """Whether a run with these tags covers every shard partition at once (or has none), as
    `memory_job` does; a shard run or a run over some shards does not."""
    if "dagster/partition" in tags:
        return shard_count() == 1
    start = tags.get("dagster/asset_partition_range_start")
    end = tags.get("dagster/asset_partition_range_end")
    if start is None or end is None:
        return True
    return (start, end) == ("0", str(shard_count() - 1))


def require_every_shard(context: AssetExecutionContext) -> None:
    """Refuse, before any work, a run of a whole-range job (`memory_job`) over some shards only:
    what the Dagster UI's "Materialize all..." launches with "Multiple runs (One per selected
    partition)", each run repeating the unpartitioned steps. The error names the ways that run it
    over every shard at once."""
    tags = context.run.tags
    if context.job_name not in WHOLE_RANGE_JOBS or covers_every_shard(tags):
        return
    some = tags.get("dagster/partition") or "{}..{}".format(
        tags.get("dagster/asset_partition_range_start"),
        tags.get("dagster/asset_partition_range_end"),
    )
    raise Failure(
        description=(
            f"{context.job_name} covers every shard in one run, and this run covers shard "
            f"partition {some} only: run `ctxdb jobs run {context.job_name}`, or in the UI "
            '"Materialize all..." with all partitions and "Launch as... Single run"; '
            "one shard alone is `shards_job`"
        ),
        allow_retries=False,
    )


def run_shards(context: AssetExecutionContext) -> list[Shard | None]:
    """The shards a run covers, one after another: [None] (every shard at once) in a run over the
    whole range or without partitions, else the shard of each partition in the run."""
    if not (context.has_partition_key or context.has_partition_key_range):
        return [None]
    keys = context.partition_keys
    count = shard_count()
    if len(keys) == count:
        return [None]
    return [Shard(int(key), count) for key in keys]


def shards_label(shards: list[Shard | None]) -> str:
    """`all`, or the names of the shards a run covered."""
    return ", ".join("all" if shard is None else shard.name for shard in shards)
