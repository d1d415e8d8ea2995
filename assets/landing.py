"""Asset `raw_turn_events`, with `quarantined_events` and `landed_files`: land JSONL files."""

from collections.abc import Iterator

from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, multi_asset

from assets.shards import require_every_shard
from assets.specs import WRITER_POOL, materialization_metadata, table_spec
from ctxdb.coordination.lease import delta_writer_lease_for
from ctxdb.landing.run import land
from ctxdb.storage.tables import (
    LANDED_FILES,
    QUARANTINED_EVENTS,
    QUARANTINED_FILES,
    RAW_TURN_EVENTS,
)
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.settings import SettingsResource


class LandingConfig(Config):
    """Where to read from (default: the settings' landing location) and how many files per run."""

    path: str | None = None
    max_files: int | None = None
    full: bool = False
    """Compare every listed file with all of `landed_files`, not only those from the landing
    cursor on (`ctxdb.landing.cursor`): the sensor sets it when an older file is pending."""


@multi_asset(
    specs=[
        table_spec(
            RAW_TURN_EVENTS,
            "Raw turn events landed from JSONL files, once per event id.",
            group="turn_record",
        ),
        table_spec(
            QUARANTINED_EVENTS,
            "Lines (or files) that failed the contract: reason, detail and the raw bytes.",
            group="turn_record",
        ),
        table_spec(
            LANDED_FILES,
            "Every landed file with its size, mtime and line counts (skipped on a rerun).",
            group="turn_record",
        ),
        table_spec(
            QUARANTINED_FILES,
            "Files that could not be read at all (a truncated gzip): reason, size, first bytes.",
            group="turn_record",
        ),
    ],
    pool=WRITER_POOL,
    can_subset=False,
)
def raw_turn_events(
    context: AssetExecutionContext,
    config: LandingConfig,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
) -> Iterator[MaterializeResult]:
    """Land under the writer lease (required unless
    CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false). The first step of `memory_job`: a run of it
    over some shards only stops here (`require_every_shard`)."""
    require_every_shard(context)
    run_settings = settings.get()
    uri = config.path or run_settings.landing_uri
    store = delta.store()
    stats = land(
        store,
        uri,
        max_files=config.max_files,
        full=config.full,
        scanner=run_settings.landing.scanner,
        writer=delta_writer_lease_for(es.client(), run_settings, "landing"),
    )
    yield MaterializeResult(
        asset_key=RAW_TURN_EVENTS,
        metadata={
            **materialization_metadata(store, RAW_TURN_EVENTS, {"inserted": stats.landed}),
            "landing": MetadataValue.text(uri),
            "files": stats.files,
            "skipped_files": stats.skipped_files,
            "lines": stats.lines,
            "landed": stats.landed,
            "duplicates": stats.duplicates,
            "quarantined": stats.quarantined,
            "quarantine_reasons": MetadataValue.json(stats.reasons),
            "landed_version": stats.landed_version if stats.landed_version is not None else -1,
            "quarantined_files": stats.quarantined_files,
        },
    )
    yield MaterializeResult(
        asset_key=QUARANTINED_EVENTS,
        metadata={
            **materialization_metadata(store, QUARANTINED_EVENTS, {"inserted": stats.quarantined}),
            "quarantine_reasons": MetadataValue.json(stats.reasons),
        },
    )
    yield MaterializeResult(
        asset_key=LANDED_FILES,
        metadata=materialization_metadata(store, LANDED_FILES, {"inserted": stats.files}),
    )
    yield MaterializeResult(
        asset_key=QUARANTINED_FILES,
        metadata=materialization_metadata(
            store, QUARANTINED_FILES, {"inserted": stats.quarantined_files}
        ),
    )
