"""The mappings created on the real node equal the JSON documented in docs/elasticsearch.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from elasticsearch import helpers

from ctxdb.index.client import make_client
from ctxdb.index.mappings import ROWS, TURNS, alias_name, index_body
from ctxdb.index.versions import ensure_index
from ctxdb.search.arms import semantic_body

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


@pytest.mark.parametrize("vector_index", ["hnsw", "int8_hnsw", "bbq_hnsw"])
def test_knn_oversample_rescores_quantized_vectors_with_the_floats(es_settings, vector_index):
    """With `rescore_vector` every index type answers with the float cosine score (a quantized
    index rescores its candidates with the stored floats). Without it int8_hnsw scores with its
    int8 vectors; bbq_hnsw rescores anyway (its mapping default is an oversample of 3)."""
    es = make_client(es_settings)
    name = f"{es_settings.elasticsearch.index_prefix}-oversample-{vector_index.replace('_', '-')}"
    body = index_body(ROWS, 384, vector_index=vector_index)
    es.indices.create(index=name, settings=body["settings"], mappings=body["mappings"])
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(64, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    helpers.bulk(
        es,
        ({"_index": name, "_id": str(i), "embedding": v.tolist()} for i, v in enumerate(vectors)),
        refresh=True,
    )
    query = vectors[0] + 0.5 * vectors[1]
    query /= np.linalg.norm(query)
    exact = (1 + vectors @ query) / 2  # Elasticsearch's cosine score

    def scores(oversample: float) -> dict[str, float]:
        knn = semantic_body(
            query.tolist(), {"match_all": {}}, k=5, num_candidates=64, oversample=oversample
        )["knn"]
        hits = es.search(index=name, knn=knn, size=5)["hits"]["hits"]
        return {hit["_id"]: hit["_score"] for hit in hits}

    rescored = scores(3.0)
    assert list(rescored) == [str(i) for i in np.argsort(-exact)[:5]]
    for doc_id, score in rescored.items():
        assert score == pytest.approx(exact[int(doc_id)], abs=1e-5)
    plain = scores(0)
    drift = max(abs(score - exact[int(doc_id)]) for doc_id, score in plain.items())
    assert (drift > 1e-5) == (vector_index == "int8_hnsw")
