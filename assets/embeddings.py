"""Asset `role_row_embeddings`: embed new or changed role rows (cached by model and text hash)."""

from dagster import AssetExecutionContext, AssetKey, MaterializeResult, MetadataValue, asset

from ctxdb.embedding.stage import embed_role_rows
from resources.delta import DeltaResource
from resources.embedder import EmbedderResource


@asset(
    deps=[AssetKey("role_rows")],
    group_name="index",
    description="Embedding status per role row; vectors cached in the `embeddings` Delta table.",
)
def role_row_embeddings(
    context: AssetExecutionContext, delta: DeltaResource, embedder: EmbedderResource
) -> MaterializeResult:
    model = embedder.embedder()
    report = embed_role_rows(
        delta.store(), model, batch_size=model.batch_size, progress=context.log.info
    )
    if report.error:
        context.log.warning(f"{report.pending} rows stay pending: {report.error}")
    if report.failed:
        context.log.warning(f"{report.failed} rows failed to embed; retried on the next run")
    metadata = report.as_metadata()
    metadata["model_id"] = MetadataValue.text(model.model_id)
    return MaterializeResult(metadata=metadata)
