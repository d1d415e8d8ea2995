"""Issue 12, erasure findings 1, 3, 4, 17 and 18: the full identity (tenant, app, user), landing
files rewritten byte for byte as landing reads them, gzip told by its magic bytes, resuming from
the recorded plan, and no older table version left holding the erased rows. Real landing,
derivation, embedding (the real model) and indexing on the real Elasticsearch node."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest_ops import SimulatedCrash, assert_same_tables, crash_after_commit, write_turn_files
from conftest_turn_record import Turn, write_jsonl
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.embedding.stage import embed_role_rows
from ctxdb.index.mappings import ROWS, TURNS, alias_name
from ctxdb.index.sync import sync_live
from ctxdb.landing.run import land
from ctxdb.lifecycle import erase as erasure
from ctxdb.lifecycle.scope import AmbiguousScope, Scope
from ctxdb.record.run import derive
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import (
    EMBEDDINGS,
    LIFECYCLE_JOURNAL,
    QUARANTINED_EVENTS,
    RAW_TURN_EVENTS,
    RETENTION_PENDING,
    RETENTION_REPORT,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    TURN_LOGS,
)
from pipelines.ops_jobs import erase_job

pytestmark = [pytest.mark.es, pytest.mark.model]

USER = "u0002"
ACME = Scope("user_id", USER, tenant="acme")
SHARED = "The same answer, typed in both tenants."


def _events() -> list[dict]:
    """u0002 in acme (apps chat and notes) and in globex, u0009 in acme; one answer text is the
    same for acme's and globex's u0002, one only acme's u0002 has."""
    turns = [
        Turn("c-acme-chat", "t1", tenant="acme", app="chat", user_id=USER).basic(
            "acme chat question about invoices", SHARED
        ),
        Turn("c-acme-notes", "t1", tenant="acme", app="notes", user_id=USER).basic(
            "acme notes question", "An answer only acme's u0002 got."
        ),
        Turn("c-globex", "t1", tenant="globex", app="chat", user_id=USER).basic(
            "globex question about payroll", SHARED
        ),
        Turn("c-other", "t1", tenant="acme", app="chat", user_id="u0009").basic(
            "another user's question", "another user's answer"
        ),
    ]
    return [event for turn in turns for event in turn.events]


def _build(store: DeltaStore, es, settings, landing: Path, embedder) -> None:
    land(store, str(landing))
    derive(store, settings)
    embed_role_rows(store, embedder)
    sync_live(store, es, settings, model_id=embedder.model_id)
    write_turn_files(settings.files, store.read(ROLE_ROWS))


@pytest.fixture
def tenants(store, es, ops_settings, embedder) -> Path:
    """The four conversations landed, derived, embedded, indexed and given files."""
    landing = Path(ops_settings.landing_uri)
    write_jsonl(landing / "a.jsonl", _events())
    _build(store, es, ops_settings, landing, embedder)
    return landing


def _owned(store: DeltaStore, table: str, tenant: str) -> int:
    frame = store.read(table)
    if "tenant" not in frame.columns:
        return 0
    return frame.filter((pl.col("user_id") == USER) & (pl.col("tenant") == tenant)).height


def _es_owned(es, settings, tenant: str) -> int:
    total = 0
    for kind in (ROWS, TURNS):
        alias = alias_name(settings.elasticsearch.index_prefix, kind)
        es.indices.refresh(index=alias)
        query = {"bool": {"filter": [{"term": {"user_id": USER}}, {"term": {"tenant": tenant}}]}}
        total += es.count(index=alias, query=query)["count"]
    return total


def _landing_lines(landing: Path, tenant: str) -> int:
    lines = (landing / "a.jsonl").read_text().splitlines()
    return sum(
        1 for line in lines if f'"user_id": "{USER}"' in line and f'"tenant": "{tenant}"' in line
    )


def _state(store, es, settings, landing, tenant: str) -> dict[str, int]:
    tables = (RAW_TURN_EVENTS, TURN_LOGS, ROLE_ROWS)
    state = {table: _owned(store, table, tenant) for table in tables}
    state["es"] = _es_owned(es, settings, tenant)
    state["folders"] = len(list(Path(settings.files).glob(f"{tenant}/*/{USER}")))
    state["landing"] = _landing_lines(landing, tenant)
    return state


def test_finding_1_erase_is_scoped_to_tenant(store, es, ops_settings, tenants):
    globex = _state(store, es, ops_settings, tenants, "globex")
    assert all(globex.values()), globex
    rows_before = store.read(ROLE_ROWS).height

    with pytest.raises(AmbiguousScope) as refused:
        erasure.erase(store, es, ops_settings, Scope("user_id", USER))
    assert refused.value.matches == [("acme", ["chat", "notes"]), ("globex", ["chat"])]
    assert "tenant 'acme' (apps 'chat', 'notes'); tenant 'globex' (apps 'chat')" in str(
        refused.value
    )
    assert store.read(ROLE_ROWS).height == rows_before and not store.exists(RETENTION_REPORT)

    report = erasure.erase(store, es, ops_settings, ACME)

    assert report.verified, report.message
    assert "user 'u0002' of tenant 'acme'" in report.message
    assert _state(store, es, ops_settings, tenants, "globex") == globex  # untouched
    assert not any(_state(store, es, ops_settings, tenants, "acme").values())
    assert store.read(ROLE_ROWS).filter(pl.col("user_id") == "u0009").height > 0
    cached = set(store.read(EMBEDDINGS)["text_hash"])
    globex_hashes = set(store.read(ROLE_ROWS).filter(pl.col("tenant") == "globex")["text_hash"])
    assert globex_hashes <= cached  # the shared answer's vector stays for globex's row


def test_finding_1_app_narrows_and_an_unknown_tenant_finds_nothing(
    store, es, ops_settings, tenants
):
    notes = Scope("user_id", USER, tenant="acme", app="notes")
    report = erasure.erase(store, es, ops_settings, notes)
    assert report.verified, report.message
    rows = store.read(ROLE_ROWS).filter(pl.col("user_id") == USER)
    assert set(zip(rows["tenant"], rows["app"], strict=True)) == {
        ("acme", "chat"),
        ("globex", "chat"),
    }
    nobody = erasure.erase(store, es, ops_settings, Scope("user_id", USER, tenant="initech"))
    assert nobody.status == "not_found"
    assert nobody.message == (
        "No data found for user 'u0002' of tenant 'initech'; nothing to erase."
    )


def test_finding_1_cli_and_dagster_take_the_tenant_and_dry_run_changes_nothing(
    store, es, ops_settings, tenants, resources, monkeypatch
):
    _register_all()
    monkeypatch.setenv("CTXDB_ELASTICSEARCH_INDEX_PREFIX", ops_settings.elasticsearch.index_prefix)
    runner = CliRunner()
    landing_bytes = (tenants / "a.jsonl").read_bytes()
    before = {
        tenant: _state(store, es, ops_settings, tenants, tenant) for tenant in ("acme", "globex")
    }

    refused = runner.invoke(app, ["erase", "--user", USER])
    assert refused.exit_code == 2
    assert "exists in 2 tenants: tenant 'acme'" in refused.output
    assert "name the tenant (--tenant" in refused.output

    dry = runner.invoke(app, ["erase", "--user", USER, "--tenant", "acme", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert lines[0] == "Dry run: erasing user 'u0002' of tenant 'acme' would remove"
    delta = next(line for line in lines if line.startswith("  delta:"))
    assert f"role_rows {before['acme'][ROLE_ROWS]}" in delta
    assert f"raw_turn_events {before['acme'][RAW_TURN_EVENTS]}" in delta
    rows = store.read(ROLE_ROWS)
    acme = rows.filter((pl.col("user_id") == USER) & (pl.col("tenant") == "acme"))
    only_acme = set(acme["text_hash"]) - set(rows.filter(pl.col("tenant") != "acme")["text_hash"])
    assert f"role_row_embeddings {acme.height}, embeddings {len(only_acme)}" in delta
    assert f"  elasticsearch: rows {before['acme'][ROLE_ROWS]}, turns 2" in lines
    assert "  file storage: 2 folder(s)" in lines
    assert f"  landing files: {before['acme']['landing']} line(s)" in lines
    assert (tenants / "a.jsonl").read_bytes() == landing_bytes
    for tenant in ("acme", "globex"):
        assert _state(store, es, ops_settings, tenants, tenant) == before[tenant]
    assert not store.exists(RETENTION_REPORT) and not store.exists(LIFECYCLE_JOURNAL)

    ambiguous = {"ops": {"erase_data": {"config": {"user_id": USER}}}}
    failed = erase_job.execute_in_process(
        run_config=ambiguous, resources=resources, raise_on_error=False
    )
    assert not failed.success
    assert _state(store, es, ops_settings, tenants, "acme") == before["acme"]
    scoped = {"ops": {"erase_data": {"config": {"user_id": USER, "tenant": "acme"}}}}
    assert erase_job.execute_in_process(run_config=scoped, resources=resources).success
    assert not any(_state(store, es, ops_settings, tenants, "acme").values())
    assert _state(store, es, ops_settings, tenants, "globex") == before["globex"]


def _event(conversation: str, user: str, text: str, tenant: str = "acme") -> dict:
    turn = Turn(conversation, "t1", tenant=tenant, app="chat", user_id=user)
    return turn.add("user.submission", {"text": text, "event_type": "prompt"})


def test_finding_3_landing_rewrite_keeps_every_other_byte(store, es, ops_settings):
    """Lines are what landing splits on `\\n`: a line of another user with an invalid UTF-8 byte
    stays byte for byte (and stays quarantined), CRLF endings and a BOM stay, and every byte of
    the erased user's lines goes, also after line separators inside a JSON string."""
    separators = "\u2028 \u2029 \u0085"
    erased_event = _event("c-erased", USER, f"start {separators} SECRET-AFTER-SEPARATORS")
    controls = b'{"user_id": "u0002", "tenant": "acme", "text": "a\x1cb\x0bc\x0c SECRET-TAIL"}'
    invalid_utf8 = json.dumps(_event("c-other", "u0009", "PLACEHOLDER")).encode()
    invalid_utf8 = invalid_utf8.replace(b"PLACEHOLDER", b"caf\xff")
    kept = [
        json.dumps(_event("c-other", "u0009", "first kept line")).encode() + b"\r",
        invalid_utf8,
        json.dumps(_event("c-globex", USER, "globex keeps this", tenant="globex")).encode(),
        b"",
    ]
    erased = [json.dumps(erased_event, ensure_ascii=False).encode(), controls]
    content = b"\n".join([erased[0], kept[0], erased[1], kept[1], kept[2], kept[3]])
    landing = Path(ops_settings.landing_uri)
    landing.mkdir(parents=True, exist_ok=True)
    path = landing / "mixed.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + content)
    land(store, str(landing))
    assert store.read(RAW_TURN_EVENTS).filter(pl.col("user_id") == "u0009").height == 1

    report = erasure.erase(store, es, ops_settings, ACME)

    assert report.verified, report.message
    assert report.landing_lines_removed == 2
    # the erased lines are emptied in place: every other line keeps its number
    emptied = [b"", kept[0], b"", kept[1], kept[2], kept[3]]
    assert path.read_bytes() == b"\xef\xbb\xbf" + b"\n".join(emptied)
    assert b"SECRET" not in path.read_bytes()
    land(store, str(landing))  # the rewritten file is read again
    landed = store.read(RAW_TURN_EVENTS)
    assert landed.filter(pl.col("user_id") == "u0009").height == 1  # the 0xFF line never lands
    assert landed.filter(pl.col("tenant") == "acme")["user_id"].to_list() == ["u0009"]
    quarantined = store.read(QUARANTINED_EVENTS)["raw_line"].to_list()
    assert not any("SECRET" in line for line in quarantined)
    # issue 41 finding 10: the other user's bad line is quarantined once, at its own number
    assert sum("u0009" in line for line in quarantined) == 1


def test_finding_4_gzip_is_told_by_its_magic_bytes_not_its_name(store, es, ops_settings):
    landing = Path(ops_settings.landing_uri)
    plain_named_gz = landing / "plain.jsonl.gz"
    gzip_named_plain = landing / "packed.jsonl"
    ours, theirs = _event("c-1", USER, "erase me"), _event("c-2", "u0009", "keep me")
    mine_too = _event("c-3", USER, "erase me too")
    write_jsonl(plain_named_gz, [ours, theirs])
    gzip_named_plain.write_bytes(gzip.compress((json.dumps(mine_too) + "\n").encode()))
    land(store, str(landing))
    assert store.read(RAW_TURN_EVENTS).height == 3

    report = erasure.erase(store, es, ops_settings, ACME)

    assert report.verified, report.message
    assert report.landing_lines_removed == 2
    assert plain_named_gz.read_bytes() == ("\n" + json.dumps(theirs) + "\n").encode()  # plain
    assert gzip.decompress(gzip_named_plain.read_bytes()) == b"\n"  # still gzip, now blank
    assert store.read(RAW_TURN_EVENTS)["user_id"].to_list() == ["u0009"]


def _copy_home(settings, to: Path):
    clean = settings.replace(home=to)
    for source, target in (
        (settings.delta_uri, clean.delta_uri),
        (settings.files, clean.files),
        (settings.landing_uri, clean.landing_uri),
    ):
        shutil.copytree(source, target)
    return DeltaStore(clean.delta_uri), clean


def test_finding_17_a_killed_erasure_resumes_from_its_recorded_plan(
    store, es, ops_settings, tenants, tmp_path, monkeypatch
):
    """Killed right after the role_rows DELETE, the rerun used to look the user's row ids up in
    the table the first attempt had emptied and left their embedding statuses and the vectors of
    texts only they had. The crash is simulated at that commit point; the rerun must leave the
    tables exactly as a clean erasure does and count what the first attempt removed."""
    clean_store, clean_settings = _copy_home(ops_settings, tmp_path / "clean")
    acme_rows = store.read(ROLE_ROWS).filter(
        (pl.col("user_id") == USER) & (pl.col("tenant") == "acme")
    )
    only_acme = set(acme_rows["text_hash"]) - set(
        store.read(ROLE_ROWS).filter(pl.col("tenant") != "acme")["text_hash"]
    )
    assert only_acme and len(only_acme) < acme_rows["text_hash"].n_unique()  # one is shared

    crash_after_commit(monkeypatch, "delta:role_rows")
    with pytest.raises(SimulatedCrash):
        erasure.erase(store, es, ops_settings, ACME)
    assert _owned(store, ROLE_ROWS, "acme") == 0
    statuses = set(store.read(ROW_EMBEDDINGS)["row_id"])
    assert set(acme_rows["row_id"]) <= statuses  # what the old rerun left behind

    report = erasure.erase(store, es, ops_settings, Scope("user_id", USER))  # tenant from the plan

    assert report.verified and report.resumed, report.message
    assert report.deleted_rows[ROLE_ROWS] == acme_rows.height  # deleted by the first attempt
    assert report.deleted_rows[ROW_EMBEDDINGS] == acme_rows.height
    assert report.deleted_rows[EMBEDDINGS] == len(only_acme)
    assert not set(acme_rows["row_id"]) & set(store.read(ROW_EMBEDDINGS)["row_id"])
    assert not only_acme & set(store.read(EMBEDDINGS)["text_hash"])
    assert store.read(LIFECYCLE_JOURNAL).is_empty()

    clean = erasure.erase(clean_store, None, clean_settings, ACME)
    assert clean.status == "es_pending"  # the clean copy runs without Elasticsearch
    assert {t: n for t, n in report.deleted_rows.items() if n} == {
        t: n for t, n in clean.deleted_rows.items() if n
    }
    assert_same_tables(
        store,
        clean_store,
        skip={RETENTION_PENDING, RETENTION_REPORT},
        volatile={"purged_at"},
    )
    assert _es_owned(es, ops_settings, "acme") == 0


def _files_holding(store: DeltaStore, table: str, tenant: str) -> list[str]:
    """Every Parquet file under the table's directory (current, older and change-data files)
    holding a row of u0002 of `tenant`."""
    holding = []
    for path in Path(store.uri(table)).rglob("*.parquet"):
        frame = pl.from_arrow(pq.read_table(path, columns=["tenant", "user_id"]))
        if frame.filter((pl.col("user_id") == USER) & (pl.col("tenant") == tenant)).height:
            holding.append(str(path))
    return holding


def test_finding_18_no_table_version_holds_erased_rows_even_after_a_kill_before_vacuum(
    store, es, ops_settings, tenants, monkeypatch
):
    """Killed before its VACUUM, the rerun used to answer "nothing to erase" while every erased
    row stayed readable through time travel. The kill is simulated by raising from the VACUUM
    call; the configured window is a day, which must not keep erased rows readable."""
    settings = ops_settings.replace(retention={"erase_vacuum_hours": 24})
    version = store.version(ROLE_ROWS)

    def killed(*args, **kwargs):
        raise SimulatedCrash("simulated crash right before VACUUM")

    with monkeypatch.context() as patch:
        patch.setattr(erasure, "vacuum", killed)
        with pytest.raises(SimulatedCrash):
            erasure.erase(store, es, settings, ACME)
    old = store.read(ROLE_ROWS, version=version)
    assert old.filter((pl.col("user_id") == USER) & (pl.col("tenant") == "acme")).height

    report = erasure.erase(store, es, settings, ACME)

    assert report.resumed and report.verified, report.message
    assert report.remaining[erasure.HISTORY] == 0
    assert "no table version holds them" in report.message
    assert sum(report.vacuumed_files.values()) > 0
    saved = store.read(RETENTION_REPORT).row(0, named=True)
    assert saved["operation"] == "erase" and saved["status"] == "ok"
    for table in (RAW_TURN_EVENTS, TURN_LOGS, ROLE_ROWS):
        assert _files_holding(store, table, "acme") == [], table
        assert _files_holding(store, table, "globex"), table  # the other tenant is kept
    with pytest.raises(Exception, match="(?i)not found|no such file"):
        store.read(ROLE_ROWS, version=version)
    assert _owned(store, ROLE_ROWS, "globex") > 0


def test_issue_41_finding_8_erasing_a_conversation_leaves_another_users_lines_naming_its_id(
    store, es, ops_settings
):
    """Conversation ids come from clients: u0009's lines naming u0002's conversation id land in
    quarantine (the conversation is u0002's). Erasing that conversation erases u0002's data and
    leaves u0009's quarantined lines and landing bytes as they were."""
    landing = Path(ops_settings.landing_uri)
    landing.mkdir(parents=True, exist_ok=True)
    owners = landing / "a-owner.jsonl"
    write_jsonl(owners, [_event("c-shared", USER, "the owner's words")])
    land(store, str(landing))
    squatter = landing / "b-other.jsonl"
    theirs = Turn("c-shared", "t9", tenant="acme", app="chat", user_id="u0009")
    write_jsonl(squatter, [theirs.add("user.submission", {"text": "another user's words"})])
    land(store, str(landing))
    quarantined = store.read(QUARANTINED_EVENTS)
    assert quarantined.height == 1 and "u0009" in quarantined["raw_line"][0]
    kept = squatter.read_bytes()

    report = erasure.erase(store, es, ops_settings, Scope("conversation_id", "c-shared"))

    assert report.verified, report.message
    assert "user_id 'u0002'" in report.message
    assert store.read(RAW_TURN_EVENTS).filter(pl.col("conversation_id") == "c-shared").is_empty()
    assert b"the owner's words" not in owners.read_bytes()
    assert squatter.read_bytes() == kept
    assert store.read(QUARANTINED_EVENTS)["raw_line"].to_list() == quarantined["raw_line"].to_list()
