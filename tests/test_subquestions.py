"""Compound questions (ctxdb.search.subquestions, issue 29): the kNN arm is also asked each part of
a question that joins two, and the parts' rows are interleaved with the whole query's.

The pure parts first, then the real node with the configured embedding model: Alice's memory has
two unrelated answers in two sessions, her favorite conference talk and how she got to campus,
among other turns; Bob has the very same turns. The compound question must bring both of hers
into the kNN arm's first rows and none of his.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest_search import NOW, TENANT, Turn, build_memory

import ctxdb.search.service as service_module
from ctxdb.auth.credentials import Principal
from ctxdb.index.client import make_client
from ctxdb.search.arms import RowHit
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import QueryVector, SearchService, default_embedder
from ctxdb.search.subquestions import MAX_PARTS, interleave, sub_questions
from ctxdb.settings import Settings

ALICE = Principal(user_id="alice", tenant=TENANT)
QUESTION = "what was my favorite talk at the conference, and how did I get to campus this morning?"


def test_a_new_question_after_a_question_mark_or_and_starts_a_part() -> None:
    assert sub_questions(QUESTION) == [
        "what was my favorite talk at the conference",
        "how did I get to campus this morning?",
    ]
    assert sub_questions("where do I work? how long have I been there?") == [
        "where do I work?",
        "how long have I been there?",
    ]
    assert sub_questions("what do I like to eat and drink?") == []  # no question after "and"
    # a helper verb after "and" starts a question only before its subject
    assert sub_questions("which cafe has good pasta and is close to my office?") == []
    assert sub_questions("who do I know who plays guitar and can teach me?") == []
    assert sub_questions("what did Tom and Will do at the lake?") == []
    assert sub_questions("where do I work, and can I walk there?") == [
        "where do I work",
        "can I walk there?",
    ]
    # a first piece without a content word joins the next one
    assert sub_questions("so and what did I eat? and where did I go?") == [
        "so what did I eat?",
        "where did I go?",
    ]
    assert sub_questions("what superpower do I wish I had? why?") == []  # "why?" holds no content
    assert sub_questions("what is my favorite movie? (i.e. the one I watch most)") == []
    many = "what is my job? where do I live? who is my doctor? when is my birthday?"
    assert len(sub_questions(many)) == MAX_PARTS
    assert sub_questions(many)[-1] == "who is my doctor? when is my birthday?"


def row(conversation: str, turn: str) -> RowHit:
    return RowHit(conversation_id=conversation, turn_id=turn, target="user", ts=NOW, score=1.0)


def test_interleave_takes_each_list_in_turn_and_each_row_once() -> None:
    whole = [row("a", "1"), row("b", "1"), row("c", "1")]
    part = [row("d", "1"), row("a", "1")]
    merged = [r.key for r in interleave([whole, part])]
    assert merged == [("a", "1"), ("d", "1"), ("b", "1"), ("c", "1")]
    assert interleave([]) == []
    assert [r.key for r in interleave([[], part])] == [("d", "1"), ("a", "1")]


def corpus() -> list[Turn]:
    turns = []
    for user, prefix in (("alice", "c"), ("bob", "b")):
        turns += [
            Turn(user, f"{prefix}-conf", "t1", 9, "I went to the data conference", "How was it?"),
            Turn(user, f"{prefix}-conf", "t2", 8.9, "the storage keynote was my favorite", "Nice"),
            Turn(user, f"{prefix}-bus", "t1", 2, "I took the early bus to campus today", "Good."),
            Turn(user, f"{prefix}-food", "t1", 4, "I baked bread over the weekend", "Yum."),
            Turn(user, f"{prefix}-run", "t1", 5, "my morning run was cold", "Stay warm."),
            Turn(
                user, f"{prefix}-talk", "t1", 6, "I gave a talk to my reading group", "Well done."
            ),
        ]
    return turns


@pytest.fixture
def service(settings: Settings):
    build_memory(settings, corpus())
    with make_client(settings) as client:
        yield SearchService(settings, client, default_embedder(settings, client))


def knn(service: SearchService, query: str, **request) -> list[RowHit]:
    asked = SearchRequest(query=query, **request)
    vector = service.embedder.embed(query)
    assert vector is not None
    rows = service.semantic_arm(ALICE, asked, query, vector.values, NOW, model=vector.model)
    rows = rows["semantic"]
    assert rows and all(r.conversation_id.startswith("c-") for r in rows)  # never Bob's
    return rows


def test_the_knn_arm_reaches_the_answer_of_every_part(service) -> None:
    first = list(dict.fromkeys(r.key for r in knn(service, QUESTION)))[:3]
    assert {("c-conf", "t2"), ("c-bus", "t1")} <= set(first)
    # the whole query's rows (as without splitting) and each part's, round-robin; no session
    # lift, so the whole query's rows are the plain kNN's
    alone = knn(service, QUESTION, knobs={"split_questions": False, "session_weight": 0})
    request = SearchRequest(query=QUESTION, knobs={"session_weight": 0})
    parts = service._part_rows(ALICE, request, sub_questions(QUESTION), NOW, None)
    assert len(parts) == 2 and all(parts)
    split = knn(service, QUESTION, knobs={"session_weight": 0})
    assert [(r.key, r.target) for r in split] == [
        (r.key, r.target) for r in interleave([alone, *parts])
    ]


def test_splitting_follows_the_request_then_the_settings(service, settings: Settings) -> None:
    whole = [(r.key, r.target) for r in knn(service, QUESTION, knobs={"split_questions": False})]
    assert [(r.key, r.target) for r in knn(service, QUESTION)] != whole
    off = SearchService(
        settings.replace(search={"knobs": {"split_questions": False}}),
        service.client,
        service.embedder,
    )
    assert [(r.key, r.target) for r in knn(off, QUESTION)] == whole
    assert [(r.key, r.target) for r in knn(off, QUESTION, knobs={"split_questions": True})] != whole


class PartsFail:
    """The model failing on the parts only (a stand-in on purpose: this test is about the
    embedding model failing): the whole query's vector comes from the real model."""

    def __init__(self, real) -> None:
        self.real = real

    def embed(self, text: str) -> QueryVector | None:
        if text == QUESTION:
            return self.real.embed(text)
        raise RuntimeError("model weights unavailable")


def test_parts_that_cannot_be_embedded_leave_the_whole_query(service, settings: Settings) -> None:
    failing = SearchService(settings, service.client, PartsFail(service.embedder))
    whole = [(r.key, r.target) for r in knn(service, QUESTION, knobs={"split_questions": False})]
    assert [(r.key, r.target) for r in knn(failing, QUESTION)] == whole
    response = failing.search(ALICE, SearchRequest(query=QUESTION), NOW)
    assert response.hits and not response.warnings


def test_parts_still_queued_when_the_whole_query_returns_are_awaited(
    service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the parts' job may not have started when the whole query's kNN is back (here
    the arms pool's only thread is busy for a moment): the search waits for it, never cancels
    it (a 1M-row bench run once failed with CancelledError this way)."""
    expected = [(r.key, r.target) for r in knn(service, QUESTION, knobs={"session_weight": 0})]
    busy = ThreadPoolExecutor(1)
    monkeypatch.setattr(service_module, "_ARMS_POOL", busy)
    busy.submit(time.sleep, 1.0)
    try:
        split = [(r.key, r.target) for r in knn(service, QUESTION, knobs={"session_weight": 0})]
    finally:
        busy.shutdown()
    assert split == expected
