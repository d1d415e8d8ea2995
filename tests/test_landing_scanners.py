"""Both line scanners (native Rust and pure-Python msgspec mirror) land the same rows, never accept
a line the pydantic contract rejects, and hold every limit of the contract: each limit is read
off the contract's JSON schema and tried on both of its sides. The Rust source names no type,
field, literal or limit of the contract: they reach it from the generated `contract.json`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest_components import NATIVE, NATIVE_SOURCES, skip_missing
from conftest_turn_record import NOW
from pydantic import BaseModel, field_validator
from test_events import PAYLOADS, line
from test_native_scan import EDGE_CASES, _mutations

from ctxdb.contract import events
from ctxdb.contract.events import MAX_EVENT_BYTES, EventError, parse_event
from ctxdb.landing import mirror, scan
from ctxdb.landing.run import land
from ctxdb.landing.scan import parse_bytes, scanner_in_use
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import LANDED_FILES, QUARANTINED_EVENTS, RAW_TURN_EVENTS

RUST_SOURCES = Path(__file__).parents[1] / "native" / "src"
NATIVE_BUILT = scan._native is not None


@pytest.fixture(params=["native", "python"])
def scanner(request: pytest.FixtureRequest) -> str:
    if request.param == "native" and not NATIVE_BUILT:
        skip_missing(NATIVE)
    return request.param


def accepted_alone(raw: str | bytes, scanner: str) -> bool:
    """Whether `scanner` itself accepts the one line `raw` (without the contract's help)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if scanner == "native":
        return scan._native.scan_events(data, MAX_EVENT_BYTES)["rows"] == 1
    return mirror.scan(data, MAX_EVENT_BYTES)[0].height == 1


def contract_accepts(raw: str | bytes) -> bool:
    try:
        parse_event(raw)
    except EventError:
        return False
    return True


def agree(raw: str, scanner: str) -> bool:
    """Whether `scanner` accepted `raw` alone; if so, the contract accepts it with the values the
    scanner landed."""
    if not accepted_alone(raw, scanner):
        return False
    model = parse_event(raw)  # must not raise: a scanner only accepts valid lines
    data = raw.encode("utf-8", "surrogatepass")
    row = parse_bytes(data, "mem", NOW, scanner=scanner).events.row(0, named=True)
    for name in events.ENVELOPE_COLUMNS:
        assert row[name] == getattr(model, name), name
    assert json.loads(row["payload"]) == json.loads(raw)["payload"]
    return True


@pytest.mark.parametrize("raw", EDGE_CASES)
def test_edge_cases_are_never_accepted_by_a_scanner_alone(raw: str, scanner: str) -> None:
    agree(raw, scanner)


def test_mutated_lines_are_never_accepted_by_a_scanner_alone(scanner: str) -> None:
    accepted = sum(agree(raw, scanner) for raw in _mutations(seed=12, count=1_500))
    assert 0 < accepted < 1_500  # both paths were exercised


def test_both_scanners_take_the_common_forms(scanner: str) -> None:
    for type_, payload in PAYLOADS.items():
        assert agree(line(type=type_, payload=payload), scanner), type_
    assert agree(line(occurred_at="2028-02-29T23:59:59.999999-11:59"), scanner)
    assert agree(" \t" + line(), scanner)


def test_the_same_files_land_identically_through_both_scanners(tmp_path: Path) -> None:
    if not NATIVE_BUILT:
        skip_missing(NATIVE)
    generated = generate_events(
        users=3, conversations=20, seed=6, now=NOW, malformed_ratio=0.03, duplicate_ratio=0.02
    )
    write_sample(generated, tmp_path / "landing", per_file=150)
    extra = tmp_path / "landing" / "edge.jsonl"
    extra.write_text("\r\n".join([*EDGE_CASES, ""]), encoding="utf-8", errors="surrogatepass")
    stores = {name: DeltaStore(str(tmp_path / name)) for name in ("native", "python")}
    stats = {
        name: land(store, str(tmp_path / "landing"), now=NOW, scanner=name)
        for name, store in stores.items()
    }
    assert stats["native"] == stats["python"]
    assert stats["native"].quarantined > 0 and stats["native"].duplicates > 0
    for table, keys in (
        (RAW_TURN_EVENTS, ["source_file", "line_number"]),
        (QUARANTINED_EVENTS, ["source_file", "line_number"]),
        (LANDED_FILES, ["source_file"]),
    ):
        native, python = (stores[n].read(table).sort(keys) for n in ("native", "python"))
        if table == QUARANTINED_EVENTS:
            # Refused events (a re-used id, another owner) are quarantined re-serialized, with
            # the payload each scanner landed: compare them as values too.
            native, python = (f.with_columns(_refused_json("raw_line")) for f in (native, python))
        assert native.equals(python), table
    reasons = stores["python"].read(QUARANTINED_EVENTS)["reason"].unique().sort().to_list()
    assert {"malformed_json", "unsafe_id", "naive_timestamp", "oversize"} <= set(reasons)


def _refused_json(column: str) -> pl.Expr:
    def normal(text: str) -> str:
        try:
            event = json.loads(text)
        except ValueError:
            return text
        if isinstance(event, dict) and isinstance(event.get("payload"), str):
            event["payload"] = json.loads(event["payload"])
        return json.dumps(event, sort_keys=True)

    return pl.col(column).map_elements(normal, return_dtype=pl.String)


def test_every_contract_type_and_the_envelope_are_mirrored() -> None:
    assert set(mirror.PAYLOAD_DECODERS) == set(events.PAYLOADS)
    assert mirror.ENVELOPE is not None
    assert set(mirror.ENVELOPE.columns) == set(events.ENVELOPE_COLUMNS)


def test_a_model_the_derivation_does_not_know_is_left_to_the_contract() -> None:
    class Checked(BaseModel):
        name: str

        @field_validator("name")
        @classmethod
        def upper(cls, value: str) -> str:
            return value.upper()

    with pytest.raises(mirror.Unmirrored):
        mirror.mirror_struct(Checked)


def test_the_scanner_setting_picks_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXDB_LANDING_SCANNER", "python")
    assert Settings().landing.scanner == "python"
    monkeypatch.setenv("CTXDB_LANDING_SCANNER", "rust")
    with pytest.raises(ValueError):
        Settings()
    assert scanner_in_use("python") == "python"
    with pytest.raises(ValueError):
        scanner_in_use("rust")
    # The extension failing to import (an install without cargo) is simulated by its absence.
    monkeypatch.setattr(scan, "_native", None)
    assert scanner_in_use("auto") == "python"
    with pytest.raises(RuntimeError, match="not built"):
        scanner_in_use("native")
    parsed = parse_bytes(f"{line()}\nnot json\n".encode(), "mem", NOW)
    assert parsed.events["event_id"].to_list() == ["e1"]
    assert parsed.quarantine["reason"].to_list() == ["malformed_json"]


# Every limit of the contract, on both of its sides.


def _branch(schema: dict) -> dict:
    """A property's schema with its non-null `anyOf` branch folded in."""
    for option in schema.get("anyOf", []):
        if option.get("type") != "null":
            return {**{k: v for k, v in schema.items() if k != "anyOf"}, **option}
    return schema


def _pattern_length(pattern: str) -> int | None:
    """The longest string an id pattern `^[first][rest]{0,N}$` allows (N + 1)."""
    found = re.search(r"\{0,(\d+)\}\$$", pattern)
    return int(found.group(1)) + 1 if found else None


def _text(length: int, pattern: str | None) -> str:
    """`length` characters; two-byte ones where the line stays small (limits count characters,
    not bytes), letters where a pattern is set."""
    return ("a" if pattern or 2 * length > MAX_EVENT_BYTES // 2 else "é") * length


def _cases(schema: dict) -> list[tuple[str, Any, bool]]:
    """(name, value, inside the limit) for the limits of one property."""
    cases: list[tuple[str, Any, bool]] = []
    pattern = schema.get("pattern")
    top = schema.get("maxLength") or (pattern and _pattern_length(pattern))
    if schema.get("type") == "string" and top:
        cases += [(f"len {top}", _text(top, pattern), True)]
        cases += [(f"len {top + 1}", _text(top + 1, pattern), False)]
    if schema.get("type") == "string" and schema.get("minLength"):
        low = schema["minLength"]
        cases += [(f"len {low}", _text(low, pattern), True)]
        cases += [(f"len {low - 1}", _text(low - 1, pattern), False)]
    if "minimum" in schema:
        cases += [
            ("minimum", schema["minimum"], True),
            ("minimum - 1", schema["minimum"] - 1, False),
        ]
    if "enum" in schema:
        cases += [(f"enum {v}", v, True) for v in schema["enum"]]
        cases += [("not in enum", "zz-none-of-these", False)]
    if schema.get("type") == "array":
        items = schema.get("items", {})
        if "maxItems" in schema:
            most = schema["maxItems"]
            cases += [(f"{most} items", ["a"] * most, True)]
            cases += [(f"{most + 1} items", ["a"] * (most + 1), False)]
        for name, value, inside in _cases(items):
            cases.append((f"item {name}", [value], inside))
    return cases


def _limit_lines() -> list[tuple[str, str, bool]]:
    """(id, line, inside every limit) for every limit of every payload model and the envelope."""
    out = []
    for type_, model in events.PAYLOADS.items():
        for field, schema in model.model_json_schema()["properties"].items():
            for name, value, inside in _cases(_branch(schema)):
                raw = line(type=type_, payload={**PAYLOADS[type_], field: value})
                out.append((f"{type_}.{field} {name}", raw, inside))
    for field, schema in events.Envelope.model_json_schema()["properties"].items():
        for name, value, inside in _cases(_branch(schema)):
            out.append((f"envelope.{field} {name}", line(**{field: value}), inside))
    event = line(type="assistant.completion", payload={"text": "x"})
    for size, inside in ((MAX_EVENT_BYTES, True), (MAX_EVENT_BYTES + 1, False)):
        pad = size - len(event)  # two-byte characters keep the text under its own limit
        text = "é" * (pad // 2) + "x" * (1 + pad % 2)
        padded = event.replace('"text": "x"', f'"text": "{text}"')
        assert len(padded.encode()) == size
        out.append((f"line of {size} bytes", padded, inside))
    return out


LIMIT_LINES = _limit_lines()


def test_the_limit_cases_cover_every_constrained_field() -> None:
    covered = {case.split(" ")[0] for case, _, _ in LIMIT_LINES}
    assert {"user.submission.text", "react.summary.refs", "react.anchors.entities"} <= covered
    assert {"file.hosted.size", "envelope.event_id", "envelope.adapter"} <= covered
    assert len(LIMIT_LINES) > 150


@pytest.mark.parametrize(("case", "raw", "inside"), LIMIT_LINES, ids=[c for c, _, _ in LIMIT_LINES])
def test_every_contract_limit_holds_in_both_scanners(
    case: str, raw: str, inside: bool, scanner: str
) -> None:
    assert contract_accepts(raw) == inside, f"contract: {case}"
    assert accepted_alone(raw, scanner) == inside, f"{scanner} scanner: {case}"


# The Rust scanner restates no rule: every one reaches it from the generated contract.json.


def _rust_source(*names: str) -> str:
    """The scanner's Rust (the files `names`, else all), its unit tests left out."""
    sources = [RUST_SOURCES / n for n in names] or sorted(RUST_SOURCES.glob("*.rs"))
    text = "\n".join(p.read_text().split("#[cfg(test)]")[0] for p in sources)
    text = re.sub(r"//[^\n]*", "", text)  # comments
    return re.sub(r"b?'(?:\\.|[^'\\])'", "", text)  # char literals (`b'"'`) are no quotes


def _contract_limits(schema: dict) -> tuple[set[int], set[str]]:
    """Every number, every allowed literal and every property name in a JSON schema."""
    numbers: set[int] = set()
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("maxLength", "minLength", "minimum", "maxItems", "minItems"):
                    numbers.add(value)
                elif key == "pattern":
                    numbers.update(int(n) for n in re.findall(r"\{(\d+)\}", value))
                elif key == "enum":
                    words.update(value)
                elif key == "properties":
                    words.update(value)
                    walk(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return numbers, words


def test_the_rust_scanner_names_no_type_field_literal_or_limit_of_the_contract() -> None:
    if not RUST_SOURCES.exists():
        skip_missing(NATIVE_SOURCES)
    source = _rust_source()
    numbers, words = _contract_limits(events.Envelope.model_json_schema())
    words |= set(events.PAYLOADS)
    for model in events.PAYLOADS.values():
        more_numbers, more_words = _contract_limits(model.model_json_schema())
        numbers |= more_numbers
        words |= more_words
    assert {"text", "chat.step", "react.tool.call", "event_id"} <= words
    assert {2_048, 32_000, 100_000} <= numbers
    quoted = set(re.findall(r'"((?:\\.|[^"\\])*)"', source))
    assert not quoted & words, f"contract names in the Rust: {sorted(quoted & words)}"
    # The validation itself (lib.rs splits lines and builds Arrow buffers, with sizes of its own).
    validation = _rust_source("contract.rs", "timestamp.rs")
    written = {int(n.replace("_", "")) for n in re.findall(r"\b\d[\d_]*\b", validation)}
    limits = {n for n in numbers if n >= 100}  # small numbers are also array sizes and bit counts
    assert not written & limits, f"contract limits in the Rust: {sorted(written & limits)}"
