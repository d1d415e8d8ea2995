"""`ctxdb sql`: DuckDB over every Delta table, time travel, output formats, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from conftest_turn_record import NOW, build_sample
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.landing.run import land
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.sql import SqlError, connect, known_table_names, run_query, table_names
from ctxdb.storage.tables import (
    RAW_TURN_EVENTS,
    RETENTION_REPORT,
    RETENTION_REPORT_SCHEMA,
    ROLE_ROWS,
    ROW_EMBEDDINGS,
    ROW_EMBEDDINGS_SCHEMA,
)

_register_all()
runner = CliRunner()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DeltaStore]:
    root = tmp_path_factory.mktemp("sql")
    _, store, _ = build_sample(root)
    return root, store


def sql(root: Path, *args: str):
    return runner.invoke(app, ["sql", *args], env={"CTXDB_HOME": str(root)})


def test_count_role_rows_matches_delta(sample: tuple[Path, DeltaStore]) -> None:
    root, store = sample
    result = sql(root, "select count(*) as n from role_rows", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip()) == {"n": store.read(ROLE_ROWS).height}


def test_every_table_is_a_view_with_its_rows(sample: tuple[Path, DeltaStore]) -> None:
    _, store = sample
    names = table_names(store)
    assert {RAW_TURN_EVENTS, ROLE_ROWS, "turn_logs", "quarantined_events"} <= set(names)
    assert set(names) <= set(known_table_names())
    con, snapshot = connect(store)
    assert set(snapshot.versions) == set(names) and snapshot.skipped == {}
    for name in names:
        ((count,),) = run_query(con, f"select count(*) from {name}").fetchall()
        assert count == store.read(name).height, name


def test_as_of_reads_an_earlier_version(tmp_path: Path) -> None:
    first = generate_events(users=1, conversations=2, seed=1, now=NOW, malformed_ratio=0)
    write_sample(first, tmp_path / "a", files_root=tmp_path / "files")
    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(tmp_path / "a"), now=NOW)
    version, before = store.version(RAW_TURN_EVENTS), store.read(RAW_TURN_EVENTS).height
    more = generate_events(users=1, conversations=2, seed=2, now=NOW, malformed_ratio=0)
    write_sample(more, tmp_path / "b", files_root=tmp_path / "files")
    land(store, str(tmp_path / "b"), now=NOW)
    after = store.read(RAW_TURN_EVENTS).height
    assert after > before

    query = "select count(*) as n from raw_turn_events"
    old = sql(tmp_path, query, "--as-of", str(version), "-f", "csv")
    new = sql(tmp_path, query, "-f", "csv")
    assert old.exit_code == 0, old.output
    assert old.stdout.splitlines() == ["n", str(before)]
    assert new.stdout.splitlines() == ["n", str(after)]


def test_as_of_before_a_table_existed_skips_it(sample: tuple[Path, DeltaStore]) -> None:
    _, store = sample
    con, snapshot = connect(store, [RAW_TURN_EVENTS, ROLE_ROWS], as_of=0)
    assert RAW_TURN_EVENTS in snapshot.versions or RAW_TURN_EVENTS in snapshot.skipped
    assert snapshot.versions.get(ROLE_ROWS) == 0


def test_parquet_output_and_table_selection(sample: tuple[Path, DeltaStore], tmp_path) -> None:
    root, store = sample
    out = tmp_path / "rows.parquet"
    result = sql(
        root,
        "select role, count(*) n from role_rows group by 1",
        "-t",
        ROLE_ROWS,
        "-f",
        "parquet",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    written = pl.read_parquet(out).sort("role")
    expected = store.read(ROLE_ROWS).group_by("role").len("n").sort("role")
    assert written.select("role", pl.col("n").cast(pl.UInt32)).equals(expected)
    only = sql(root, "select count(*) from turn_logs", "-t", ROLE_ROWS)
    assert only.exit_code == 2 and "turn_logs" in only.output


def test_errors_are_one_line(sample: tuple[Path, DeltaStore]) -> None:
    root, store = sample
    bad = sql(root, "select nope from role_rows")
    assert bad.exit_code == 2
    assert bad.output.startswith("error: ") and "Traceback" not in bad.output
    unknown = sql(root, "select 1", "-t", "no_such_table")
    assert unknown.exit_code == 2 and "no such table: no_such_table" in unknown.output
    naive = sql(root, "select 1", "--as-of", "2026-01-01T00:00:00")
    assert naive.exit_code != 0 and "zone" in naive.output
    con, _ = connect(store, [ROLE_ROWS])
    with pytest.raises(SqlError):
        run_query(con, "select * from turn_logs")


def test_shell_reads_statements_until_semicolon(sample: tuple[Path, DeltaStore]) -> None:
    root, store = sample
    result = runner.invoke(
        app,
        ["sql"],
        input="select count(*) as total\nfrom role_rows;\n.quit\n",
        env={"CTXDB_HOME": str(root)},
    )
    assert result.exit_code == 0, result.output
    assert str(store.read(ROLE_ROWS).height) in result.output


def test_every_query_in_the_analytics_doc_runs(sample: tuple[Path, DeltaStore], tmp_path) -> None:
    """docs/analytics.md stays true: each of its queries runs on the sample (empty tables stand in
    for the embedding and retention tables the sample does not write)."""
    _, sampled = sample
    doc = (Path(__file__).resolve().parents[1] / "docs" / "analytics.md").read_text()
    queries = re.findall(r"```sql\n(.*?)```", doc, flags=re.S)
    assert len(queries) == 10
    store = DeltaStore(str(tmp_path / "delta"))
    for name in table_names(sampled):
        store.overwrite(name, sampled.read(name))
    for name, schema in (
        (ROW_EMBEDDINGS, ROW_EMBEDDINGS_SCHEMA),
        (RETENTION_REPORT, RETENTION_REPORT_SCHEMA),
    ):
        store.overwrite(name, pl.from_arrow(schema.empty_table()), schema)
    con, _ = connect(store)
    for query in queries:
        assert run_query(con, query).fetchall() is not None
    (coverage,) = [q for q in queries if "role_row_embeddings" in q]
    rows = run_query(con, coverage).pl()
    assert rows["rows"].sum() == sampled.read(ROLE_ROWS).height
