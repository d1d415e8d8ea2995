"""Settings: one typed group per stage, read from the environment when first asked for.

In: the environment (`CTXDB_*` variables, plus the standard `ELASTICSEARCH_*` client names and
the JDK's `ES_JAVA_HOME`/`JAVA_HOME`); out: the `Settings` object (`get_settings()`), holding
the state paths and one group per stage (`elasticsearch`, `landing`, `embedding`, `search`,
`retention`, `auth`, `http`, `mcp`, `node`, `claude_code`, `capture`), each in a module of its
own and reading the variables under its own prefix (docs/configuration.md). Every path (Delta
tables, landing, files, archive, spool, token store) is derived from `home` and `storage_root`.
Nothing here reads the environment at import time.
"""

from ctxdb.settings.auth import AuthSettings
from ctxdb.settings.base import GroupSettings, env_name, env_names
from ctxdb.settings.capture import CaptureSettings
from ctxdb.settings.claude_code import ClaudeCodeSettings
from ctxdb.settings.elasticsearch import ElasticsearchSettings
from ctxdb.settings.embedding import EmbeddingSettings
from ctxdb.settings.http import HttpSettings
from ctxdb.settings.landing import LandingSettings
from ctxdb.settings.mcp import McpSettings
from ctxdb.settings.node import NodeSettings
from ctxdb.settings.retention import RetentionRule, RetentionSettings
from ctxdb.settings.root import (
    GROUPS,
    OBJECT_STORE_TIMEOUTS,
    Settings,
    clear_settings_cache,
    environment_names,
    get_settings,
)
from ctxdb.settings.search import SearchSettings

__all__ = [
    "GROUPS",
    "AuthSettings",
    "CaptureSettings",
    "ClaudeCodeSettings",
    "ElasticsearchSettings",
    "EmbeddingSettings",
    "GroupSettings",
    "HttpSettings",
    "LandingSettings",
    "OBJECT_STORE_TIMEOUTS",
    "McpSettings",
    "NodeSettings",
    "RetentionRule",
    "RetentionSettings",
    "SearchSettings",
    "Settings",
    "clear_settings_cache",
    "env_name",
    "env_names",
    "environment_names",
    "get_settings",
]
