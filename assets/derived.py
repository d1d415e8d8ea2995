"""Derived turn record assets: turn_logs, conversation_timelines, role_rows, turn_catalog and
replay_artifacts, computed together for the conversations touched by newly landed events."""

from collections.abc import Iterator

from dagster import AssetExecutionContext, AssetKey, Config, MaterializeResult, multi_asset

from assets.specs import WRITER_POOL, materialization_metadata, table_spec
from ctxdb.coordination.lease import delta_writer_lease_for
from ctxdb.record.run import TARGETS, derive
from ctxdb.storage.changes import row_count
from ctxdb.storage.tables import DERIVE_FAILURES, DERIVE_STATE, RAW_TURN_EVENTS
from resources.delta import DeltaResource
from resources.elasticsearch import ElasticsearchResource
from resources.settings import SettingsResource

DESCRIPTIONS = {
    "turn_logs": "One TurnLog per closed turn (payload + accounting), recording state monotonic.",
    "conversation_timelines": "conv.timeline.v1 per conversation: title, activity, turn ids.",
    "role_rows": "Searchable role rows (user, assistant, summary, notes, attachment).",
    "turn_catalog": "Ordinal of each recorded turn per conversation, with listing texts.",
    "replay_artifacts": "Selected chat events and stream aggregates of non-rich turns.",
}


class DeriveConfig(Config):
    """`full` recomputes every conversation instead of only those touched since the last run."""

    full: bool = False


@multi_asset(
    specs=[
        *(
            table_spec(
                target.table,
                DESCRIPTIONS[target.table],
                group="turn_record",
                deps=[RAW_TURN_EVENTS],
            )
            for target in TARGETS
        ),
        table_spec(
            DERIVE_STATE,
            "The highest landed version derived so far (the incremental watermark).",
            group="turn_record",
            deps=[RAW_TURN_EVENTS],
        ),
        table_spec(
            DERIVE_FAILURES,
            "Conversations whose derivation raised: the error; the rest are derived.",
            group="turn_record",
            deps=[RAW_TURN_EVENTS],
        ),
    ],
    pool=WRITER_POOL,
    can_subset=False,
)
def turn_record(
    context: AssetExecutionContext,
    config: DeriveConfig,
    settings: SettingsResource,
    delta: DeltaResource,
    es: ElasticsearchResource,
) -> Iterator[MaterializeResult]:
    """Derive under the writer lease (required unless
    CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED=false)."""
    store, run_settings = delta.store(), settings.get()
    stats = derive(
        store,
        run_settings,
        full=config.full,
        writer=delta_writer_lease_for(es.client(), run_settings, "derivation"),
    )
    if stats.to_version <= stats.from_version:  # a derivation says what it did itself (ctxdb log)
        context.log.info(f"nothing landed after version {stats.from_version}: nothing to derive")
    if stats.failed:
        context.log.warning(
            f"{stats.failed} conversations failed to derive and were left as they were "
            "(see derive_failures)"
        )
    for target in TARGETS:
        written = stats.written.get(target.table, {})
        yield MaterializeResult(
            asset_key=AssetKey(target.table),
            metadata={
                **materialization_metadata(store, target.table, written),
                "conversations": stats.conversations,
                "turns": stats.turns,
                "open_turns": stats.open_turns,
                "inserted": written.get("inserted", 0),
                "updated": written.get("updated", 0),
                "deleted": written.get("deleted", 0),
                "rows": row_count(store, target.table),
                "landed_version": stats.to_version,
            },
        )
    yield MaterializeResult(
        asset_key=AssetKey(DERIVE_STATE),
        metadata={
            **materialization_metadata(store, DERIVE_STATE),
            "landed_version": stats.to_version,
        },
    )
    yield MaterializeResult(
        asset_key=AssetKey(DERIVE_FAILURES),
        metadata={**materialization_metadata(store, DERIVE_FAILURES), "failed": stats.failed},
    )
