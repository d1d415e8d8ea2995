"""The search service against the real Elasticsearch node and the real model: each arm, fusion,
recency, scope, targets, expiry, catalog modes, materialization, fallback snippet, degradation and
cross-user isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from conftest_search import CITATION, NOW, SearchEnv

from ctxdb.contract.identity import Principal
from ctxdb.embedding.backends import resolve_backend
from ctxdb.embedding.ids import backend_model_id
from ctxdb.errors import SearchUnavailable
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.search import MissingQuery, NotFound, SearchRequest, SearchService
from ctxdb.search.service import QueryVector, index_model_ids
from ctxdb.settings import Settings

pytestmark = [pytest.mark.es, pytest.mark.model]


def keys(response) -> list[tuple[str, str]]:
    return [(h.conversation_id, h.turn_id) for h in response.hits]


def arm_only(env: SearchEnv, query: str, arm: str, **kw) -> list[tuple[str, str]]:
    """Turn keys returned by one arm alone (the service's own bodies and _msearch)."""
    request = SearchRequest(query=query, **kw)
    vector = env.service.embedder.embed_query(query) if arm == "semantic" else None
    bodies = env.service.arm_bodies(env.alice, request, query, vector, datetime.now(UTC))
    rows = env.service.run_arms({arm: bodies[arm]})[arm]
    return list(dict.fromkeys(r.key for r in rows))


def test_the_corpus_is_embedded_with_the_default_backend(search_env: SearchEnv) -> None:
    """The rows carry the model id of the configured backend (auto: ONNX fp32 for a new memory),
    and queries are embedded by the same backend."""
    embedding = search_env.settings.embedding
    backend = resolve_backend(embedding.backend, embedding.model, (), embedding.device)
    expected = backend_model_id(embedding.model, backend)
    assert index_model_ids(search_env.client, search_env.settings) == {expected}
    assert search_env.service.embedder.embedder.model_id == expected


def test_semantic_arm_finds_a_paraphrase(search_env: SearchEnv) -> None:
    found = arm_only(search_env, "trouble with Excel workbook losing calculations", "semantic")
    assert found[0] == ("c-sheets", "t1")


def test_lexical_arm_finds_the_exact_error_string(search_env: SearchEnv) -> None:
    found = arm_only(search_env, "KeyError: 'Worksheet Sheet3 does not exist.'", "lexical")
    assert found[0] == ("c-sheets", "t2")


def test_lexical_arm_weights_anchors(search_env: SearchEnv) -> None:
    # "load_workbook" is in t1's prompt and its summary anchors; anchors make t1 rank first
    found = arm_only(search_env, "load_workbook", "lexical")
    assert found == [("c-sheets", "t1")]


def test_trigram_arm_finds_a_misspelling_the_lexical_arm_misses(search_env: SearchEnv) -> None:
    query = "kubernetis CrashLoopBakOff"
    assert ("c-k8s", "t1") not in arm_only(search_env, query, "lexical")
    assert arm_only(search_env, query, "trigram")[0] == ("c-k8s", "t1")


def test_trigram_threshold_rejects_unrelated_rows(search_env: SearchEnv) -> None:
    assert arm_only(search_env, "quantum chromodynamics", "trigram") == []


def test_fused_hits_carry_identity_snippets_and_explain(search_env: SearchEnv) -> None:
    response = search_env.service.search(
        search_env.alice, SearchRequest(query="openpyxl formulas lost on save", explain=True)
    )
    assert response.mode == "search"
    top = response.hits[0]
    assert (top.conversation_id, top.turn_id) == ("c-sheets", "t1")
    assert top.title == "Spreadsheet trouble" and top.ordinal == 1
    assert {"user", "summary"} & set(top.matched_targets)
    by_target = {s.target: s for s in reversed(top.snippets)}  # first snippet per target
    assert [s.text for s in top.snippets if s.target == "user"][
        1
    ] == "also it is the file from finance"
    assert by_target["user"].text.startswith("My openpyxl workbook")
    assert by_target["assistant"].source == "turn_log"
    assert "formula loss" in by_target["summary"].text
    assert by_target["attachment"].path.endswith("user.attachments/budget.xlsx")
    e = top.explain
    assert e is not None
    k = e.knobs
    assert e.final == pytest.approx(e.rrf * (1 + k.weight_recency * e.recency) * e.brevity)
    assert e.rrf == pytest.approx(sum(a.contribution for a in e.arms.values()))
    assert e.recency == pytest.approx(2 ** (-e.age_days / k.recency_half_life_days), rel=1e-6)
    assert k == search_env.settings.search.knobs
    assert all(
        h.explain is None
        for h in search_env.service.search(search_env.alice, SearchRequest(query="openpyxl")).hits
    )


def test_snippet_selection_follows_the_request(search_env: SearchEnv) -> None:
    response = search_env.service.search(
        search_env.alice, SearchRequest(query="openpyxl formulas", snippets=["assistant"])
    )
    assert {s.target for s in response.hits[0].snippets} == {"assistant"}


def test_recency_lifts_the_newer_of_two_identical_turns(search_env: SearchEnv) -> None:
    # a lift strong enough to beat one rank of difference at the default RRF k (recency
    # weight and half-life are request parameters)
    request = SearchRequest(
        query="zebra migration serengeti",
        explain=True,
        knobs={"weight_recency": 1.0, "recency_half_life_days": 7},
    )
    ranked = keys(search_env.service.search(search_env.alice, request))
    assert ranked.index(("c-zebra-new", "t1")) < ranked.index(("c-zebra-old", "t1"))
    flat = SearchRequest(query="zebra migration serengeti", knobs={"weight_recency": 0})
    hits = search_env.service.search(search_env.alice, flat).hits
    scores = {h.conversation_id: h.score for h in hits}
    lifted = {
        h.conversation_id: h for h in search_env.service.search(search_env.alice, request).hits
    }
    new = lifted["c-zebra-new"].explain
    assert new.recency > lifted["c-zebra-old"].explain.recency
    assert (new.knobs.weight_recency, new.knobs.recency_half_life_days) == (1.0, 7)
    w_rec = new.knobs.weight_recency
    assert lifted["c-zebra-new"].score == pytest.approx(
        scores["c-zebra-new"] * (1 + w_rec * new.recency)
    )


@pytest.mark.parametrize("style", ["on %d %b %Y", "on %d.%m.%Y", "on %B %d", "in %B %Y"])
def test_a_date_in_the_query_lifts_the_turns_of_that_day(search_env: SearchEnv, style: str) -> None:
    """Two identical turns 60 days and 1 day old: recency ranks the newer first; asked for the
    older one's day (or its month and year), in any of the written forms, the older comes
    first."""
    topic = "zebra migration serengeti"
    plain = keys(search_env.service.search(search_env.alice, SearchRequest(query=topic)))
    assert plain.index(("c-zebra-new", "t1")) < plain.index(("c-zebra-old", "t1"))
    day = (NOW - timedelta(days=60)).strftime(style)
    dated = SearchRequest(query=f"{topic} {day}", explain=True)
    hits = search_env.service.search(search_env.alice, dated).hits
    assert [(h.conversation_id, h.turn_id) for h in hits][0] == ("c-zebra-old", "t1")
    assert hits[0].explain is not None and hits[0].explain.in_window


def test_an_older_span_in_the_query_is_searched_unless_days_stops_short(
    search_env: SearchEnv,
) -> None:
    """By default every age is searched, so a span the query names before any window is found
    silently; a `days` window that begins after the span's start stands and says so."""
    old = (NOW - timedelta(days=800)).strftime("%B %Y")
    query = f"zebra migration serengeti in {old}"
    default = search_env.service.search(search_env.alice, SearchRequest(query=query))
    assert not [w for w in default.warnings if w.startswith("days_")]
    assert ("c-zebra-old", "t1") in keys(default)
    given = search_env.service.search(search_env.alice, SearchRequest(query=query, days=90))
    (warning,) = [w for w in given.warnings if w.startswith("days_excludes:")]
    assert "last 90 days" in warning and "days=0" in warning
    assert ("c-zebra-old", "t1") in keys(given)
    this_month = SearchRequest(query=f"zebra migration in {NOW:%B %Y}", days=90)
    within = search_env.service.search(search_env.alice, this_month)
    assert not [w for w in within.warnings if w.startswith("days_")]


def test_a_time_expression_lifts_the_turns_inside_its_span(search_env: SearchEnv) -> None:
    request = SearchRequest(query="zebra migration serengeti in the past 2 weeks", explain=True)
    response = search_env.service.search(search_env.alice, request)
    hits = {h.conversation_id: h for h in response.hits}
    new, old = hits["c-zebra-new"].explain, hits["c-zebra-old"].explain  # 1 and 60 days old
    assert (new.in_window, old.in_window) == (True, False)
    k = new.knobs
    assert k.weight_time == search_env.settings.search.knobs.weight_time > 0
    assert new.final == pytest.approx(
        new.rrf * (1 + k.weight_recency * new.recency) * (1 + k.weight_time) * new.brevity
    )
    assert keys(response).index(("c-zebra-new", "t1")) < keys(response).index(("c-zebra-old", "t1"))
    plain = search_env.service.search(
        search_env.alice, SearchRequest(query="zebra migration serengeti", explain=True)
    )
    assert all(h.explain.in_window is None for h in plain.hits)


def test_days_and_window_limit_the_rows(search_env: SearchEnv) -> None:
    within_week = search_env.service.search(
        search_env.alice, SearchRequest(query="zebra migration serengeti", days=7)
    )
    assert ("c-zebra-old", "t1") not in keys(within_week)
    window = SearchRequest(
        query="kubernetes pod memory cpu",
        since=NOW - timedelta(days=40),
        until=NOW - timedelta(days=20),
    )
    assert keys(search_env.service.search(search_env.alice, window)) == [("c-k8s", "t1")]


def test_scope_conversation_and_agent(search_env: SearchEnv) -> None:
    in_conv = SearchRequest(
        query="openpyxl",
        scope="conversation",
        conversation_id="c-k8s",
        knobs={"min_score": 0},
    )
    assert {
        h.conversation_id for h in search_env.service.search(search_env.alice, in_conv).hits
    } == {"c-k8s"}
    by_agent = SearchRequest(query="deployment workbook lasagna", scope="agent", agent="ops")
    hits = search_env.service.search(search_env.alice, by_agent).hits
    assert hits and {h.conversation_id for h in hits} == {"c-k8s"}


def test_per_conversation_cap_on_request_never_in_conversation_scope(
    search_env: SearchEnv,
) -> None:
    query = "kubernetes deployment resources limits requests pod"

    def k8s_hits(**kw) -> int:
        request = SearchRequest(query=query, top_k=10, **kw)
        hits = search_env.service.search(search_env.alice, request).hits
        return [h.conversation_id for h in hits].count("c-k8s")

    assert k8s_hits(knobs={"cap_user_scope": True}) == 2
    assert k8s_hits(knobs={"cap_user_scope": True, "max_per_conversation": 1}) == 1
    assert k8s_hits(knobs={"cap_user_scope": False}) == 3
    assert (
        k8s_hits(scope="conversation", conversation_id="c-k8s", knobs={"cap_user_scope": True}) == 3
    )


def test_targets_filter_rows_and_notes_are_opt_in(search_env: SearchEnv) -> None:
    note_query = "suggest upgrading openpyxl 3.1"
    default = search_env.service.search(
        search_env.alice, SearchRequest(query=note_query, explain=True)
    )
    assert all("notes" not in h.matched_targets for h in default.hits)
    with_notes = search_env.service.search(
        search_env.alice, SearchRequest(query=note_query, targets=["notes"])
    )
    assert keys(with_notes)[0] == ("c-sheets", "t2")
    assert with_notes.hits[0].target == "notes"
    assert with_notes.hits[0].snippets[0].text.startswith("User is probably on openpyxl")
    only_assistant = search_env.service.search(
        search_env.alice, SearchRequest(query="openpyxl", targets=["assistant"])
    )
    assert {t for h in only_assistant.hits for t in h.matched_targets} == {"assistant"}


def test_expired_turns_are_never_found(search_env: SearchEnv) -> None:
    response = search_env.service.search(
        search_env.alice, SearchRequest(query="openpyxl chart colors graphicalProperties", top_k=20)
    )
    assert "c-old" not in {h.conversation_id for h in response.hits}
    with pytest.raises(NotFound):
        search_env.service.turn(search_env.alice, "c-old", "t1")
    # its rows and TurnLog are indexed (expired, not missing): the expiry filter hides them
    prefix = search_env.settings.elasticsearch.index_prefix
    for kind in (ROWS, TURNS):
        query = {"term": {"conversation_id": "c-old"}}
        assert search_env.client.count(index=alias_name(prefix, kind), query=query)["count"] > 0


def test_missing_turn_log_gives_one_fallback_snippet_and_a_warning(search_env: SearchEnv) -> None:
    response = search_env.service.search(
        search_env.alice, SearchRequest(query="ConditionalCheckFailedException state lock")
    )
    hit = response.hits[0]
    assert (hit.conversation_id, hit.turn_id) == ("c-nolog", "t1")
    assert len(hit.snippets) == 1
    assert hit.snippets[0].source == "retrieval_row"
    assert hit.snippets[0].path == "conv:ar:t1.react.turn.index"
    assert "ConditionalCheckFailedException" in hit.snippets[0].text
    assert any(w.startswith("turn_log_missing: c-nolog/t1") for w in response.warnings)


def test_degraded_semantic_arm_other_arms_answer(search_env: SearchEnv) -> None:
    """Fake embedder on purpose: this test is about the embedding model failing."""

    class BrokenModel:
        def embed(self, text: str) -> QueryVector | None:
            raise RuntimeError("model weights unavailable")

    service = SearchService(search_env.settings, search_env.client, BrokenModel())
    response = service.search(
        search_env.alice, SearchRequest(query="KeyError Worksheet Sheet3", explain=True)
    )
    assert keys(response)[0] == ("c-sheets", "t2")
    assert all(h.explain.arms["semantic"].rank is None for h in response.hits)
    assert any(w.startswith("semantic_unavailable") for w in response.warnings)
    no_model = SearchService(search_env.settings, search_env.client, None)
    assert any(
        "semantic_unavailable" in w
        for w in no_model.search(search_env.alice, SearchRequest(query="openpyxl")).warnings
    )


def test_unreachable_elasticsearch_is_a_clear_error(search_env: SearchEnv) -> None:
    from ctxdb.index.client import make_client

    settings = Settings(elasticsearch={"url": "http://127.0.0.1:1", "request_timeout": 2})
    service = SearchService(settings, make_client(settings), None)
    with pytest.raises(SearchUnavailable, match="unreachable at http://127.0.0.1:1"):
        service.search(search_env.alice, SearchRequest(query="openpyxl"))


def test_missing_index_is_a_clear_error(search_env: SearchEnv) -> None:
    settings = search_env.settings.replace(
        elasticsearch={"index_prefix": "t-search-no-such-prefix"}
    )
    with pytest.raises(SearchUnavailable, match="run the indexing pipeline"):
        SearchService(settings, search_env.client, None).search(
            search_env.alice, SearchRequest(query="openpyxl")
        )


def test_blank_query_without_window_is_missing_query(search_env: SearchEnv) -> None:
    with pytest.raises(MissingQuery, match="missing_query"):
        search_env.service.search(search_env.alice, SearchRequest(query="   "))


def test_long_query_is_cut_with_a_warning(search_env: SearchEnv) -> None:
    response = search_env.service.search(
        search_env.alice, SearchRequest(query="openpyxl " + "x" * 500)
    )
    assert len(response.query) == search_env.settings.search.query_max_chars
    assert any(w.startswith("query_truncated") for w in response.warnings)


def test_catalog_first_last_and_nth(search_env: SearchEnv) -> None:
    def nth(n: int):
        return search_env.service.search(
            search_env.alice, SearchRequest(conversation_id="c-k8s", ordinal=n)
        )

    first = nth(1)
    assert first.mode == "catalog" and keys(first) == [("c-k8s", "t1")]
    assert first.hits[0].ordinal == 1 and first.hits[0].score is None
    assert first.hits[0].snippets[0].text.startswith("my kubernetes pod")
    assert keys(nth(2)) == [("c-k8s", "t2")]
    last = nth(-1)
    assert keys(last) == [("c-k8s", "t3")] and last.hits[0].ordinal == 3
    assert keys(nth(-3)) == [("c-k8s", "t1")]
    beyond = nth(9)
    assert beyond.hits == [] and beyond.warnings == ["no turn at ordinal 9"]


def test_catalog_window_without_query(search_env: SearchEnv) -> None:
    response = search_env.service.search(
        search_env.alice,
        SearchRequest(since=NOW - timedelta(days=2.5), until=NOW, top_k=20),
    )
    assert response.mode == "catalog"
    assert keys(response) == [
        ("c-cook", "t1"),
        ("c-k8s", "t2"),
        ("c-zebra-new", "t1"),
        ("c-k8s", "t3"),
    ] or keys(response) == [
        ("c-cook", "t1"),
        ("c-zebra-new", "t1"),
        ("c-k8s", "t2"),
        ("c-k8s", "t3"),
    ]
    scoped = search_env.service.search(
        search_env.alice,
        SearchRequest(
            scope="conversation", conversation_id="c-k8s", since=NOW - timedelta(days=60)
        ),
    )
    assert keys(scoped) == [("c-k8s", "t1"), ("c-k8s", "t2"), ("c-k8s", "t3")]


def test_conversation_list_by_last_activity_with_titles(search_env: SearchEnv) -> None:
    listing = search_env.service.conversations(search_env.alice).conversations
    ids = [c.conversation_id for c in listing]
    assert ids == ["c-k8s", "c-zebra-new", "c-cook", "c-sheets", "c-zebra-old"]
    k8s = listing[0]
    assert k8s.title == "Pod restarts" and k8s.turns == 3 and k8s.agent == "ops"
    assert [
        c.conversation_id
        for c in search_env.service.conversations(search_env.alice, agent="ops").conversations
    ] == ["c-k8s"]
    assert [
        c.conversation_id for c in search_env.service.conversations(search_env.bob).conversations
    ] == ["c-bob", "c-sheets-bob"] or [
        c.conversation_id for c in search_env.service.conversations(search_env.bob).conversations
    ] == ["c-sheets-bob", "c-bob"]


def test_conversation_pages_follow_next_offset_through_the_whole_list(
    search_env: SearchEnv,
) -> None:
    whole = search_env.service.conversations(search_env.alice)
    assert whole.next_offset is None
    paged: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = search_env.service.conversations(search_env.alice, limit=2, offset=offset)
        assert len(page.conversations) <= 2
        paged += [c.conversation_id for c in page.conversations]
        offset = page.next_offset
    assert paged == [c.conversation_id for c in whole.conversations]
    assert search_env.service.conversations(search_env.alice, offset=5).conversations == []


def test_known_turn_rebuilds_messages_cards_files_and_citations(search_env: SearchEnv) -> None:
    t1 = search_env.service.turn(search_env.alice, "c-sheets", "t1")
    assert [m.role for m in t1.messages] == ["user", "user", "assistant"]
    assert t1.messages[1].event_type == "event.user.followup"
    assert t1.attachments[0].filename == "budget.xlsx"
    assert t1.attachments[0].ref == "conv:fi:conv_c-sheets.turn_t1.user.attachments/budget.xlsx"
    assert t1.citations == [{"source": CITATION}]  # the chat.citations event's url
    assert "formula loss" in (t1.summary or "")
    t2 = search_env.service.turn(search_env.alice, "c-sheets", "t2")
    assert t2.files[0].ref == "conv:fi:conv_c-sheets.turn_t2.files/fixed.xlsx"
    assert t2.files[0].filename == "fixed.xlsx"


def test_cross_user_isolation(search_env: SearchEnv) -> None:
    svc, alice, bob = search_env.service, search_env.alice, search_env.bob
    # bob's words never reach alice, however close the query
    hits = svc.search(alice, SearchRequest(query="openpyxl payroll secret salaries", top_k=50)).hits
    assert all(not h.conversation_id.startswith(("c-bob", "c-sheets-bob")) for h in hits)
    # by id: bob's conversation named explicitly is NotFound (not forbidden, no data)
    with pytest.raises(NotFound):
        svc.search(
            alice, SearchRequest(query="payroll", scope="conversation", conversation_id="c-bob")
        )
    with pytest.raises(NotFound):
        svc.search(alice, SearchRequest(conversation_id="c-bob", ordinal=1))
    with pytest.raises(NotFound):
        svc.turn(alice, "c-bob", "t1")
    # guessing ids: the same turn id in alice's own conversation is hers, bob's is not
    assert svc.turn(alice, "c-sheets", "t1").messages[0].text.startswith("My openpyxl")
    for guess in ("c-bob", "c-sheets-bob", "c-sheets ", "*", "c-*", "c-bob:t1"):
        with pytest.raises(NotFound):
            svc.turn(alice, guess, "t1")
    # by ref: bob's file ref as a query finds none of bob's turns
    by_ref = svc.search(
        alice, SearchRequest(query="conv:fi:conv_c-bob.turn_t1.files/salaries.xlsx", top_k=50)
    )
    assert all(h.conversation_id != "c-bob" for h in by_ref.hits)
    # the same tenant boundary: a principal in another tenant sees nothing of alice's
    other_tenant = Principal(user_id="alice", tenant="t2")
    assert svc.search(other_tenant, SearchRequest(query="openpyxl")).hits == []
    assert svc.conversations(other_tenant).conversations == []
    # and bob sees his own turn, never alice's
    assert {
        h.conversation_id for h in svc.search(bob, SearchRequest(query="openpyxl formulas")).hits
    } <= {"c-bob", "c-sheets-bob"}


def test_time_expressions_do_not_reach_the_text_arms(search_env: SearchEnv) -> None:
    """'from last week' says when, not what: the lexical and trigram arms search the topic words
    only (else any row with 'week' or 'last' would match), and still find the turn."""
    now = datetime.now(UTC)
    service, alice = search_env.service, search_env.alice
    timed = SearchRequest(query="formulas lost in my workbook from last week")
    plain = SearchRequest(query="formulas lost in my workbook")
    with_time = service.arm_bodies(alice, timed, timed.query, None, now)
    without = service.arm_bodies(alice, plain, plain.query, None, now)
    assert with_time["lexical"] == without["lexical"]
    assert with_time["trigram"] == without["trigram"]
    assert "week" not in str(with_time["lexical"]) and "week" not in str(with_time["trigram"])
    assert keys(service.search(alice, timed))[0] == ("c-sheets", "t1")
