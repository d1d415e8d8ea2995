"""The one settings object: environment names, external-cluster credentials, client config."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import certifi
import pytest
from pydantic import SecretStr, ValidationError

from ctxdb.index.client import make_client
from ctxdb.settings import (
    GROUPS,
    OBJECT_STORE_TIMEOUTS,
    GroupSettings,
    RetentionRule,
    Settings,
    clear_settings_cache,
    env_name,
    env_names,
    environment_names,
    get_settings,
)
from ctxdb.settings.removed import REMOVED, RemovedVariable
from ctxdb.settings.search import SearchKnobs
from pipelines.celery_settings import CelerySettings

CTXDB = str(Path(sys.executable).with_name("ctxdb"))

EXTERNAL = "https://search.example.com:9243"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

# Every documented variable: (its group or None at the top level, field, value set, value read).
ENVIRONMENT = {
    "CTXDB_HOME": (None, "home", "/srv/ctxdb", Path("/srv/ctxdb")),
    "CTXDB_STORAGE_ROOT": (None, "storage_root", "s3://bucket/ctxdb", "s3://bucket/ctxdb"),
    "CTXDB_OBJECT_STORE_OPTIONS": (
        None,
        "object_store_options",
        '{"AWS_REGION": "eu-west-1", "timeout": "2s"}',
        {**OBJECT_STORE_TIMEOUTS, "AWS_REGION": "eu-west-1", "timeout": "2s"},
    ),
    "CTXDB_SHARDS": (None, "shards", "8", 8),
    "CTXDB_DERIVE_BATCH_CONVERSATIONS": (None, "derive_batch_conversations", "200", 200),
    "CTXDB_DERIVE_BATCH_EVENTS": (None, "derive_batch_events", "9000", 9000),
    "CTXDB_DERIVE_PROCESSES": (None, "derive_processes", "3", 3),
    "CTXDB_DERIVE_SESSION_ROWS": (None, "derive_session_rows", "false", False),
    "CTXDB_DERIVE_ASKED_CONTEXT": (None, "derive_asked_context", "false", False),
    "CTXDB_TOKEN": (None, "token", "ctx_abc", "ctx_abc"),
    "ELASTICSEARCH_URL": ("elasticsearch", "url", EXTERNAL, EXTERNAL),
    "ELASTICSEARCH_API_KEY": ("elasticsearch", "api_key", "a2V5", "a2V5"),
    "ELASTICSEARCH_USERNAME": ("elasticsearch", "username", "elastic", "elastic"),
    "ELASTICSEARCH_PASSWORD": ("elasticsearch", "password", "pw", "pw"),
    "ELASTICSEARCH_CA_CERTS": ("elasticsearch", "ca_certs", "/etc/ca.pem", "/etc/ca.pem"),
    "CTXDB_ELASTICSEARCH_REQUEST_TIMEOUT": ("elasticsearch", "request_timeout", "12.5", 12.5),
    "CTXDB_ELASTICSEARCH_INDEX_PREFIX": ("elasticsearch", "index_prefix", "acme", "acme"),
    "CTXDB_ELASTICSEARCH_CHUNK_SIZE": ("elasticsearch", "chunk_size", "250", 250),
    "CTXDB_ELASTICSEARCH_ROUTING": ("elasticsearch", "routing", "none", "none"),
    "CTXDB_ELASTICSEARCH_SORT": ("elasticsearch", "sort", "none", "none"),
    "CTXDB_ELASTICSEARCH_SHARDS": ("elasticsearch", "shards", "3", 3),
    "CTXDB_ELASTICSEARCH_REPLICAS": ("elasticsearch", "replicas", "0-all", "0-all"),
    "CTXDB_ELASTICSEARCH_VECTOR_INDEX": ("elasticsearch", "vector_index", "bbq_hnsw", "bbq_hnsw"),
    "CTXDB_ELASTICSEARCH_BULK_THREADS": ("elasticsearch", "bulk_threads", "3", 3),
    "CTXDB_ELASTICSEARCH_MAX_RETRIES": ("elasticsearch", "max_retries", "1", 1),
    "CTXDB_ELASTICSEARCH_RETRY_ON_TIMEOUT": ("elasticsearch", "retry_on_timeout", "true", True),
    "CTXDB_ELASTICSEARCH_BULK_TIMEOUT_S": ("elasticsearch", "bulk_timeout_s", "90", 90.0),
    "CTXDB_ELASTICSEARCH_REINDEX_GRACE_S": ("elasticsearch", "reindex_grace_s", "5", 5.0),
    "CTXDB_ELASTICSEARCH_WRITER_LEASE_TTL_S": ("elasticsearch", "writer_lease_ttl_s", "30", 30.0),
    "CTXDB_ELASTICSEARCH_WRITER_LEASE_WAIT_S": (
        "elasticsearch",
        "writer_lease_wait_s",
        "900",
        900.0,
    ),
    "CTXDB_ELASTICSEARCH_WRITER_LEASE_REQUIRED": (
        "elasticsearch",
        "writer_lease_required",
        "false",
        False,
    ),
    "CTXDB_CLAUDE_CODE_USER_ID": ("claude_code", "user_id", "ann", "ann"),
    "CTXDB_CLAUDE_CODE_PROJECTS": ("claude_code", "projects", "/srv/claude", "/srv/claude"),
    "CTXDB_CLAUDE_CODE_TENANT": ("claude_code", "tenant", "acme", "acme"),
    "CTXDB_CLAUDE_CODE_APP": ("claude_code", "app", "cc", "cc"),
    "CTXDB_CLAUDE_CODE_EXCLUDE": ("claude_code", "exclude", '["/srv/secret"]', ["/srv/secret"]),
    "CTXDB_CLAUDE_CODE_CONTEXT": ("claude_code", "context", "true", True),
    "CTXDB_CLAUDE_CODE_CONTEXT_BUDGET": ("claude_code", "context_budget", "800", 800),
    "CTXDB_CLAUDE_CODE_CONTEXT_TIMEOUT_S": ("claude_code", "context_timeout_s", "0.5", 0.5),
    "CTXDB_CLAUDE_CODE_LOOKUP": ("claude_code", "lookup", "true", True),
    "CTXDB_CLAUDE_CODE_LOOKUP_BUDGET": ("claude_code", "lookup_budget", "300", 300),
    "CTXDB_CLAUDE_CODE_LOOKUP_TIMEOUT_S": ("claude_code", "lookup_timeout_s", "0.4", 0.4),
    "CTXDB_CLAUDE_CODE_CONTEXT_URL": (
        "claude_code",
        "context_url",
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8080",
    ),
    "CTXDB_CLAUDE_CODE_TOOL_OUTPUT": ("claude_code", "tool_output", "true", True),
    "CTXDB_CLAUDE_CODE_TOOL_OUTPUT_CHARS": ("claude_code", "tool_output_chars", "500", 500),
    "CTXDB_CAPTURE_ENABLED": ("capture", "enabled", "false", False),
    "CTXDB_CAPTURE_EXCLUDE": ("capture", "exclude", '["/srv/private"]', ["/srv/private"]),
    "CTXDB_CAPTURE_INVALID": ("capture", "invalid", "log", "log"),
    "CTXDB_CAPTURE_IO_ERRORS": ("capture", "io_errors", "raise", "raise"),
    "CTXDB_LANDING_SCANNER": ("landing", "scanner", "python", "python"),
    "CTXDB_EMBEDDING_MODEL": ("embedding", "model", "other-model", "other-model"),
    "CTXDB_EMBEDDING_BATCH_SIZE": ("embedding", "batch_size", "32", 32),
    "CTXDB_EMBEDDING_DIMS": ("embedding", "dims", "768", 768),
    "CTXDB_EMBEDDING_DEVICE": ("embedding", "device", "cuda", "cuda"),
    "CTXDB_EMBEDDING_BACKEND": ("embedding", "backend", "onnx-int8", "onnx-int8"),
    "CTXDB_EMBEDDING_THREADS": ("embedding", "threads", "3", 3),
    "CTXDB_EMBEDDING_PREFILL_MIN_TEXTS": ("embedding", "prefill_min_texts", "500", 500),
    "CTXDB_EMBEDDING_CACHE_DIR": ("embedding", "cache_dir", "/srv/c", Path("/srv/c")),
    "CTXDB_SEARCH_KNOBS": ("search", "knobs", '{"rrf_k": 20}', SearchKnobs(rrf_k=20)),
    "CTXDB_SEARCH_PHRASE_BOOST": ("search", "phrase_boost", "0.5", 0.5),
    "CTXDB_SEARCH_PHRASE_SLOP": ("search", "phrase_slop", "3", 3),
    "CTXDB_SEARCH_QUERY_CACHE_SIZE": ("search", "query_cache_size", "16", 16),
    "CTXDB_SEARCH_NUM_CANDIDATES": ("search", "num_candidates", "100", 100),
    "CTXDB_SEARCH_KNN_K": ("search", "knn_k", "25", 25),
    "CTXDB_SEARCH_KNN_OVERSAMPLE": ("search", "knn_oversample", "2", 2.0),
    "CTXDB_SEARCH_OVERFETCH_ROWS": ("search", "overfetch_rows", "6", 6),
    "CTXDB_SEARCH_QUERY_MAX_CHARS": ("search", "query_max_chars", "128", 128),
    "CTXDB_SEARCH_TRIGRAM_MIN_MATCH": ("search", "trigram_min_match", "50%", "50%"),
    "CTXDB_SEARCH_LEXICAL_MIN_MATCH": ("search", "lexical_min_match", "2", "2"),
    "CTXDB_SEARCH_FUZZY_MIN_MATCH": ("search", "fuzzy_min_match", "3<70%", "3<70%"),
    "CTXDB_SEARCH_SNIPPET_CHARS": ("search", "snippet_chars", "200", 200),
    "CTXDB_SEARCH_SESSION_EXPAND": ("search", "session_expand", "5", 5),
    "CTXDB_RETENTION_DAYS": ("retention", "days", "30", 30),
    "CTXDB_RETENTION_RULES": (
        "retention",
        "rules",
        '[{"tenant": "acme", "days": 7}]',
        [RetentionRule(tenant="acme", days=7)],
    ),
    "CTXDB_RETENTION_VACUUM_HOURS": ("retention", "vacuum_hours", "24", 24),
    "CTXDB_RETENTION_ERASE_VACUUM_HOURS": ("retention", "erase_vacuum_hours", "2", 2),
    "CTXDB_RETENTION_STATE_HISTORY_HOURS": ("retention", "state_history_hours", "6", 6),
    "CTXDB_RETENTION_ARCHIVE_DAYS": ("retention", "archive_days", "30", 30),
    "CTXDB_RETENTION_COMPACTION_TARGET_MB": ("retention", "compaction_target_mb", "64", 64),
    "CTXDB_AUTH_TOKEN_STORE": ("auth", "token_store", "elasticsearch", "elasticsearch"),
    "CTXDB_AUTH_TOKEN_CACHE_S": ("auth", "token_cache_s", "2.5", 2.5),
    "CTXDB_AUTH_JWT_KEY": ("auth", "jwt_key", "k3y", "k3y"),
    "CTXDB_AUTH_JWT_ALGORITHMS": ("auth", "jwt_algorithms", '["RS256"]', ["RS256"]),
    "CTXDB_AUTH_JWT_AUDIENCE": ("auth", "jwt_audience", "ctxdb", "ctxdb"),
    "CTXDB_AUTH_JWT_ISSUER": ("auth", "jwt_issuer", "https://idp", "https://idp"),
    "CTXDB_AUTH_JWT_USER_CLAIM": ("auth", "jwt_user_claim", "email", "email"),
    "CTXDB_AUTH_JWT_TENANT_CLAIM": ("auth", "jwt_tenant_claim", "org", "org"),
    "CTXDB_AUTH_REQUIRE_TENANT": ("auth", "require_tenant", "false", False),
    "CTXDB_HTTP_MAX_BODY_BYTES": ("http", "max_body_bytes", "2048", 2048),
    "CTXDB_HTTP_MAX_QUERY_BYTES": ("http", "max_query_bytes", "1024", 1024),
    "CTXDB_MCP_RESULT_CHARS": ("mcp", "result_chars", "800", 800),
    "CTXDB_MCP_INLINE_FILE_BYTES": ("mcp", "inline_file_bytes", "4096", 4096),
    "CTXDB_MCP_TOKEN_FILE": ("mcp", "token_file", "/run/ctxdb.token", Path("/run/ctxdb.token")),
    "CTXDB_ES_VERSION": ("node", "version", "9.1.0", "9.1.0"),
    "CTXDB_ES_ZIP_SHA512": ("node", "zip_sha512", "ab" * 64, "ab" * 64),
    "CTXDB_ES_PORT": ("node", "port", "9400", 9400),
    "CTXDB_ES_HEAP": ("node", "heap", "2g", "2g"),
    "CTXDB_ES_CACHE_DIR": ("node", "cache_dir", "/srv/es", Path("/srv/es")),
    "CTXDB_ES_START_TIMEOUT_S": ("node", "start_timeout_s", "30", 30.0),
    "ES_JAVA_HOME": ("node", "es_java_home", "/opt/jdk-25", Path("/opt/jdk-25")),
    "JAVA_HOME": ("node", "java_home", "/opt/jdk-21", Path("/opt/jdk-21")),
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (
        "ELASTICSEARCH_URL",
        "ELASTICSEARCH_API_KEY",
        "ELASTICSEARCH_USERNAME",
        "ELASTICSEARCH_PASSWORD",
        "ELASTICSEARCH_CA_CERTS",
        "ES_JAVA_HOME",
        "JAVA_HOME",
        "CTXDB_ES_PORT",
        "CTXDB_HOME",
        "CTXDB_ES_CACHE_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_point_at_the_embedded_node(clean_env: pytest.MonkeyPatch) -> None:
    settings = get_settings()
    assert settings.elasticsearch.url == "http://127.0.0.1:9200"
    assert settings.embedded
    assert settings.node.version.startswith("9.")
    assert settings.node.heap == "1g"


def test_external_url_with_api_key_and_ca(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ELASTICSEARCH_URL", EXTERNAL)
    clean_env.setenv("ELASTICSEARCH_API_KEY", "a2V5OnNlY3JldA==")
    clean_env.setenv("ELASTICSEARCH_CA_CERTS", certifi.where())
    settings = get_settings()
    assert not settings.embedded
    assert "a2V5OnNlY3JldA" not in repr(settings)

    client = make_client(settings)
    node = client.transport.node_pool.get().config
    assert (node.scheme, node.host, node.port) == ("https", "search.example.com", 9243)
    assert node.ca_certs == certifi.where() and node.verify_certs
    assert client._headers["authorization"] == "ApiKey a2V5OnNlY3JldA=="


def test_external_url_with_basic_auth(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ELASTICSEARCH_URL", EXTERNAL)
    clean_env.setenv("ELASTICSEARCH_USERNAME", "elastic")
    clean_env.setenv("ELASTICSEARCH_PASSWORD", "s3cret")
    settings = get_settings()
    assert "s3cret" not in repr(settings)
    client = make_client(settings)
    expected = base64.b64encode(b"elastic:s3cret").decode()
    assert client._headers["authorization"] == f"Basic {expected}"


def test_api_key_wins_over_basic_auth(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ELASTICSEARCH_URL", EXTERNAL)
    clean_env.setenv("ELASTICSEARCH_API_KEY", "k")
    clean_env.setenv("ELASTICSEARCH_USERNAME", "elastic")
    clean_env.setenv("ELASTICSEARCH_PASSWORD", "s3cret")
    assert make_client(get_settings())._headers["authorization"] == "ApiKey k"


def test_embedded_follows_the_port(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CTXDB_ES_PORT", "9311")
    assert get_settings().elasticsearch.url == "http://127.0.0.1:9311"
    assert get_settings().embedded
    assert Settings(node={"port": 9312}).elasticsearch.url == "http://127.0.0.1:9312"
    clean_env.setenv("ELASTICSEARCH_URL", "http://localhost:9311/")
    assert get_settings().embedded
    clean_env.setenv("ELASTICSEARCH_URL", "http://127.0.0.1:9200")
    assert not get_settings().embedded


def test_node_settings_from_the_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("ES_JAVA_HOME", "/opt/jdk-25")
    clean_env.setenv("JAVA_HOME", "/opt/jdk-17")
    clean_env.setenv("CTXDB_ES_HEAP", "2g")
    clean_env.setenv("CTXDB_ES_CACHE_DIR", str(tmp_path))
    clean_env.setenv("CTXDB_HOME", str(tmp_path / "state"))
    settings = get_settings()
    assert settings.node.es_java_home == Path("/opt/jdk-25")
    assert settings.node.java_home == Path("/opt/jdk-17")
    assert settings.node.heap == "2g"
    assert settings.node.cache_dir == tmp_path
    assert settings.delta_uri == str(tmp_path / "state" / "delta")


def test_bad_values_are_rejected(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CTXDB_ES_PORT", "not-a-port")
    with pytest.raises(ValueError, match="NodeSettings\nport"):
        get_settings()


def test_a_removed_variable_is_an_error_naming_its_replacement(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A variable this version no longer reads is refused, on the CLI as one line, never
    silently left at its default (the memory would seem to vanish, a knob to revert)."""
    clean_env.setenv("CTXDB_DELTA_ROOT", str(tmp_path / "old"))
    clean_env.setenv("CTXDB_SEARCH_RRF_K", "42")
    with pytest.raises(RemovedVariable) as refused:
        get_settings()
    assert str(refused.value) == (
        "CTXDB_DELTA_ROOT is no longer read: set CTXDB_STORAGE_ROOT instead: delta/ lives under"
        " it; CTXDB_SEARCH_RRF_K is no longer read: set CTXDB_SEARCH_KNOBS__RRF_K instead"
    )
    env = {k: v for k, v in os.environ.items() if k not in REMOVED}
    env.update(CTXDB_HOME=str(tmp_path), CTXDB_LANDING_URI=str(tmp_path))
    done = subprocess.run([CTXDB, "tables"], env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: CTXDB_LANDING_URI is no longer read: set CTXDB_STORAGE_ROOT instead: landing/"
        " lives under it"
    ]


def test_no_removed_variable_is_read_today() -> None:
    assert not set(REMOVED) & set(environment_names())
    assert len(REMOVED) >= 20 + len(SearchKnobs.model_fields)


def test_per_test_settings_fixture(settings: Settings, tmp_path: Path) -> None:
    assert settings.home == tmp_path
    assert (
        settings.elasticsearch.index_prefix.startswith("t")
        and len(settings.elasticsearch.index_prefix) == 13
    )
    assert settings.delta_uri == str(tmp_path / "delta")


def test_every_field_is_documented() -> None:
    """docs/configuration.md names the environment variable of every settings field."""
    page = DOCS.read_text()
    missing = [env for env in environment_names() if f"`{env}`" not in page]
    assert missing == []


def _documented_variables() -> set[str]:
    """The variables in the first column of the settings tables (above the Make variables)."""
    settings_part = DOCS.read_text().split("## Make variables")[0]
    return set(re.findall(r"^\| `([A-Z_0-9]+)` \|", settings_part, flags=re.MULTILINE))


def test_every_documented_variable_is_read_into_its_group(clean_env: pytest.MonkeyPatch) -> None:
    """Each documented variable, set alone, is read back from the group it belongs to."""
    celery = {"CTXDB_CELERY_CONFIG_SOURCE"}
    assert set(ENVIRONMENT) == _documented_variables() - celery == set(environment_names())
    assert {f"{CelerySettings.model_config['env_prefix']}CONFIG_SOURCE"} == celery
    for env, (group, field, raw, expected) in ENVIRONMENT.items():
        assert environment_names()[env] == (group, field)
        clean_env.setenv(env, raw)
        settings = get_settings()
        value = getattr(settings if group is None else getattr(settings, group), field)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        assert value == expected, env
        clean_env.delenv(env)


def test_every_path_is_derived_from_home_and_the_storage_root(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One place for every path: the data under the storage root (default: home), the local
    state under home; no path can be set on its own, so no two can diverge."""
    clean_env.setenv("CTXDB_HOME", str(tmp_path))
    settings = get_settings()
    assert settings.delta_uri == str(tmp_path / "delta")
    assert settings.landing_uri == str(tmp_path / "landing")
    assert settings.files == str(tmp_path / "files")
    assert settings.archive_uri == str(tmp_path / "landing-archive")
    assert settings.tokens_path == tmp_path / "auth" / "tokens.json"
    assert settings.spool_dir == tmp_path / "capture" / "spool"
    clean_env.setenv("CTXDB_STORAGE_ROOT", "s3://bucket/ctxdb/")
    remote = get_settings()
    assert (remote.delta_uri, remote.landing_uri, remote.files, remote.archive_uri) == (
        "s3://bucket/ctxdb/delta",
        "s3://bucket/ctxdb/landing",
        "s3://bucket/ctxdb/files",
        "s3://bucket/ctxdb/landing-archive",
    )
    assert remote.tokens_path == settings.tokens_path and remote.spool_dir == settings.spool_dir
    paths = [name for name in environment_names() if name.endswith(("_ROOT", "_URI", "_PATH"))]
    assert paths == ["CTXDB_STORAGE_ROOT"]


def test_settings_are_read_once_per_environment(clean_env: pytest.MonkeyPatch) -> None:
    first = get_settings()
    assert get_settings() is first
    clean_env.setenv("CTXDB_SEARCH_KNN_K", "7")
    changed = get_settings()
    assert changed is not first and changed.search.knn_k == 7
    assert get_settings() is changed
    clear_settings_cache()
    assert get_settings() is not changed


def test_replace_changes_only_the_named_fields(clean_env: pytest.MonkeyPatch) -> None:
    base = Settings(search={"snippet_chars": 30}, node={"heap": "2g"})
    copy = base.replace(home=Path("/srv"), search={"knn_k": 9})
    assert (copy.search.snippet_chars, copy.search.knn_k, copy.node.heap) == (30, 9, "2g")
    assert copy.delta_uri == "/srv/delta"
    assert (base.search.knn_k, base.home) == (50, Settings().home)


def test_replace_changes_only_the_named_knobs(clean_env: pytest.MonkeyPatch) -> None:
    """A group's nested model (the search knobs) takes the named fields alone, validated: the
    knobs not named keep this object's values, not their defaults."""
    base = Settings(search={"knn_k": 9, "knobs": {"rrf_k": 10, "coverage_power": 3.0}})
    copy = base.replace(search={"knobs": {"rrf_k": 20}})
    assert (copy.search.knobs.rrf_k, copy.search.knobs.coverage_power) == (20, 3.0)
    assert copy.search.knn_k == 9 and base.search.knobs.rrf_k == 10
    with pytest.raises(ValidationError, match="rrf_k"):
        base.replace(search={"knobs": {"rrf_k": 0}})


# The names other tools define, the only variables outside their group's prefix.
STANDARD_NAMES = {
    "ELASTICSEARCH_URL",
    "ELASTICSEARCH_API_KEY",
    "ELASTICSEARCH_USERNAME",
    "ELASTICSEARCH_PASSWORD",
    "ELASTICSEARCH_CA_CERTS",
    "ES_JAVA_HOME",
    "JAVA_HOME",
}


def test_every_variable_is_under_its_group_prefix() -> None:
    prefixes = {None: "CTXDB_", **{g: m.model_config["env_prefix"] for g, m in GROUPS.items()}}
    assert all(p.startswith("CTXDB_") and p != "CTXDB_" for g, p in prefixes.items() if g)
    outside = {
        env
        for env, (group, _) in environment_names().items()
        if not env.startswith(prefixes[group])
    }
    assert outside == STANDARD_NAMES
    celery = [env_name(CelerySettings, field) for field in CelerySettings.model_fields]
    assert celery and all(env.startswith("CTXDB_CELERY_") for env in celery)


def test_no_variable_has_a_second_name() -> None:
    """Each field is read from one variable (the JDK's two standard names aside): no old names,
    none read for compatibility."""
    names = {
        (group, field): env_names(GROUPS[group] if group else Settings, field)
        for group, field in environment_names().values()
    }
    assert {key: found for key, found in names.items() if len(found) > 1} == {}
    assert not hasattr(GroupSettings, "deprecated_names")
