"""Operational jobs: the retention sweep, erasure and compaction, with their schedules and sensor.

All three write to the same Delta tables and indices as `memory_job` and `reindex_job`; the
instance runs one run at a time (dagster.yaml `max_concurrent_runs: 1`) and every job here carries
the `ctxdb/writer` tag so a `tag_concurrency_limits` entry keeps them exclusive if that limit is
ever raised (see docs/operations.md).

Run config (destructive jobs take it explicitly; the schedules pass it in full):
  retention_job  ops.retention_sweep.config: dry_run (default false), vacuum_retention_hours
                 (default CTXDB_RETENTION_VACUUM_HOURS, 168).
  erase_job      ops.erase_data.config: exactly one of user_id / conversation_id (required),
                 tenant (required when the id exists in several tenants), app, dry_run.
  compaction_job ops.compact_tables.config: fail_on_unbounded (default true).
"""

from datetime import UTC, datetime

from dagster import (
    AssetObservation,
    Config,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunRequest,
    ScheduleEvaluationContext,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    schedule,
    sensor,
)

from assets.specs import WRITER_POOL, table_changes
from ctxdb.errors import ElasticsearchSetupError
from ctxdb.index.health import check_cluster
from ctxdb.lifecycle.compaction import compact_all, unbounded
from ctxdb.lifecycle.erase import AmbiguousScope, Scope, erase
from ctxdb.lifecycle.retention import sweep
from ctxdb.lifecycle.scope import ScopeColumn
from ctxdb.storage.tables import (
    LIFECYCLE_JOURNAL,
    PURGED_CONVERSATIONS,
    RETENTION_PENDING,
    RETENTION_REPORT,
    SCHEMAS,
)
from pipelines.step_errors import FAILURE_HOOKS
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.settings import SettingsResource

WRITER_TAGS = {"ctxdb/writer": "delta-es"}
RETENTION_CRON = "0 3 * * *"
COMPACTION_CRON = "0 4 * * 0"


class RetentionConfig(Config):
    dry_run: bool = False
    vacuum_retention_hours: int | None = None


class EraseConfig(Config):
    user_id: str | None = None
    conversation_id: str | None = None
    tenant: str | None = None  # needed when the id exists in several tenants
    app: str | None = None
    dry_run: bool = False


class CompactionConfig(Config):
    fail_on_unbounded: bool = True


@op(tags=WRITER_TAGS, pool=WRITER_POOL)
def retention_sweep(
    context: OpExecutionContext,
    config: RetentionConfig,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
) -> Output[str]:
    """Purge expired data from Delta, Elasticsearch, file storage and the landing files; VACUUM
    every table with its window; keep the state tables bounded; report."""
    store = delta.store()
    report = sweep(
        store,
        es.client(),
        settings.get(),
        dry_run=config.dry_run,
        vacuum_hours=config.vacuum_retention_hours,
    )
    context.log.info(
        f"retention {report.status}: deleted {report.deleted_rows}, es {report.es_deleted}"
    )
    if report.es_pending:
        context.log.warning(
            f"{report.es_pending} Elasticsearch deletes pending (retried next run): {report.error}"
        )
    if not config.dry_run:
        written = (RETENTION_REPORT, RETENTION_PENDING, LIFECYCLE_JOURNAL)
        for event in table_changes(store, report.deleted_rows, written, "retention sweep"):
            context.log_event(event)
    return Output(report.run_id, metadata=report.as_metadata())


@op(tags=WRITER_TAGS, pool=WRITER_POOL)
def erase_data(
    context: OpExecutionContext,
    config: EraseConfig,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
) -> Output[str]:
    """Erase one user or one conversation of one tenant everywhere and verify nothing remains
    (a dry run logs what would go, per store)."""
    scope = erase_scope(config)
    store = delta.store()
    try:
        report = erase(store, es.client(), settings.get(), scope, dry_run=config.dry_run)
    except AmbiguousScope as exc:
        raise Failure(description=str(exc)) from exc
    context.log.info(report.message)
    if config.dry_run:
        return Output(report.run_id, metadata={"found": MetadataValue.json(report.found_counts)})
    written = (RETENTION_REPORT, PURGED_CONVERSATIONS, LIFECYCLE_JOURNAL)
    for event in table_changes(store, report.deleted_rows, written, "erasure"):
        context.log_event(event)
    metadata: dict[str, MetadataValue | str | int | bool] = {
        "status": report.status,
        "found": report.found,
        "verified": report.verified,
        "deleted_rows": MetadataValue.json(report.deleted_rows),
        "es_deleted": MetadataValue.json(report.es_deleted),
        "remaining": MetadataValue.json(report.remaining),
        "files_removed": report.files_removed,
        "landing_lines_removed": report.landing_lines_removed,
    }
    if report.found and not report.verified:
        raise Failure(description=report.message, metadata=metadata)
    return Output(report.run_id, metadata=metadata)


def erase_scope(config: EraseConfig) -> Scope:
    """Exactly one identifier must be given (an erasure is never implied by defaults), with the
    tenant (and app) it belongs to when given."""
    if bool(config.user_id) == bool(config.conversation_id):
        raise Failure(description="erase_job needs exactly one of user_id or conversation_id")
    column: ScopeColumn = "user_id" if config.user_id else "conversation_id"
    try:
        return Scope(
            column, config.user_id or config.conversation_id or "", config.tenant, config.app
        )
    except ValueError as exc:
        raise Failure(description=str(exc)) from exc


@op(tags=WRITER_TAGS, pool=WRITER_POOL)
def compact_tables(
    context: OpExecutionContext,
    config: CompactionConfig,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
) -> Output[int]:
    """OPTIMIZE every table whose registry policy compacts it and check small files stay
    bounded (under the writer lease)."""
    store = delta.store()
    results = compact_all(store, es.client(), settings.get())
    for result in results:
        if result.table in SCHEMAS:
            context.log_event(AssetObservation(asset_key=result.table, metadata=result.as_dict()))
    metadata: dict[str, MetadataValue | int] = {
        "tables": MetadataValue.json([r.as_dict() for r in results]),
        "files_removed": sum(r.files_removed for r in results),
        "small_files_after": sum(r.small_after for r in results),
        "unbounded_tables": MetadataValue.json(unbounded(results)),
    }
    context.log.info(f"compacted {len(results)} tables")
    if unbounded(results) and config.fail_on_unbounded:
        raise Failure(
            description=f"small files above the bound in {unbounded(results)}", metadata=metadata
        )
    return Output(len(results), metadata=metadata)


@job(
    tags=WRITER_TAGS,
    hooks=FAILURE_HOOKS,
    description="Daily retention sweep: Delta DELETE, landing-file rewrite, ES deletes, VACUUM "
    "and state-table upkeep.",
)
def retention_job() -> None:
    retention_sweep()


@job(
    tags=WRITER_TAGS,
    hooks=FAILURE_HOOKS,
    description="Erase one user or conversation everywhere (config required).",
)
def erase_job() -> None:
    erase_data()


@job(
    tags=WRITER_TAGS,
    hooks=FAILURE_HOOKS,
    description="Weekly OPTIMIZE of every Delta table with a small-file check.",
)
def compaction_job() -> None:
    compact_tables()


def retention_run_config(dry_run: bool = False) -> dict:
    return {"ops": {"retention_sweep": {"config": {"dry_run": dry_run}}}}


@schedule(
    cron_schedule=RETENTION_CRON,
    job=retention_job,
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Retention sweep every day at 03:00 UTC.",
)
def retention_daily(context: ScheduleEvaluationContext) -> RunRequest:
    day = _scheduled(context).strftime("%Y-%m-%d")
    return RunRequest(
        run_key=f"retention-{day}", run_config=retention_run_config(), tags=WRITER_TAGS
    )


@schedule(
    cron_schedule=COMPACTION_CRON,
    job=compaction_job,
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Compaction every Sunday at 04:00 UTC.",
)
def compaction_weekly(context: ScheduleEvaluationContext) -> RunRequest:
    week = _scheduled(context).strftime("%G-W%V")
    return RunRequest(
        run_key=f"compaction-{week}",
        run_config={"ops": {"compact_tables": {"config": {"fail_on_unbounded": True}}}},
        tags=WRITER_TAGS,
    )


@sensor(
    job=retention_job,
    minimum_interval_seconds=900,
    default_status=DefaultSensorStatus.RUNNING,
    description="Re-run the sweep when Elasticsearch deletes were left pending.",
)
def retention_pending_sensor(
    context: SensorEvaluationContext, settings: SettingsResource, delta: DeltaResource
):
    """While `retention_pending` is non-empty and Elasticsearch answers, request at most one sweep
    per pending-table version and hour (the run key), so an outage is retried hourly."""
    store = delta.store()
    version = store.version(RETENTION_PENDING)
    pending = 0 if version is None else store.read(RETENTION_PENDING).height
    if not pending:
        return SkipReason("nothing pending")
    try:
        check_cluster(settings.get())
    except ElasticsearchSetupError as exc:
        return SkipReason(f"{pending} pending, Elasticsearch unreachable: {exc}")
    hour = datetime.now(UTC).strftime("%Y%m%dT%H")
    return RunRequest(
        run_key=f"retention-pending-v{version}-{hour}",
        run_config=retention_run_config(),
        tags=WRITER_TAGS,
    )


def _scheduled(context: ScheduleEvaluationContext) -> datetime:
    return context.scheduled_execution_time or datetime.now(UTC)


OPS_JOBS = [retention_job, erase_job, compaction_job]
OPS_SCHEDULES = [retention_daily, compaction_weekly]
OPS_SENSORS = [retention_pending_sensor]
