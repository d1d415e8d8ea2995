"""`ctxdb sql`: DuckDB over every Delta table, time travel, output formats, one-line errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest_turn_record import NOW, build_sample, land_and_derive
from typer.testing import CliRunner

from ctxdb.cli import _register_all
from ctxdb.cli.app import app
from ctxdb.landing.run import land
from ctxdb.lifecycle.erase import erase
from ctxdb.lifecycle.scope import Scope
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
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
CTXDB = str(Path(sys.executable).with_name("ctxdb"))


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
        count = run_query(con, f"select count(*) from {name}").item()
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


@pytest.mark.parametrize(
    ("table", "column"),
    [
        (RAW_TURN_EVENTS, "tenant"),
        (RAW_TURN_EVENTS, "event_id"),
        ("quarantined_events", "event_id"),
    ],
)
def test_in_lists_and_or_equalities_over_strings(
    sample: tuple[Path, DeltaStore], table: str, column: str
) -> None:
    """IN lists and ORs of equalities over string columns return the rows polars finds (they
    failed with "no kernel matching input types (string, string_view)" before)."""
    root, store = sample
    rows = store.read(table)
    values = sorted(rows[column].drop_nulls().unique().to_list())[:2] + ["no-such-value"]
    expected = rows.filter(pl.col(column).is_in(values)).height
    assert expected > 0
    listed = ", ".join(f"'{v}'" for v in values)
    ored = " or ".join(f"{column} = '{v}'" for v in values)
    for where in (f"{column} in ({listed})", ored, f"{column} not in ({listed}) or {ored}"):
        total = rows[column].count() if "not in" in where else expected
        result = sql(root, f"select count(*) as n from {table} where {where}", "-f", "csv")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == ["n", str(total)], where


def test_as_of_notes_name_only_tables_the_query_reads(sample: tuple[Path, DeltaStore]) -> None:
    """Past a table's latest version, --as-of notes that table in one analyst's line, and only
    when the query reads it; no delta-rs kernel message reaches the output."""
    root, store = sample
    versions = {name: store.version(name) for name in table_names(store)}
    short = min(versions, key=versions.__getitem__)
    point = str(versions[short] + 1)
    readable = next(n for n, v in versions.items() if v > versions[short])
    quiet = sql(root, f"select count(*) as n from {readable}", "--as-of", point, "-f", "csv")
    assert quiet.exit_code == 0, quiet.output
    assert "note:" not in quiet.stderr and quiet.stdout.splitlines()[0] == "n"
    loud = sql(root, f"select count(*) from {short}", "--as-of", point)
    assert loud.exit_code == 2
    notes = [line for line in loud.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: {short} cannot be read as of version {point}: "
        f"its latest version is {versions[short]}"
    ]
    assert "kernel" not in loud.stderr.lower() and "LogSegment" not in loud.stderr
    early = "2000-01-01T00:00:00+00:00"
    before = sql(root, f"select count(*) from {short}", "--as-of", early)
    assert before.exit_code == 2
    assert f"note: {short} cannot be read as of {early}: it did not exist yet" in before.stderr


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
    nested = sql(root, "select [1, 2] as l", "-f", "csv")
    assert nested.exit_code == 2 and nested.output.startswith("error: cannot write the result")
    nowhere = sql(root, "select 1", "-o", str(root / "no" / "such" / "dir.txt"))
    assert nowhere.exit_code == 2 and nowhere.output.startswith("error: --output")
    interval = sql(root, "select interval 90 second as d", "-f", "csv")
    assert interval.stdout.splitlines() == ["d", "00:01:30"]


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
    assert len(queries) == 11
    assert any("group by adapter, model" in q for q in queries)  # tokens per model
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
        assert run_query(con, query) is not None
    (coverage,) = [q for q in queries if "role_row_embeddings" in q]
    rows = run_query(con, coverage)
    assert rows["rows"].sum() == sampled.read(ROLE_ROWS).height


def duckdb_home_untouched(home: Path) -> bool:
    """No DuckDB extension directory was created under `home` (nothing installed or fetched)."""
    return not (home / ".duckdb").exists()


def test_as_of_before_erasure_skips_with_note_exit_2(tmp_path: Path) -> None:
    """A version from before an erasure names files the erasure's VACUUM deleted: the table is
    skipped with a note, and a query over it is a one-line error (exit 2), not an IOError."""
    events = generate_events(users=2, conversations=4, seed=5, now=NOW, malformed_ratio=0)
    write_sample(events, tmp_path / "landing", files_root=tmp_path / "files")
    store = DeltaStore(str(tmp_path / "delta"))
    settings = Settings(home=tmp_path)
    land_and_derive(store, tmp_path / "landing", settings)
    before = store.version(ROLE_ROWS)
    row = store.read(ROLE_ROWS).row(0, named=True)
    erase(store, None, settings, Scope("user_id", row["user_id"], tenant=row["tenant"]))
    assert store.version(ROLE_ROWS) > before

    old = sql(tmp_path, "select count(*) from role_rows", "--as-of", str(before))
    assert old.exit_code == 2, old.output
    assert f"note: role_rows cannot be read as of version {before}: " in old.output
    assert "removed since by VACUUM (retention or erasure)" in old.output
    assert "error: " in old.output and "Traceback" not in old.output
    assert "IO Error" not in old.output
    current = sql(tmp_path, "select count(*) as n from role_rows", "-f", "csv")
    assert current.exit_code == 0, current.output
    assert current.stdout.splitlines() == ["n", str(store.read(ROLE_ROWS).height)]


def test_install_extension_refused_offline(sample: tuple[Path, DeltaStore], tmp_path) -> None:
    """`install`/`load` are refused before DuckDB touches its extension directory or the net."""
    root, _ = sample
    for statement in (
        "install httpfs",
        "install httpfs from 'http://127.0.0.1:9/x'",
        "load httpfs",
    ):
        env = {"CTXDB_HOME": str(root), "HOME": str(tmp_path)}
        result = runner.invoke(app, ["sql", statement], env=env)
        assert result.exit_code == 2, (statement, result.output)
        assert result.output.startswith("error: Permission Error"), result.output
        assert duckdb_home_untouched(tmp_path), statement


def test_read_remote_url_refused(sample: tuple[Path, DeltaStore], tmp_path) -> None:
    """A URL is refused at once, also with --allow-local-files: no httpfs autoload, no request."""
    root, _ = sample
    url = "select * from read_csv('https://example.com/rows.csv')"
    for extra in ([], ["--allow-local-files", str(tmp_path)]):
        result = runner.invoke(
            app, ["sql", url, *extra], env={"CTXDB_HOME": str(root), "HOME": str(tmp_path)}
        )
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: Permission Error"), result.output
        assert duckdb_home_untouched(tmp_path)


def test_copy_into_delta_root_refused(sample: tuple[Path, DeltaStore], tmp_path) -> None:
    """COPY TO, ATTACH and reads of local files are refused by default; --allow-local-files DIR
    opens DIR only, and a DIR inside or holding the Delta root is refused."""
    root, store = sample
    table_dir = Path(store.uri(ROLE_ROWS))
    files = sorted(table_dir.rglob("*"))
    target = table_dir / "x.parquet"
    copy = f"copy (select * from role_rows limit 1) to '{target}'"
    refused = sql(root, copy)
    assert refused.exit_code == 2 and refused.output.startswith("error: Permission Error")
    outside = tmp_path / "mine"
    outside.mkdir()
    opened = sql(root, copy, "--allow-local-files", str(outside))
    assert opened.exit_code == 2 and opened.output.startswith("error: Permission Error")
    for holder in (root, table_dir):
        wide = sql(root, "select 1", "--allow-local-files", str(holder))
        assert wide.exit_code == 2, wide.output
        assert wide.output.startswith("error: --allow-local-files") and "Delta root" in wide.output
    into = sql(root, "select 1", "-f", "parquet", "-o", str(target))
    assert into.exit_code == 2 and into.output.startswith("error: --output")
    assert sorted(table_dir.rglob("*")) == files
    assert not target.exists()

    (outside / "roles.csv").write_text("role,label\nuser,U\nassistant,A\n")
    join = (
        f"copy (select label, count(*) n from role_rows join read_csv('{outside}/roles.csv') "
        f"using (role) group by label order by label) to '{outside}/out.csv'"
    )
    assert sql(root, join).exit_code == 2
    ok = sql(root, join, "--allow-local-files", str(outside))
    assert ok.exit_code == 0, ok.output
    written = pl.read_csv(outside / "out.csv")
    counts = store.read(ROLE_ROWS)["role"].value_counts()
    expected = {"A": "assistant", "U": "user"}
    for label, n in written.iter_rows():
        assert n == counts.filter(pl.col("role") == expected[label])["count"].item()


def test_shell_survives_failing_statement(sample: tuple[Path, DeltaStore]) -> None:
    """A statement failing while it runs (a bad cast), while it binds, or refused: one error line
    each, and the shell goes on to the next statement."""
    root, store = sample
    script = (
        "select cast(role as integer) from role_rows;\n"
        "select nope from role_rows;\n"
        "install httpfs;\n"
        "set enable_external_access = true;\n"
        "select count(*) as total from role_rows;\n"
        ".quit\n"
    )
    result = runner.invoke(app, ["sql"], input=script, env={"CTXDB_HOME": str(root)})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if "error: " in line]
    assert len(errors) == 4, result.output
    assert str(store.read(ROLE_ROWS).height) in result.output


def test_long_query_times_out(sample: tuple[Path, DeltaStore]) -> None:
    """--timeout interrupts a query that runs longer (one line, exit 2); --timeout 0 is no limit;
    the shell survives a timed-out statement; the default is in --help."""
    root, store = sample
    endless = "select count(*) from role_rows, range(10000000000000)"
    started = time.monotonic()
    result = sql(root, endless, "--timeout", "1")
    elapsed = time.monotonic() - started
    assert result.exit_code == 2, result.output
    assert result.output == "error: the query ran longer than --timeout 1 s and was stopped\n"
    assert elapsed < 30
    quick = sql(root, "select count(*) as n from role_rows", "--timeout", "0", "-f", "csv")
    assert quick.stdout.splitlines() == ["n", str(store.read(ROLE_ROWS).height)]
    shell = runner.invoke(
        app,
        ["sql", "--timeout", "1"],
        input=f"{endless};\nselect 41 + 1 as answer;\n.quit\n",
        env={"CTXDB_HOME": str(root)},
    )
    assert shell.exit_code == 0 and "--timeout 1 s" in shell.output and "42" in shell.output
    assert "default: 300" in runner.invoke(app, ["sql", "--help"]).output


def test_long_query_output_is_only_its_rows(sample: tuple[Path, DeltaStore]) -> None:
    """A query running past DuckDB's 2 s progress-bar delay, in a real process: stdout holds no
    progress bar (DuckDB draws it on stdout), stderr only the timeout line."""
    root, _ = sample
    done = subprocess.run(
        [CTXDB, "sql", "select count(*) from range(10000000000000)", "-f", "csv", "--timeout", "4"],
        env={**os.environ, "CTXDB_HOME": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "error: the query ran longer than --timeout 4 s and was stopped\n"


def test_upper_case_file_scheme_is_the_delta_root(
    sample: tuple[Path, DeltaStore], tmp_path: Path
) -> None:
    """Issue 41 finding 9: with the Delta root spelled `FILE://…`, neither `--allow-local-files
    <delta root>` nor `-o` into a table folder is let through (schemes are case-insensitive)."""
    root, store = sample
    spelled = f"FILE://{Path(store.root).parent.resolve()}"
    env = {"CTXDB_HOME": str(root), "CTXDB_STORAGE_ROOT": spelled}
    assert runner.invoke(app, ["sql", "select count(*) from role_rows"], env=env).exit_code == 0
    wide = runner.invoke(app, ["sql", "select 1", "--allow-local-files", str(root)], env=env)
    assert wide.exit_code == 2 and "Delta root" in wide.output, wide.output
    target = Path(store.uri(ROLE_ROWS)) / "x.csv"
    into = runner.invoke(app, ["sql", "select 1", "-o", str(target)], env=env)
    assert into.exit_code == 2 and into.output.startswith("error: --output"), into.output
    assert not target.exists()
