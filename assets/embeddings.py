"""Asset `role_row_embeddings` (with the `embeddings` cache): embed new or changed role rows."""

from collections.abc import Iterator

from dagster import AssetExecutionContext, MaterializeResult, MetadataValue, multi_asset

from assets.specs import DELTA_KINDS, WRITER_POOL, materialization_metadata, table_spec
from ctxdb.embedding.stage import embed_role_rows
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
            deps=[ROLE_ROWS],
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
    pool=WRITER_POOL,
    can_subset=False,
)
def role_row_embeddings(
    context: AssetExecutionContext, delta: DeltaResource, embedder: EmbedderResource
) -> Iterator[MaterializeResult]:
    model = embedder.embedder()
    store = delta.store()
    report = embed_role_rows(store, model, batch_size=model.batch_size, progress=context.log.info)
    if report.error:
        context.log.warning(f"{report.pending} rows stay pending: {report.error}")
    if report.failed:
        context.log.warning(f"{report.failed} rows failed to embed; retried on the next run")
    metadata = report.as_metadata()
    metadata["model_id"] = MetadataValue.text(model.model_id)
    yield MaterializeResult(
        asset_key=ROW_EMBEDDINGS,
        metadata={
            **materialization_metadata(store, ROW_EMBEDDINGS, {"updated": report.to_process}),
            **metadata,
        },
    )
    yield MaterializeResult(
        asset_key=EMBEDDINGS,
        metadata={
            **materialization_metadata(store, EMBEDDINGS, {"inserted": report.embedded}),
            "model_id": MetadataValue.text(model.model_id),
        },
    )
