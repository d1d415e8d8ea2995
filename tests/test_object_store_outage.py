"""Issue 41, finding 13: a frozen S3 endpoint fails a writer within the documented bound (the
delta-rs client timeouts ctxdb sets unless the storage options name their own; object_store's
defaults retried for 180 s), with one `error:` line naming the endpoint.

The endpoint is a frozen stand-in: a loopback listener that accepts connections and never
answers, as a hung S3 endpoint does (the test is about that component failing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from frozen_listener import frozen_listener

from ctxdb.settings import OBJECT_STORE_TIMEOUTS, Settings

pytestmark = pytest.mark.es

CTXDB = str(Path(sys.executable).with_name("ctxdb"))

KEYS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


def test_object_store_timeouts_are_defaults_the_options_override() -> None:
    assert Settings().object_store_options == OBJECT_STORE_TIMEOUTS
    given = Settings(object_store_options={"TIMEOUT": "2s", "AWS_REGION": "eu-west-1"})
    assert given.object_store_options == {
        "connect_timeout": OBJECT_STORE_TIMEOUTS["connect_timeout"],
        "retry_timeout": OBJECT_STORE_TIMEOUTS["retry_timeout"],
        "TIMEOUT": "2s",
        "AWS_REGION": "eu-west-1",
    }


def test_issue_41_finding_13_a_frozen_s3_endpoint_fails_land_with_one_line(
    settings: Settings,
) -> None:
    """`ctxdb land` of a local folder into a storage root on the frozen endpoint: the first
    Delta request is abandoned after the options' `timeout` (2 s here, overriding the default)
    and not retried (`retry_timeout` has passed), and the run ends with exit 1 and one line
    naming the endpoint and the timeout."""
    landing = Path(settings.landing_uri)
    landing.mkdir(parents=True)
    (landing / "events.jsonl").write_text('{"event_id": "e1"}\n')
    env = {
        **os.environ,
        "CTXDB_HOME": str(settings.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": settings.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": settings.elasticsearch.url,
        "CTXDB_STORAGE_ROOT": "s3://frozen-bucket",
    }
    with frozen_listener() as frozen:
        options = {**KEYS, "AWS_ENDPOINT_URL": frozen.url, "timeout": "2s", "retry_timeout": "1s"}
        env["CTXDB_OBJECT_STORE_OPTIONS"] = json.dumps(options)
        done = subprocess.run(
            [CTXDB, "land", "--path", str(landing)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        connections = frozen.connections

    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert f"object store at {frozen.url} failed after 2 s" in done.stderr
    assert "timed out" in done.stderr
    assert connections == 1
