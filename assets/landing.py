"""Asset `raw_turn_events`: land JSONL event files into Delta (also quarantine and landed files)."""

from dagster import AssetExecutionContext, Config, MaterializeResult, MetadataValue, asset

from ctxdb.landing.run import land
from ctxdb.settings import get_settings
from resources.delta import DeltaResource


class LandingConfig(Config):
    """Where to read from (default: the settings' landing location) and how many files per run."""

    path: str | None = None
    max_files: int | None = None


@asset(
    group_name="turn_record",
    description="Raw turn events landed from JSONL files (bad lines go to quarantined_events).",
)
def raw_turn_events(
    context: AssetExecutionContext, config: LandingConfig, delta: DeltaResource
) -> MaterializeResult:
    settings = get_settings()
    uri = config.path or settings.landing_uri
    stats = land(delta.store(), uri, max_files=config.max_files, threads=settings.landing.threads)
    context.log.info(
        f"landed {stats.landed} events from {stats.files} files "
        f"({stats.duplicates} duplicates, {stats.quarantined} quarantined)"
    )
    return MaterializeResult(
        metadata={
            "landing": MetadataValue.text(uri),
            "files": stats.files,
            "skipped_files": stats.skipped_files,
            "lines": stats.lines,
            "landed": stats.landed,
            "duplicates": stats.duplicates,
            "quarantined": stats.quarantined,
            "quarantine_reasons": MetadataValue.json(stats.reasons),
            "landed_version": stats.landed_version if stats.landed_version is not None else -1,
        }
    )
