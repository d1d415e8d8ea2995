"""The embedded node group (`CTXDB_ES_*`): the Elasticsearch node ctxdb installs and runs itself.

The JDK keeps its standard names (`ES_JAVA_HOME`, then `JAVA_HOME`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ctxdb.settings.base import GroupSettings, group_config


class NodeSettings(GroupSettings):
    """The embedded Elasticsearch node: its distribution, JVM, port and process limits."""

    model_config = group_config("CTXDB_ES_")

    version: str = Field(default="9.2.4", description="Embedded node version (Maven Central).")
    heap: str = Field(default="1g", description="Embedded node heap (-Xms/-Xmx).")
    port: int = Field(default=9200)
    cache_dir: Path | None = Field(
        default=None,
        description="Where the embedded node's zip, home, data and logs live.",
    )
    start_timeout_s: float = Field(default=120.0)
    zip_sha512: str | None = Field(
        default=None,
        description="Expected SHA-512 of the zip (needed for unpinned versions).",
    )
    es_java_home: Path | None = Field(
        default=None,
        validation_alias="ES_JAVA_HOME",
        description="JDK for the node, first choice.",
    )
    java_home: Path | None = Field(
        default=None, validation_alias="JAVA_HOME", description="JDK, second choice."
    )
