"""Asset `embedding_prefill`: the vector cache filled shard by shard in parallel steps before
`role_row_embeddings` embeds (`ctxdb.embedding.prefill`), so the main job's embedding-bound part
spreads over every worker the executor has.

`prefill_plan` counts the texts the embedding stage will send to the model. From
`CTXDB_EMBEDDING_PREFILL_MIN_TEXTS` of them (unset: 2,000 in a code location whose executor sends
steps to workers, never in the default one) it maps one `prefill_step` per shard (`CTXDB_SHARDS`),
else none and the stage embeds them in its own step as before. Each step reports the texts it
embedded (its output's `embedded`); the stage then counts them as cache hits. A step's only input
is its shard, carried in its mapping key (`resources.mapping_keys`), so steps on different machines
share no storage. `prefill_done` records the materialization once every step ended.
"""

from collections.abc import Iterator
from traceback import format_exc

from dagster import (
    AssetIn,
    AssetKey,
    DynamicOut,
    DynamicOutput,
    In,
    Nothing,
    OpExecutionContext,
    Out,
    Output,
    graph_asset,
    op,
)

from assets.shards import covers_every_shard, shard_count
from assets.specs import DELTA_KINDS, OWNERS
from ctxdb.embedding.prefill import count_uncached, prefill_shard
from ctxdb.storage.shards import Shard
from ctxdb.storage.tables import ROLE_ROWS
from resources.delta import DeltaResource
from resources.embedder import EmbedderResource
from resources.mapping_keys import MAPPING_KEYS

PREFILL = "embedding_prefill"


def shard_key(shard: Shard) -> str:
    """The mapping key of one shard's step (`3_of_4`)."""
    return f"{shard.index}_of_{shard.count}"


def key_shard(key: str) -> Shard:
    """The shard of a mapping key made by `shard_key`."""
    index, count = key.split("_of_")
    return Shard(int(index), int(count))


@op(ins={"after": In(Nothing)}, out=DynamicOut(str, io_manager_key=MAPPING_KEYS))
def prefill_plan(
    context: OpExecutionContext, delta: DeltaResource, embedder: EmbedderResource
) -> Iterator[DynamicOutput[str]]:
    """One step per shard when the stage has at least the configured number of texts to embed."""
    threshold = embedder.prefill_threshold()
    if threshold == 0:
        context.log.info("prefill off (CTXDB_EMBEDDING_PREFILL_MIN_TEXTS)")
        return
    if not covers_every_shard(context.run.tags):
        context.log.info("a run of some shards: they embed on their own, no prefill")
        return
    store = delta.store()
    texts = count_uncached(store, embedder.model_id(store))
    if texts < threshold:
        context.log.info(f"{texts} texts to embed (< {threshold}): role_row_embeddings embeds them")
        return
    count = shard_count()
    context.log.info(f"{texts} texts to embed: prefilling the cache in {count} parallel steps")
    for index in range(count):
        key = shard_key(Shard(index, count))
        yield DynamicOutput(key, mapping_key=key)


@op(out=Out(Nothing))
def prefill_step(
    context: OpExecutionContext, delta: DeltaResource, embedder: EmbedderResource, shard: str
) -> None:
    """Embed one shard's uncached texts into the cache. Whatever fails here (the model, the
    store) leaves the texts to the embedding stage, which embeds them or records why it could
    not: the prefill only saves the stage work, so it never fails the run."""
    store = delta.store()
    model = embedder.embedder(store)
    try:
        done = prefill_shard(
            store, model, key_shard(shard), batch_size=model.batch_size, progress=context.log.info
        )
    except Exception as exc:  # noqa: BLE001 - any failure only hands the texts back to the stage
        # the traceback too: a bug here must be visible even though the run goes on
        context.log.warning(
            f"shard {shard}: prefill failed, left to the embedding stage: {exc!r}\n{format_exc()}"
        )
        return
    context.log.info(f"shard {shard}: {done} texts embedded into the cache")
    context.add_output_metadata({"embedded": done})


@op(ins={"steps": In(Nothing)}, out=Out(Nothing))
def prefill_done() -> Output[None]:
    """The prefill's materialization, once every shard step ended."""
    return Output(None)


@graph_asset(
    name=PREFILL,
    description="The vector cache filled with the texts role_row_embeddings will embed, one"
    " parallel step per shard, when there are at least CTXDB_EMBEDDING_PREFILL_MIN_TEXTS; each"
    " step reports what it embedded, and role_row_embeddings counts those texts as cache hits.",
    group_name="index",
    owners=OWNERS,
    kinds={*DELTA_KINDS, "pytorch"},
    ins={"role_rows": AssetIn(key=AssetKey(ROLE_ROWS), dagster_type=Nothing)},
)
def embedding_prefill(role_rows: None) -> None:
    return prefill_done(prefill_plan(role_rows).map(prefill_step).collect())
