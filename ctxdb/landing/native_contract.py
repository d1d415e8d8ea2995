"""The native scanner's contract, generated from the pydantic one: `native/src/contract.json`.

The Rust scanner (`native/src/contract.rs`) embeds that file when it is compiled and holds no
rule of its own: event types, field names, which fields are required or may be null, types,
lengths, counts, bounds, patterns, literals, the timestamp range and the payload depth all come
from here, read off `ctxdb.contract.events` the way the msgspec mirror reads them
(`mirror.constraints`). JSON Schema is not used because it drops the contract's `AfterValidator`
checks (a relative path), which the Rust must know to stay a subset of the contract.

A construct this derivation does not know (another validator, a non-string literal, a union of
two types) makes its event type `unmirrored`: the native scanner then hands every line of that
type to the pydantic contract (slower, never wrong). The committed file must equal what this
module generates (`tests/test_native_contract_generated.py`); rewrite it with
`python -m ctxdb.landing.native_contract` and rebuild (`pip install -e .`).
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import AwareDatetime, BaseModel

from ctxdb.contract import events
from ctxdb.landing.mirror import UTC_CONVERSIONS, Unmirrored, constraints, plain_model

CONTRACT_PATH = Path(__file__).resolve().parents[2] / "native" / "src" / "contract.json"
"""Where the generated contract lives in a source checkout (compiled into the scanner)."""

NAMED_CHECKS = {events.relative_path: "relative_path"}
"""`AfterValidator` functions of the contract that the Rust implements under these names."""

TYPE_FIELD = "type"
PAYLOAD_FIELD = "payload"
"""The envelope's discriminator and the field it chooses the model of (`events._event_model`)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def _string(meta: dict[str, Any], checks: Sequence[Any]) -> dict[str, Any]:
    if {"ge", "gt", "le", "lt"} & set(meta):
        raise Unmirrored(f"numeric bounds on a string: {meta}")
    unknown = [c for c in checks if c not in NAMED_CHECKS]
    if unknown:
        raise Unmirrored(f"string checks {unknown}")
    return {
        "value_type": "string",
        "min_chars": meta.get("min_length", 0),
        "max_chars": meta.get("max_length"),
        "pattern": meta.get("pattern"),
        "one_of": None,
        "checks": [NAMED_CHECKS[c] for c in checks],
    }


def _integer(meta: dict[str, Any], checks: Sequence[Any]) -> dict[str, Any]:
    if checks or {"min_length", "max_length", "pattern"} & set(meta):
        raise Unmirrored(f"integer constraint {meta} {list(checks)}")
    low = max(events.INT64_MIN, meta.get("ge", events.INT64_MIN), meta.get("gt", -(2**64)) + 1)
    high = min(events.INT64_MAX, meta.get("le", events.INT64_MAX), meta.get("lt", 2**64) - 1)
    return {"value_type": "integer", "min": low, "max": high}


def _literal(annotation: Any, meta: dict[str, Any], checks: Sequence[Any]) -> dict[str, Any]:
    values = get_args(annotation)
    if meta or checks or not all(isinstance(v, str) for v in values):
        raise Unmirrored(f"literal {annotation} with {meta} {list(checks)}")
    return {**_string({}, ()), "one_of": list(values)}


def kind_of(annotation: Any, metadata: Sequence[Any] = ()) -> tuple[dict[str, Any], bool]:
    """The native kind of a pydantic field (its type and bounds) and whether it may be null."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        return kind_of(inner, [*metadata, *extra])
    if origin in (Union, types.UnionType):
        present = [a for a in get_args(annotation) if a is not type(None)]
        if len(present) != 1:
            raise Unmirrored(f"union {annotation}")
        kind, _ = kind_of(present[0], metadata)
        return kind, True
    meta, checks = constraints(metadata)
    if origin is Literal:
        return _literal(annotation, meta, checks), False
    if annotation is AwareDatetime:
        if meta or not set(checks) <= UTC_CONVERSIONS:
            raise Unmirrored(f"timestamp with {meta} {list(checks)}")
        return {"value_type": "timestamp"}, False
    if origin is list:
        item, nullable = kind_of(get_args(annotation)[0])
        if nullable or checks or set(meta) - {"min_length", "max_length"}:
            raise Unmirrored(f"list {annotation} with {meta}")
        bounds = {"min_items": meta.get("min_length", 0), "max_items": meta.get("max_length")}
        return {"value_type": "list", "item": item, **bounds}, False
    if annotation in (bool, dict[str, Any]):
        if meta or checks:
            raise Unmirrored(f"constraint on {annotation}")
        return {"value_type": "boolean" if annotation is bool else "object"}, False
    if annotation is str:
        return _string(meta, checks), False
    if annotation is int:
        return _integer(meta, checks), False
    raise Unmirrored(f"type {annotation}")


def model_of(model: type[BaseModel], payload_field: str | None = None) -> dict[str, Any]:
    """A model's fields in order; `closed` when unknown keys are refused. `payload_field` is
    kept as raw JSON, validated by the model its event type chooses."""
    plain_model(model)
    fields = []
    for name, info in model.model_fields.items():
        if info.alias or info.validation_alias:
            raise Unmirrored(f"aliased field {name}")
        if name == payload_field:
            kind, nullable = {"value_type": "payload"}, False
        else:
            kind, nullable = kind_of(info.annotation, info.metadata)
        fields.append({"name": name, "required": info.is_required(), "nullable": nullable, **kind})
    return {"closed": model.model_config.get("extra") == "forbid", "fields": fields}


def _payload_model(model: type[BaseModel]) -> dict[str, Any]:
    try:
        return model_of(model)
    except Unmirrored as exc:
        return {"unmirrored": str(exc)}


def contract(
    envelope: type[BaseModel] = events.Envelope,
    payloads: dict[str, type[BaseModel]] | None = None,
) -> dict[str, Any]:
    """The native contract of `envelope` and the payload model of each event type (by default
    the contract's own)."""
    for name in (TYPE_FIELD, PAYLOAD_FIELD):
        if name not in envelope.model_fields:
            raise Unmirrored(f"the envelope has no {name!r} field")
    return {
        "generated_by": "python -m ctxdb.landing.native_contract (from ctxdb/contract/events.py)",
        "timestamp_range_micros": [_micros(events.EARLIEST), _micros(events.LATEST)],
        "payload_max_depth": events.PAYLOAD_MAX_DEPTH,
        "type_field": TYPE_FIELD,
        "envelope": model_of(envelope, payload_field=PAYLOAD_FIELD),
        "payloads": {
            name: _payload_model(model)
            for name, model in (events.PAYLOADS if payloads is None else payloads).items()
        },
    }


def contract_text() -> str:
    """The generated file's text: the contract as indented JSON, in the models' field order."""
    return json.dumps(contract(), indent=1) + "\n"


def main(argv: Sequence[str]) -> None:
    """Write the generated contract to `argv[0]` (default: `CONTRACT_PATH`)."""
    path = Path(argv[0]) if argv else CONTRACT_PATH
    path.write_text(contract_text())


if __name__ == "__main__":
    main(sys.argv[1:])
