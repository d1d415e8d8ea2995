"""`reindex_job`: rebuild every index from Delta as a new version, verify, swap aliases, drop old.

Run config (all optional):
  ops.build_verify_swap.config.model: embedding model to index with (default: the configured
    CTXDB_EMBEDDING_MODEL; change that setting first so incremental runs keep using the new one).
  ops.build_verify_swap.config.min_coverage_pct: fail before the swap below this vector coverage
    (default 0).
  ops.drop_retired_indices.config.grace_period_s: seconds the old indices stay after the swap
    (default 60).
"""

from dagster import AssetMaterialization, Config, OpExecutionContext, job, op

from assets.specs import WRITER_POOL, materialization_metadata
from ctxdb.lifecycle.reindex import drop_after_grace, reindex
from ctxdb.storage.tables import INDEX_STATE
from pipelines.ops_jobs import WRITER_TAGS
from pipelines.step_errors import FAILURE_HOOKS
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.embedder import EmbedderResource
from resources.settings import SettingsResource


class BuildConfig(Config):
    model: str | None = None
    min_coverage_pct: float = 0.0


class DropConfig(Config):
    grace_period_s: float = 60.0


@op(pool=WRITER_POOL)
def build_verify_swap(
    context: OpExecutionContext,
    config: BuildConfig,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
    embedder: EmbedderResource,
) -> list[str]:
    """Build the next version of every index from Delta, verify it, swap the aliases."""
    store = delta.store()
    report = reindex(
        store,
        es.client(),
        settings.get(),
        embedder.embedder(store, config.model),
        min_coverage_pct=config.min_coverage_pct,
    )
    context.log.info(f"reindex done: {report.as_metadata()}")
    context.add_output_metadata(report.as_metadata())
    context.log_event(
        AssetMaterialization(
            "search_index", description="reindexed from Delta", metadata=report.as_metadata()
        )
    )
    context.log_event(
        AssetMaterialization(INDEX_STATE, metadata=materialization_metadata(store, INDEX_STATE))
    )
    return [swap.old for swap in report.swaps if swap.old]


@op(pool=WRITER_POOL)
def drop_retired_indices(
    context: OpExecutionContext,
    config: DropConfig,
    settings: SettingsResource,
    es: ElasticsearchResource,
    retired: list[str],
) -> list[str]:
    """Wait out the grace period, then delete the retired indices."""
    context.log.info(f"keeping {retired} for {config.grace_period_s}s")
    dropped = drop_after_grace(es.client(), settings.get(), grace_s=config.grace_period_s)
    context.log.info(f"dropped {dropped}")
    return dropped


@job(
    description="Zero-downtime reindex from Delta with an atomic alias swap.",
    tags=WRITER_TAGS,
    hooks=FAILURE_HOOKS,
)
def reindex_job() -> None:
    drop_retired_indices(build_verify_swap())
