"""Names the memory cannot tell apart (ctxdb.search.names, issue 29): a capitalized name in none
or in at least half of the caller's conversations is left out of the query the arms search with;
a name in some of them, or led by a preposition or an article, stays.

The pure parts first, then the real node: Alice has ten conversations. "Osaka" is in four,
"Caroline" (her partner greeting her) in five, "Alex" in none. Bob names Osaka in both of his,
so a count that crossed users would make Osaka common for Alice (6 of 12) and drop it.
"""

from __future__ import annotations

import pytest
from conftest_search import NOW, TENANT, Turn, build_memory

from ctxdb.auth.credentials import Principal
from ctxdb.index.client import make_client
from ctxdb.search import names
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import SearchService, default_embedder
from ctxdb.settings import Settings

ALICE = Principal(user_id="alice", tenant=TENANT)


def test_query_names_are_capitalized_words_inside_a_sentence() -> None:
    found = names.query_names("what is Alex's major? Caroline said so. I met Ben in May")
    assert found == {"Alex": "alex", "Ben": "ben"}  # a sentence's first word, I, May: no names
    assert names.query_names("what is Alex’s plan") == {"Alex": "alex"}  # a curly apostrophe
    assert names.query_names("Where did At the end go") == {}  # stopwords are no names
    assert names.query_names("what did we do Last Week, Yesterday") == {}  # times
    # after a colon a sentence starts; a name after an article or a preposition is the topic
    assert names.query_names("what did Sam say about: is the Avengers plot in Japan?") == {
        "Sam": "sam"
    }
    assert names.query_names("what did I eat in Japan, and how was Japan?") == {}
    assert names.query_names("what did I buy for Alex with Sam?") == {"Alex": "alex", "Sam": "sam"}


def aggregations(total: int, **conversations: int) -> dict:
    buckets = {
        stem: {"doc_count": 2 * n, "conversations": {"value": n}}
        for stem, n in conversations.items()
    }
    return {"conversations": {"value": total}, "names": {"buckets": buckets}}


def test_a_date_is_never_a_name_and_stays_whole() -> None:
    query = "What did Jan buy on 5 Jan 2024?"
    assert names.query_names(query) == {"Jan": "jan"}  # the person, not the month
    assert names.without_names(query, {"Jan"}) == "What did buy on 5 Jan 2024?"
    period = "What did Jan buy in Jan 2024?"  # a month named with its year is a date's too
    assert names.query_names(period) == {"Jan": "jan"}
    assert names.without_names(period, {"Jan"}) == "What did buy in Jan 2024?"


def test_left_out_are_unknown_names_and_names_in_most_conversations() -> None:
    found = {"Alex": "alex", "Osaka": "osaka", "Caroline": "carolin", "Ben": "ben"}
    counts = aggregations(4, alex=0, osaka=1, carolin=2)  # no bucket for ben: it stays
    assert names.left_out(found, counts, min_conversations=4) == {"Alex", "Caroline"}
    assert names.left_out(found, counts, share=0.75, min_conversations=4) == {"Alex"}
    assert names.left_out(found, counts) == {"Alex"}  # 4 conversations: too few to call common
    assert names.left_out(found, aggregations(0, alex=0, osaka=0, carolin=0)) == set()


def test_without_names_removes_every_occurrence_and_only_the_name() -> None:
    query = "did Alex say Alex's plan in Osaka suits Alexander and Alex’s dog?"
    assert names.without_names(query, {"Alex"}) == "did say plan in Osaka suits Alexander and dog?"
    assert names.without_names("where is Alex's?", {"Alex"}) == "where is Alex's?"  # no content
    untouched = "what did  Alex say\nabout it"
    assert names.without_names(untouched, set()) is untouched


def corpus() -> list[Turn]:
    alice = [
        ("I flew to Osaka for the conference", "Enjoy the trip!"),
        ("Osaka food was amazing", "Glad you liked it."),
        ("back from Osaka", "Welcome home."),
        ("Osaka castle photos", "Beautiful."),
        ("we adopted a puppy", "Hey Caroline, congrats!"),
        ("my sister started painting", "Hi Caroline! Lovely."),
        ("I am majoring in biology", "Caroline, that is great."),
        ("the garden is blooming", "Hey Caroline, nice."),
        ("new running shoes", "Caroline! Enjoy them."),
        ("cooking pasta tonight", "Sounds tasty."),
    ]
    turns = [
        Turn("alice", f"c{n}", "t1", 10 - n * 0.5, prompt, answer)
        for n, (prompt, answer) in enumerate(alice)
    ]
    return turns + [
        Turn("bob", "b1", "t1", 8, "Osaka again next week", "Safe travels."),
        Turn("bob", "b2", "t1", 4, "Osaka has the best ramen", "Agreed."),
    ]


@pytest.fixture
def service(settings: Settings):
    build_memory(settings, corpus(), embed=False)
    with make_client(settings) as client:
        yield SearchService(settings, client, None)


def focused(service: SearchService, query: str, **request) -> str:
    return service.focused_query(ALICE, SearchRequest(query=query, **request), query, NOW)


def test_the_arms_search_without_names_the_memory_cannot_tell_apart(service) -> None:
    assert focused(service, "what is Alex majoring in?") == "what is majoring in?"  # in none
    assert focused(service, "what did Caroline adopt?") == "what did adopt?"  # in 5 of 10
    # led by a preposition, the topic asked about stays, common or unknown
    assert focused(service, "what did I say about Caroline?") == "what did I say about Caroline?"
    assert focused(service, "what did I eat in Kyoto?") == "what did I eat in Kyoto?"
    # in 4 of Alice's 10: content; Bob's two conversations never count for her
    assert focused(service, "when did I visit Osaka?") == "when did I visit Osaka?"
    assert focused(service, "when did Osaka food amaze me?") == "when did Osaka food amaze me?"


def test_focus_follows_the_request_then_the_settings_and_skips_conversation_scope(
    service, settings: Settings
) -> None:
    query = "what is Alex majoring in?"
    assert focused(service, query, knobs={"focus_names": False}) == query
    off = SearchService(
        settings.replace(search={"knobs": {"focus_names": False}}), service.client, None
    )
    assert off.focused_query(ALICE, SearchRequest(query=query), query, NOW) == query
    assert focused(off, query, knobs={"focus_names": True}) == "what is majoring in?"
    assert focused(service, query, scope="conversation", conversation_id="c6") == query


def test_search_says_what_the_arms_searched_for_and_stays_inside_the_caller(service) -> None:
    response = service.search(
        ALICE,
        SearchRequest(query="what is Alex majoring in?", explain=True, knobs={"min_score": 0}),
        NOW,
    )
    assert "names_left_out: the arms searched for 'what is majoring in?'" in response.warnings
    assert response.query == "what is Alex majoring in?"
    assert [(h.conversation_id, h.turn_id) for h in response.hits][:1] == [("c6", "t1")]
    quiet = service.search(ALICE, SearchRequest(query="what is Alex majoring in?"), NOW)
    assert not [w for w in quiet.warnings if w.startswith("names_left_out")]  # explain only


def test_unreadable_counts_leave_the_query_as_given(settings: Settings) -> None:
    """The node is unreachable (a closed port, not a stand-in): the query is searched as given,
    and the arms report the node's failure themselves."""
    dead = settings.replace(elasticsearch={"url": "http://127.0.0.1:9"})
    with make_client(dead) as client:
        service = SearchService(dead, client, None)
        assert focused(service, "what is Alex majoring in?") == "what is Alex majoring in?"


def test_the_knn_arm_embeds_the_text_the_arms_search(settings: Settings) -> None:
    """A query's embedding starts while its names are counted; whether a name is left out
    ("Alex", in none) or stays ("Osaka", in four), the kNN arm searches with the vector of the
    text the arms search, as a search of that text as given does."""
    build_memory(settings, corpus())
    with make_client(settings) as client:
        service = SearchService(settings, client, default_embedder(settings, client))

        def semantic(query: str, **knobs: object) -> dict[tuple[str, str], float | None]:
            request = SearchRequest(
                query=query, top_k=10, explain=True, knobs={"min_score": 0, **knobs}
            )
            hits = service.search(ALICE, request, NOW).hits
            return {(h.conversation_id, h.turn_id): h.explain.arms["semantic"].score for h in hits}

        left_out = semantic("what is Alex majoring in?")
        assert left_out == semantic("what is majoring in?")
        assert left_out != semantic("what is Alex majoring in?", focus_names=False)
        kept = semantic("when did I visit Osaka?")
        assert kept == semantic("when did I visit Osaka?", focus_names=False)
        assert any(score is not None for score in kept.values())
