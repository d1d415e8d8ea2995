"""The one settings object: environment names, external-cluster credentials, client config."""

from __future__ import annotations

import base64
from pathlib import Path

import certifi
import pytest

from ctxdb.index.client import make_client
from ctxdb.settings import Settings, get_settings

EXTERNAL = "https://search.example.com:9243"


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
    assert settings.elasticsearch_url == "http://127.0.0.1:9200"
    assert settings.embedded
    assert settings.es_version.startswith("9.")
    assert settings.es_heap == "1g"


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
    assert get_settings().elasticsearch_url == "http://127.0.0.1:9311"
    assert get_settings().embedded
    assert Settings(es_port=9312).elasticsearch_url == "http://127.0.0.1:9312"
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
    assert settings.es_java_home == Path("/opt/jdk-25")
    assert settings.java_home == Path("/opt/jdk-17")
    assert settings.es_heap == "2g"
    assert settings.es_cache_dir == tmp_path
    assert settings.delta_uri == str(tmp_path / "state" / "delta")


def test_bad_values_are_rejected(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CTXDB_ES_PORT", "not-a-port")
    with pytest.raises(ValueError, match="es_port"):
        get_settings()


def test_per_test_settings_fixture(settings: Settings, tmp_path: Path) -> None:
    assert settings.home == tmp_path
    assert settings.index_prefix.startswith("t") and len(settings.index_prefix) == 13
    assert settings.delta_uri == str(tmp_path / "delta")


def test_every_field_is_documented() -> None:
    """docs/configuration.md names the environment variable of every settings field."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    missing = [
        env
        for name, field in Settings.model_fields.items()
        if f"`{(env := field.validation_alias or f'CTXDB_{name.upper()}')}`" not in page
    ]
    assert missing == []
