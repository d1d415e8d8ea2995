"""The mappings created on the real node equal the JSON documented in docs/elasticsearch.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxdb.index.client import make_client
from ctxdb.index.lifecycle import ensure_index
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body

pytestmark = pytest.mark.es

DOC = Path(__file__).resolve().parents[1] / "docs" / "elasticsearch.md"


def documented_bodies() -> dict[str, dict]:
    text = DOC.read_text()
    sections = {ROWS: "## Rows index body", TURNS: "## Turns index body"}
    bodies = {}
    for kind, heading in sections.items():
        after = text[text.index(heading) :]
        bodies[kind] = json.loads(re.search(r"```json\n(.*?)\n```", after, re.S).group(1))
    return bodies


def test_documented_bodies_are_the_mappings_module():
    docs = documented_bodies()
    assert docs[ROWS] == index_body(ROWS)
    assert docs[TURNS] == index_body(TURNS)


def test_live_mapping_on_the_node_matches_the_documentation(es_settings):
    es = make_client(es_settings)
    docs = documented_bodies()
    for kind in (ROWS, TURNS):
        name = ensure_index(
            es, es_settings.elasticsearch.index_prefix, kind, dims=384, model_id="m"
        )
        live = es.indices.get(index=name)[name]
        assert live["mappings"]["properties"] == docs[kind]["mappings"]["properties"]
        assert live["mappings"]["dynamic"] == docs[kind]["mappings"]["dynamic"]
        assert live["mappings"]["_meta"]["kind"] == kind
        assert live["settings"]["index"]["number_of_shards"] == "1"
        assert live["aliases"] == {
            alias_name(es_settings.elasticsearch.index_prefix, kind): {"is_write_index": True}
        }
