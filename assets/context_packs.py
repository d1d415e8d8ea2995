"""The context pack snapshots the SessionStart hooks start from, rebuilt after each derivation
(`ctxdb.pack.refresh`): a project's next session is told its memory from one small file."""

from datetime import UTC, datetime

from dagster import AssetExecutionContext, AssetKey, MaterializeResult, asset

from assets.specs import OWNERS
from ctxdb.pack.refresh import TABLES, refresh
from resources.delta import DeltaResource
from resources.settings import SettingsResource


@asset(
    deps=[AssetKey(table) for table in TABLES],
    group_name="context_pack",
    owners=OWNERS,
    kinds={"python"},
    description="Pack snapshots of the projects whose sessions the hooks told: each rebuilt when"
    " a table it was read from moved on (<storage>/packs; none on an object store).",
)
def context_pack_snapshots(
    context: AssetExecutionContext, settings: SettingsResource, delta: DeltaResource
) -> MaterializeResult:
    """Rebuild the stale snapshots; one failing is logged and left unused, never fails the run."""
    stats = refresh(settings.get(), delta.store(), datetime.now(UTC))
    if stats.failed:
        context.log.warning(f"{stats.failed} pack snapshots could not be rebuilt (left unused)")
    return MaterializeResult(
        metadata={
            "rebuilt": stats.rebuilt,
            "current": stats.current,
            "removed": stats.removed,
            "failed": stats.failed,
        }
    )
