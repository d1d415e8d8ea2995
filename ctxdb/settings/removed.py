"""Variables earlier versions read and this one does not: setting one is an error that names what
replaced it, never a silent default (a memory that seems to vanish, a tuned knob that reverts).

Nothing here is read as a setting: the names exist only to be refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from ctxdb.settings.search import SearchKnobs

_UNDER_STORAGE = "set CTXDB_STORAGE_ROOT instead: {} lives under it"
_GONE = "it is no longer a setting ({})"

REMOVED: dict[str, str] = {
    "CTXDB_DELTA_ROOT": _UNDER_STORAGE.format("delta/"),
    "CTXDB_FILES_ROOT": _UNDER_STORAGE.format("files/"),
    "CTXDB_LANDING_URI": _UNDER_STORAGE.format("landing/"),
    "CTXDB_RETENTION_ARCHIVE_URI": _UNDER_STORAGE.format("landing-archive/"),
    "CTXDB_CAPTURE_SPOOL_DIR": "set CTXDB_HOME instead: capture/spool lives under it",
    "CTXDB_AUTH_TOKENS_PATH": "set CTXDB_HOME instead: auth/tokens.json lives under it",
    "CTXDB_DELTA_STORAGE_OPTIONS": "set CTXDB_OBJECT_STORE_OPTIONS instead",
    "CTXDB_EMBEDDING_MODELS_DIR": "set CTXDB_EMBEDDING_CACHE_DIR instead (models/ under it)",
    "CTXDB_EMBEDDING_ONNX_CACHE_DIR": "set CTXDB_EMBEDDING_CACHE_DIR instead (onnx/ under it)",
    "CTXDB_LANDING_THREADS": _GONE.format("landing uses one thread per usable core"),
    "CTXDB_CAPTURE_QUEUE_SIZE": _GONE.format("a fixed bound of the recorder"),
    "CTXDB_CAPTURE_ROTATE_BYTES": _GONE.format("a fixed bound of the recorder"),
    "CTXDB_CAPTURE_ROTATE_AGE_S": _GONE.format("a fixed bound of the recorder"),
    "CTXDB_ELASTICSEARCH_BULK_MAX_RETRIES": _GONE.format("bulk writes retry a fixed number"),
    "CTXDB_RETENTION_COMPACTION_SMALL_FILE_MB": _GONE.format("a fixed compaction bound"),
    "CTXDB_RETENTION_COMPACTION_MAX_SMALL_FILES": _GONE.format("a fixed compaction bound"),
    "CTXDB_ES_MVN": _GONE.format("mvn is found on PATH"),
    "CTXDB_ES_USER": _GONE.format("the node runs as a fixed unprivileged user"),
    "CTXDB_ES_STOP_TIMEOUT_S": _GONE.format("a fixed bound"),
    "CTXDB_ES_DOWNLOAD_TIMEOUT_S": _GONE.format("a fixed bound"),
    "CTXDB_ES_JVM_DIR": "set ES_JAVA_HOME or JAVA_HOME instead",
    "CTXDB_JVM_DIR": "set ES_JAVA_HOME or JAVA_HOME instead",
    "CTXDB_INDEX_PREFIX": "set CTXDB_ELASTICSEARCH_INDEX_PREFIX instead",
    "CTXDB_INDEX_CHUNK_SIZE": "set CTXDB_ELASTICSEARCH_CHUNK_SIZE instead",
    "CTXDB_INDEX_ROUTING": "set CTXDB_ELASTICSEARCH_ROUTING instead",
    "CTXDB_INDEX_SORT": "set CTXDB_ELASTICSEARCH_SORT instead",
    "CTXDB_INDEX_SHARDS": "set CTXDB_ELASTICSEARCH_SHARDS instead",
    "CTXDB_INDEX_REPLICAS": "set CTXDB_ELASTICSEARCH_REPLICAS instead",
    "CTXDB_INDEX_VECTOR_TYPE": "set CTXDB_ELASTICSEARCH_VECTOR_INDEX instead",
    "CTXDB_INDEX_BULK_THREADS": "set CTXDB_ELASTICSEARCH_BULK_THREADS instead",
    "CTXDB_INDEX_BULK_TIMEOUT_S": "set CTXDB_ELASTICSEARCH_BULK_TIMEOUT_S instead",
    "CTXDB_INDEX_BULK_MAX_RETRIES": _GONE.format("bulk writes retry a fixed number"),
    "CTXDB_REINDEX_GRACE_S": "set CTXDB_ELASTICSEARCH_REINDEX_GRACE_S instead",
    "CTXDB_WRITER_LEASE_TTL_S": "set CTXDB_ELASTICSEARCH_WRITER_LEASE_TTL_S instead",
    "CTXDB_WRITER_LEASE_WAIT_S": "set CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S instead",
    "CTXDB_WRITER_LEASE_REQUIRED": "set CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED instead",
    "CTXDB_RECENCY_HALF_LIFE_DAYS": "set CTXDB_SEARCH_KNOBS__RECENCY_HALF_LIFE_DAYS instead",
    "CTXDB_ERASE_VACUUM_HOURS": "set CTXDB_RETENTION_ERASE_VACUUM_HOURS instead",
    "CTXDB_COMPACTION_TARGET_MB": "set CTXDB_RETENTION_COMPACTION_TARGET_MB instead",
    "CTXDB_COMPACTION_SMALL_FILE_MB": _GONE.format("a fixed compaction bound"),
    "CTXDB_COMPACTION_MAX_SMALL_FILES": _GONE.format("a fixed compaction bound"),
    **{
        f"CTXDB_SEARCH_{knob.upper()}": f"set CTXDB_SEARCH_KNOBS__{knob.upper()} instead"
        for knob in SearchKnobs.model_fields
    },
}


class RemovedVariable(ValueError):
    """An environment variable this version no longer reads is set."""


def refuse_removed(names: Iterable[str]) -> None:
    """Raise `RemovedVariable` naming each removed variable among `names` and its replacement."""
    found = sorted(name for name in names if name in REMOVED)
    if found:
        raise RemovedVariable(
            "; ".join(f"{name} is no longer read: {REMOVED[name]}" for name in found)
        )
