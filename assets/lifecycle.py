"""Tables written only by the operational jobs (retention, erasure), declared so that their
materializations, schemas and row counts show in Dagster beside the rest of the memory."""

from assets.specs import table_spec
from ctxdb.storage.tables import (
    LIFECYCLE_JOURNAL,
    PURGED_CONVERSATIONS,
    RETENTION_PENDING,
    RETENTION_REPORT,
)

retention_tables = [
    table_spec(
        RETENTION_PENDING,
        "Elasticsearch ids and storage paths a sweep or erasure still has to remove.",
        group="lifecycle",
    ),
    table_spec(
        RETENTION_REPORT,
        "One row per retention sweep or erasure: what was deleted, vacuumed and verified.",
        group="lifecycle",
    ),
    table_spec(
        LIFECYCLE_JOURNAL,
        "What an unfinished retention sweep or erasure set out to remove (resumed from here).",
        group="lifecycle",
    ),
    table_spec(
        PURGED_CONVERSATIONS,
        "SHA-256 keys of erased conversations: later events for them are quarantined.",
        group="lifecycle",
    ),
]
