"""`ctxdb search|conversations|turn|pull|tokens` through Typer's runner, as the token's user."""

from __future__ import annotations

import json

import pytest
from conftest_search import SearchEnv
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app

pytestmark = [pytest.mark.es]

_register_all()
runner = CliRunner()


def cli(env: SearchEnv, *args: str, token: str | None = None):
    s = env.settings
    environ = {
        "CTXDB_HOME": str(s.home),
        "CTXDB_ELASTICSEARCH_INDEX_PREFIX": s.elasticsearch.index_prefix,
        "ELASTICSEARCH_URL": s.elasticsearch.url,
        "CTXDB_TOKEN": token or "",
    }
    return runner.invoke(app, list(args), env=environ)


def test_search_as_the_token_user_human_and_json(search_env: SearchEnv) -> None:
    alice = search_env.tokens["alice"]
    human = cli(
        search_env,
        "search",
        "KeyError Worksheet Sheet3",
        "--knob",
        "weight_semantic=0",
        "--explain",
        token=alice,
    )
    assert human.exit_code == 0, human.output
    assert "c-sheets/t2 #2 'Spreadsheet trouble'" in human.output.splitlines()[1]
    assert "explain: semantic=- lexical=r1" in human.output
    assert " brevity=" in human.output  # the factors shown multiply to `final`
    assert "warning: semantic_unavailable" not in human.output  # turned off, not unavailable
    as_json = cli(
        search_env,
        "search",
        "payroll salaries",
        "--knob",
        "weight_semantic=0",
        "--json",
        "-k",
        "10",
        token=alice,
    )
    assert as_json.exit_code == 0
    assert "c-bob" not in {h["conversation_id"] for h in json.loads(as_json.stdout)["hits"]}
    bob = cli(
        search_env,
        "search",
        "payroll salaries",
        "--knob",
        "weight_semantic=0",
        "--json",
        token=search_env.tokens["bob"],
    )
    assert json.loads(bob.stdout)["hits"][0]["conversation_id"] == "c-bob"


def test_catalog_options(search_env: SearchEnv) -> None:
    alice = search_env.tokens["alice"]
    last = cli(
        search_env, "search", "--conversation", "c-k8s", "--nth", "last", "--json", token=alice
    )
    assert [h["turn_id"] for h in json.loads(last.stdout)["hits"]] == ["t3"]
    listing = cli(search_env, "conversations", "--json", token=alice)
    assert json.loads(listing.stdout)["conversations"][0]["conversation_id"] == "c-k8s"
    first = cli(search_env, "conversations", "--limit", "2", token=alice).stdout.splitlines()
    assert "c-k8s" in first[0] and first[-1] == "(more: --offset 2)"
    rest = cli(search_env, "conversations", "--limit", "2", "--offset", "2", token=alice)
    assert "c-cook" in rest.stdout.splitlines()[0]
    turn = cli(search_env, "turn", "c-sheets", "t1", token=alice)
    assert (
        "attachment: budget.xlsx conv:fi:conv_c-sheets.turn_t1.user.attachments/budget.xlsx"
        in turn.output
    )


def test_errors_have_clear_messages_and_exit_codes(search_env: SearchEnv) -> None:
    alice = search_env.tokens["alice"]
    no_token = cli(search_env, "search", "openpyxl", "--knob", "weight_semantic=0")
    assert no_token.exit_code == 1 and "missing bearer token" in no_token.output
    bad_token = cli(
        search_env, "search", "openpyxl", "--knob", "weight_semantic=0", token="ctxdb_x_y"
    )
    assert bad_token.exit_code == 1
    missing = cli(search_env, "search", "  ", "--knob", "weight_semantic=0", token=alice)
    assert missing.exit_code == 2 and "missing_query" in missing.output
    invalid = cli(search_env, "search", "x", "--nth", "0", "-c", "c-k8s", token=alice)
    assert invalid.exit_code == 2 and "ordinal is 1-based" in invalid.output
    unknown = cli(search_env, "search", "x", "--knob", "rrf=3", token=alice)
    assert unknown.exit_code == 2 and "unknown knob(s) rrf; valid knobs: rrf_k," in unknown.output
    for bad in ("--knob", "rrf_k"), ("--window", "lately"):
        malformed = cli(search_env, "search", "x", *bad, token=alice)
        assert malformed.exit_code == 2 and bad[0] in malformed.output, bad
    others = cli(search_env, "turn", "c-bob", "t1", token=alice)
    assert others.exit_code == 1 and "not found" in others.output


def test_pull_writes_the_owners_bytes_only(search_env: SearchEnv, tmp_path) -> None:
    alice = search_env.tokens["alice"]
    out = tmp_path / "fixed.xlsx"
    ok = cli(
        search_env,
        "pull",
        "conv:fi:conv_c-sheets.turn_t2.files/fixed.xlsx",
        "-o",
        str(out),
        token=alice,
    )
    assert ok.exit_code == 0 and out.read_bytes() == b"bytes of files/fixed.xlsx for alice"
    refused = cli(
        search_env,
        "pull",
        "conv:fi:conv_c-bob.turn_t1.files/salaries.xlsx",
        "-o",
        str(tmp_path / "x"),
        token=alice,
    )
    assert refused.exit_code == 1 and not (tmp_path / "x").exists()
    traversal = cli(search_env, "pull", "conv:fi:conv_c-sheets.turn_t1.files/../../x", token=alice)
    assert traversal.exit_code == 1 and "unsafe path" in traversal.output


def test_tokens_issue_and_revoke(search_env: SearchEnv) -> None:
    tenantless = cli(search_env, "tokens", "issue", "--user", "carol")
    assert tenantless.exit_code == 2 and "--tenant is required" in tenantless.output
    issued = cli(search_env, "tokens", "issue", "--user", "carol", "--tenant", "t1")
    token = issued.output.strip()
    assert issued.exit_code == 0 and token.startswith("ctxdb_")
    listing = cli(search_env, "conversations", "--json", token=token)
    assert listing.exit_code == 0 and json.loads(listing.stdout)["conversations"] == []
    assert cli(search_env, "tokens", "revoke", token.split("_")[1]).exit_code == 0
    assert cli(search_env, "conversations", token=token).exit_code == 1


def test_fusion_knobs_reach_the_service(search_env: SearchEnv) -> None:
    """--knob NAME=VALUE sets any ranking knob for one search, checked by the knobs' model."""
    alice = search_env.tokens["alice"]
    query = ("search", "KeyError Worksheet Sheet3", "--explain", "--json")

    def contributions(*options: str) -> set[float]:
        result = cli(search_env, *query, *options, token=alice)
        assert result.exit_code == 0, result.output
        arms = json.loads(result.stdout)["hits"][0]["explain"]["arms"]
        return {round(arm["contribution"], 6) for arm in arms.values()}

    assert contributions("--knob", "rrf_k=1") == {0.5}  # every arm ranks it first: 1 / (1 + 1)
    knobs = ("--knob", "rrf_k=50", "--knob", "session_weight=0", "--knob", "diversity=0.5")
    assert contributions(*knobs) == {round(1 / 51, 6)}
    for name, value in (("session_weight", "3"), ("diversity", "1"), ("rrf_k", "0")):
        bad = cli(search_env, *query, "--knob", f"{name}={value}", token=alice)
        assert bad.exit_code == 2 and f"knobs.{name}" in bad.output, name


def test_focus_names_reaches_the_service(search_env: SearchEnv) -> None:
    """A name in none of Alice's conversations is left out of what the arms search for (said
    with --explain); `--knob focus_names=false` searches the query as given."""
    alice = search_env.tokens["alice"]
    query = ("search", "what did Zelda say about KeyError Worksheet Sheet3", "--explain", "--json")

    def warned(*options: str) -> list[str]:
        result = cli(search_env, *query, *options, token=alice)
        assert result.exit_code == 0, result.output
        return [w for w in json.loads(result.stdout)["warnings"] if w.startswith("names_left_out")]

    assert warned() == [
        "names_left_out: the arms searched for 'what did say about KeyError Worksheet Sheet3'"
    ]
    assert warned("--knob", "focus_names=false") == []
