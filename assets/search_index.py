"""Asset `search_index`: incremental bulk indexing of rows and turns, plus its asset checks.

Partitioned by shard (`assets.shards`) like `role_row_embeddings`: a partition indexes one shard's
documents under the shard's writer lease; an unpartitioned run (`memory_job`) indexes all. The
checks look at the whole index (`index_checks_job` runs them after the shards)."""

from collections.abc import Iterator
from datetime import UTC, datetime

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    MaterializeResult,
    MetadataValue,
    asset_check,
    multi_asset,
)

from assets.shards import SHARDS, run_shards, shards_label
from assets.specs import OWNERS, materialization_metadata, table_spec
from ctxdb.index.checks import count_mismatches
from ctxdb.index.index_failures import failures_report
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.status import expired_ids, vector_coverage
from ctxdb.index.sync import sync_live
from ctxdb.storage.tables import (
    CONVERSATION_TIMELINES,
    INDEX_FAILURES,
    INDEX_STATE,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_CATALOG,
    TURN_LOGS,
)
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.embedder import EmbedderResource
from resources.settings import SettingsResource

SEARCH_INDEX = AssetKey("search_index")


@multi_asset(
    specs=[
        AssetSpec(
            key=SEARCH_INDEX,
            deps=[
                AssetKey(ROW_EMBEDDINGS),
                AssetKey(ROLE_ROWS),
                AssetKey(TURN_LOGS),
                AssetKey(TURN_CATALOG),
                AssetKey(CONVERSATION_TIMELINES),
            ],
            group_name="index",
            description="Role rows and turns in Elasticsearch (versioned indices behind aliases).",
            owners=OWNERS,
            kinds={"elasticsearch"},
        ),
        table_spec(
            INDEX_STATE,
            "Per index version: the Delta versions last synced (the incremental watermark).",
            group="index",
            deps=[ROLE_ROWS, TURN_LOGS],
        ),
        table_spec(
            INDEX_FAILURES,
            "Documents Elasticsearch rejected as bad (the sync went on): id, owner, error.",
            group="index",
            deps=[ROLE_ROWS, TURN_LOGS],
        ),
    ],
    partitions_def=SHARDS,
    can_subset=False,
)
def search_index(
    context: AssetExecutionContext,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
    embedder: EmbedderResource,
) -> Iterator[MaterializeResult]:
    store = delta.store()
    shards = run_shards(context)
    reports = [
        report
        for shard in shards
        for report in sync_live(
            store, es.client(), settings.get(), model_id=embedder.model_id(store), shard=shard
        )
    ]
    metadata: dict[str, int | float | str | bool] = {"shard": shards_label(shards)}
    for report in reports:
        if report.skipped:  # a sync logs its own counts (ctxdb log)
            context.log.info(f"{report.index}: no change")
        for name, value in report.as_metadata().items():
            if name == "kind":
                continue
            key = f"{report.kind}_{name}"
            earlier = metadata.get(key)
            if not isinstance(value, bool | str) and isinstance(earlier, int | float):
                value = earlier + value  # counts add up over the shards
            metadata[key] = value
        if report.rejected:
            context.log.warning(
                f"{report.index}: {report.rejected} documents rejected (see index_failures)"
            )
    yield MaterializeResult(asset_key=SEARCH_INDEX, metadata=metadata)
    yield MaterializeResult(
        asset_key=INDEX_STATE, metadata=materialization_metadata(store, INDEX_STATE)
    )
    yield MaterializeResult(
        asset_key=INDEX_FAILURES,
        metadata={
            **materialization_metadata(store, INDEX_FAILURES),
            "rejected": sum(r.rejected for r in reports),
        },
    )


@asset_check(asset=SEARCH_INDEX, description="Documents per index equal the rows/turns in Delta.")
def doc_count_matches_delta(
    context: AssetCheckExecutionContext,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
) -> AssetCheckResult:
    prefix = settings.get().elasticsearch.index_prefix
    mismatches = count_mismatches(delta.store(), es.client(), prefix)
    metadata = {f"{m.kind}_{k}": v for m in mismatches for k, v in m.as_metadata().items()}
    return AssetCheckResult(passed=all(m.ok for m in mismatches), metadata=metadata)


@asset_check(asset=SEARCH_INDEX, description="Share of embeddable row documents with a vector.")
def embedding_coverage(
    context: AssetCheckExecutionContext, settings: SettingsResource, es: ElasticsearchResource
) -> AssetCheckResult:
    alias = alias_name(settings.get().elasticsearch.index_prefix, ROWS)
    with_vector, embeddable, pct = vector_coverage(es.client(), alias)
    return AssetCheckResult(
        passed=with_vector == embeddable,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "coverage_pct": round(pct, 2),
            "with_vector": with_vector,
            "embeddable": embeddable,
        },
    )


@asset_check(asset=SEARCH_INDEX, description="No document is past its expires_at.")
def no_expired_documents(
    context: AssetCheckExecutionContext, settings: SettingsResource, es: ElasticsearchResource
) -> AssetCheckResult:
    prefix = settings.get().elasticsearch.index_prefix
    client, now = es.client(), datetime.now(UTC)
    metadata: dict[str, int | str] = {}
    total = 0
    for kind in (ROWS, TURNS):
        n, ids = expired_ids(client, alias_name(prefix, kind), now)
        total += n
        metadata[f"{kind}_expired"] = n
        metadata[f"{kind}_expired_ids"] = ", ".join(ids)
    return AssetCheckResult(passed=total == 0, severity=AssetCheckSeverity.WARN, metadata=metadata)


@asset_check(
    asset=AssetKey(INDEX_FAILURES),
    description="Documents Elasticsearch rejected, by index kind (the sync went on without them).",
)
def index_failures_count(
    context: AssetCheckExecutionContext, delta: DeltaResource
) -> AssetCheckResult:
    outcome = failures_report(delta.store())
    return AssetCheckResult(
        passed=outcome["count"] == 0,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "count": outcome["count"],
            "by_kind": MetadataValue.json(outcome["by_kind"]),
            "offenders": MetadataValue.json(outcome["offenders"]),
        },
    )
