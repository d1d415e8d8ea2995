"""Asset `role_row_embeddings` (with the `embeddings` cache): embed new or changed role rows.

Partitioned by shard (`assets.shards`): a partition embeds one shard's rows; an unpartitioned run
(`memory_job`) embeds every shard's, after `embedding_prefill` may have filled the cache in
parallel steps (then its texts are cache hits)."""

from collections.abc import Iterator

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, multi_asset

from assets.embedding_prefill import PREFILL
from assets.shards import SHARDS, run_shards, shards_label
from assets.specs import DELTA_KINDS, materialization_metadata, table_spec
from ctxdb.embedding.stage import EmbedReport, embed_role_rows
from ctxdb.storage.tables import EMBEDDINGS, ROLE_ROWS, ROW_EMBEDDINGS
from resources.delta import DeltaResource
from resources.embedder import EmbedderResource

KINDS = {*DELTA_KINDS, "pytorch"}


@multi_asset(
    specs=[
        table_spec(
            ROW_EMBEDDINGS,
            "Embedding status per role row (ok, skipped, pending, failed) for the model.",
            group="index",
            deps=[ROLE_ROWS, PREFILL],
            kinds=KINDS,
        ),
        table_spec(
            EMBEDDINGS,
            "The vector cache: one all-MiniLM-L6-v2 vector per (model, text hash).",
            group="index",
            deps=[ROLE_ROWS],
            kinds=KINDS,
        ),
    ],
    partitions_def=SHARDS,
    can_subset=False,
)
def role_row_embeddings(
    context: AssetExecutionContext, delta: DeltaResource, embedder: EmbedderResource
) -> Iterator[MaterializeResult]:
    store = delta.store()
    model = embedder.embedder(store)
    context.log.info(f"embedding role rows with {model.model_id}")
    shards = run_shards(context)
    report = combined(
        [
            embed_role_rows(
                store, model, batch_size=model.batch_size, progress=context.log.info, shard=shard
            )
            for shard in shards
        ]
    )
    if report.error:
        context.log.warning(f"{report.pending} rows stay pending: {report.error}")
    if report.failed:
        context.log.warning(f"{report.failed} rows failed to embed; retried on the next run")
    yield MaterializeResult(
        asset_key=ROW_EMBEDDINGS,
        metadata={
            **materialization_metadata(store, ROW_EMBEDDINGS, {"updated": report.to_process}),
            **report.as_metadata(),
            "model_id": MetadataValue.text(model.model_id),
            "shard": MetadataValue.text(shards_label(shards)),
        },
    )
    yield MaterializeResult(
        asset_key=EMBEDDINGS,
        metadata={
            **materialization_metadata(store, EMBEDDINGS, {"inserted": report.embedded}),
            "model_id": MetadataValue.text(model.model_id),
        },
    )


def combined(reports: list[EmbedReport]) -> EmbedReport:
    """One report of the runs over several shards (their counts and seconds added up)."""
    if len(reports) == 1:
        return reports[0]
    total = EmbedReport(
        total_rows=reports[-1].total_rows,
        error=next((r.error for r in reports if r.error), None),
    )
    for name in ("to_process", "cache_hits", "embedded", "failed", "skipped", "pending", "seconds"):
        setattr(total, name, sum(getattr(r, name) for r in reports))
    return total
