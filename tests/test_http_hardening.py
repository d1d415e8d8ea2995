"""Issue 12, finding 21: hostile HTTP inputs answer a short 4xx, never a 500, never the cluster's
URL or raw error; bodies and query strings are bounded; redirects are relative.

The corpus is the search tests' one, built by the pipeline (tests/conftest_search.py); the app
runs without a model: the semantic arm is off, which none of these cases needs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest_ports import free_port_pair
from conftest_search import APP, TENANT, SearchEnv
from fastapi.testclient import TestClient

from ctxdb.serve.http import create_app
from ctxdb.settings import Settings
from ctxdb.storage.conversation_files import turn_file_path

pytestmark = pytest.mark.es

SHEETS_T2 = "conv:fi:conv_c-sheets.turn_t2.files/"


@dataclass
class Api:
    settings: Settings
    http: TestClient
    headers: dict[str, str]

    def post(self, json: object = None, content: bytes | None = None, **kw: object):
        if content is not None:
            headers = {**self.headers, "content-type": "application/json"}
            return self.http.post("/v1/search", content=content, headers=headers, **kw)
        return self.http.post("/v1/search", json=json, headers=self.headers, **kw)

    def get(self, path: str, **kw: object):
        return self.http.get(path, headers={**self.headers, **kw.pop("headers", {})}, **kw)


@pytest.fixture(scope="module")
def api(search_env: SearchEnv) -> Api:
    limits = {"max_body_bytes": 64_000, "max_query_bytes": 8_192}
    settings = search_env.settings.replace(http=limits)
    app = create_app(settings, search_env.client, load_model=False)
    http = TestClient(app, raise_server_exceptions=False)
    return Api(settings, http, {"Authorization": f"Bearer {search_env.tokens['alice']}"})


def assert_short_4xx(response, status: int = 422) -> str:
    """The answer is `status` with a one-line JSON error that echoes nothing large."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert len(body["detail"]) < 600 and "\n" not in body["detail"]
    return body["detail"]


def test_finding_21_naive_since_with_aware_until_is_not_500(api: Api) -> None:
    window = {"since": "2020-01-01T00:00:00", "until": "2999-01-01T00:00:00Z", "top_k": 50}
    response = api.post(window)
    assert response.status_code == 200, response.text
    assert {h["conversation_id"] for h in response.json()["hits"]} >= {"c-sheets"}
    # a naive bound is read as UTC, so the order check compares like with like
    backwards = api.post({"since": "2030-01-02T00:00:00", "until": "2030-01-01T00:00:00Z"})
    assert "since must not be after until" in assert_short_4xx(backwards)


@pytest.mark.parametrize(
    "body",
    [
        b'{"query": "x", "top_k": 1e999999}',
        b'{"query": "x", "days": -1e999999}',
        b'{"query": "x", "since": 1e999999}',
        b'{"conversation_id": "c-sheets", "ordinal": 1e999999}',
    ],
)
def test_finding_21_huge_number_is_a_short_422(api: Api, body: bytes) -> None:
    detail = assert_short_4xx(api.post(content=body))
    assert "inf" not in detail.lower().replace("info", "")


def test_finding_21_lone_surrogate_in_the_query_is_422(api: Api) -> None:
    detail = assert_short_4xx(api.post(content=b'{"query": "openpyxl \\ud800 formulas"}'))
    assert "query" in detail and "surrogate" in detail


def test_finding_21_over_long_ids_are_4xx_without_elasticsearch_detail(api: Api) -> None:
    long_id = "c" * 40_000
    answers = [
        api.post({"query": "x", "scope": "conversation", "conversation_id": long_id}),
        api.post({"conversation_id": long_id, "ordinal": 1}),
        api.post({"query": "x", "scope": "agent", "agent": "a" * 5_000}),
        api.get(f"/v1/conversations/c-sheets/turns/{'t' * 5_000}"),
        api.get("/v1/conversations", params={"agent": "ä" * 200}),
    ]
    for response in answers:
        detail = assert_short_4xx(response)
        assert api.settings.elasticsearch.url not in response.text
        assert "parsing_exception" not in detail and long_id not in detail


def test_finding_21_elasticsearch_errors_are_logged_not_echoed(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    dead_url = f"http://127.0.0.1:{free_port_pair()}"
    settings = api.settings.replace(elasticsearch={"url": dead_url, "request_timeout": 2.0})
    http = TestClient(create_app(settings, load_model=False), raise_server_exceptions=False)
    with caplog.at_level(logging.WARNING, logger="ctxdb.serve.http"):
        response = http.post("/v1/search", json={"query": "x"}, headers=api.headers)
    assert response.status_code == 503
    assert response.json()["error"] == "search_unavailable"
    assert dead_url not in response.text and "Connection" not in response.text
    assert dead_url in caplog.text


def test_finding_21_pull_of_nul_long_name_and_symlink_loop_is_4xx(api: Api) -> None:
    turn_dir = Path(api.settings.files) / turn_file_path(TENANT, APP, "alice", "c-sheets", "t2")
    os.symlink("loop", turn_dir / "files" / "loop")
    os.symlink("/etc/hostname", turn_dir / "files" / "away")
    nul = api.get("/v1/pull", params={"ref": SHEETS_T2 + "a\x00b.txt"})
    assert "control character" in assert_short_4xx(nul, 400)
    # a 1,900-byte file name (the OS allows 255) is a file that cannot exist
    long_name = api.get("/v1/pull", params={"ref": SHEETS_T2 + "n" * 1_900})
    assert assert_short_4xx(long_name, 404)
    assert assert_short_4xx(api.get("/v1/pull", params={"ref": SHEETS_T2 + "loop"}), 404)
    away = api.get("/v1/pull", params={"ref": SHEETS_T2 + "away"})
    assert "outside its turn directory" in assert_short_4xx(away, 400)
    # a 5 KB ref is over the documented ref length (2,048 characters)
    too_long = api.get("/v1/pull", params={"ref": SHEETS_T2 + "n" * 5_000})
    assert "ref: " in assert_short_4xx(too_long)
    ok = api.get("/v1/pull", params={"ref": SHEETS_T2 + "fixed.xlsx"})
    assert ok.status_code == 200


def test_finding_21_catalog_echo_is_bounded(api: Api) -> None:
    limit = api.settings.search.query_max_chars
    for body in (
        {"query": "q" * 50_000, "conversation_id": "c-sheets", "ordinal": 1},
        {"query": " " * 50_000, "since": "2020-01-01T00:00:00Z"},
    ):
        response = api.post(body)
        assert response.status_code == 200, response.text
        data = response.json()
        assert data["mode"] == "catalog" and len(data["query"]) == limit
        assert f"query_truncated: cut to {limit} characters" in data["warnings"]


def test_finding_21_body_and_query_string_limits(api: Api) -> None:
    big = b'{"query": "' + b"a" * 70_000 + b'"}'
    assert assert_short_4xx(api.post(content=big), 413).startswith("request body over 64000")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the bytes that arrive are counted
        yield b'{"query": "'
        for _ in range(20):
            yield b"a" * 4_000
        yield b'"}'

    assert_short_4xx(api.post(content=chunks()), 413)
    long_query = api.get("/v1/conversations", params={"agent": "a", "pad": "p" * 9_000})
    assert_short_4xx(long_query, 414)
    assert api.post({"query": "openpyxl"}).status_code == 200


def test_finding_21_trailing_slash_redirect_is_relative(api: Api) -> None:
    response = api.get(
        "/v1/conversations/", headers={"Host": "evil.example"}, follow_redirects=False
    )
    assert response.status_code == 307
    assert response.headers["location"] == "/v1/conversations"


def test_finding_21_validation_problems_are_short_and_named(api: Api) -> None:
    detail = assert_short_4xx(api.post({"query": "x", "scope": "galaxy", "top_k": 0}))
    assert detail.startswith("scope: ") and "top_k: " in detail
    assert "JSON" in assert_short_4xx(api.post(content=b'{"query": '))


@pytest.mark.parametrize(
    "path",
    ["/conversations/%E0%A4%A", "/conversations/%zz/turns/t1", "/conversations/c-k8s/turns/%C3%28"],
)
def test_issue_24_finding_8_viewer_address_with_a_malformed_escape_is_400(
    api: Api, path: str
) -> None:
    page = api.http.get(path)  # the page itself says what is wrong (tests/test_viewer.py)
    assert page.status_code == 400 and 'id="page-error"' in page.text
    assert page.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize("path", ["/conversations/caf%C3%A9", "/?q=%zz", "/conversations/c-k8s"])
def test_issue_24_finding_8_well_formed_viewer_addresses_are_200(api: Api, path: str) -> None:
    assert api.http.get(path).status_code == 200


def test_issue_24_finding_8_api_path_with_a_malformed_escape_is_a_short_4xx(api: Api) -> None:
    for path in ("/v1/conversations/%E0%A4%A/turns/t1", "/v1/conversations/c-k8s/turns/%zz"):
        assert "pattern" in assert_short_4xx(api.get(path))  # the id rules refuse it
