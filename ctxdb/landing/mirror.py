"""The pure-Python landing scanner: a msgspec mirror of the event contract, derived at import from
the pydantic models in `ctxdb.contract.events`, plus polars checks over whole envelope columns.

It stands in for the native scanner when that is not built (or `CTXDB_LANDING_SCANNER=python`)
and keeps the same promise: it accepts a subset of what the contract accepts, with the same
values, and hands every other non-blank line back for the pydantic contract to accept or
quarantine. No limit is restated here: lengths, bounds, patterns, literals, defaults and
`AfterValidator` checks are read off the models. A payload model using anything the derivation
does not know (another validator kind, a transforming constraint) is not mirrored, and every line
of that event type takes the pydantic path: slower, never wrong. Timestamps are taken only in the
strict RFC 3339 form the native scanner takes (pydantic truncates digits past microseconds where
msgspec would round). The contract's whole-payload rule (`events.payload_problem`: integers
within 64 bits, finite numbers, bounded nesting, unknown keys included) is held by
`PayloadMirror`.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import annotated_types
import msgspec
import polars as pl
from pydantic import AwareDatetime, BaseModel
from pydantic.fields import FieldInfo
from pydantic.functional_validators import AfterValidator
from pydantic.types import Strict, StringConstraints
from pydantic_core import from_json

from ctxdb.contract import events

log = logging.getLogger(__name__)

STRICT_TIMESTAMP = (
    r"^(?:[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-[0-9]{2}-[0-9]{2}"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)
"""The timestamp form both scanners take (years 1000-9998 keep every offset inside Python's
datetime range); any other form goes to the contract."""

UTC_CONVERSIONS = frozenset(
    m.func for m in get_args(events.UtcDatetime)[1:] if isinstance(m, AfterValidator)
)
"""The contract's `UtcDatetime` check (to UTC, inside [`EARLIEST`, `LATEST`)), which polars does
for envelope timestamps (`_timestamp` and the range rule)."""

Check = Callable[[Any], Any]


class Unmirrored(Exception):
    """A construct of the contract the derivation does not know."""


def python_pattern(pattern: str) -> str:
    """`pattern` for Python's `re` as pydantic's Rust regex reads it: a final `$` ends the text
    (in Python it also matches before a trailing newline)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    if "$" in pattern.replace("\\$", ""):
        raise Unmirrored(f"pattern with an inner `$`: {pattern}")
    return pattern


def constraints(metadata: Sequence[Any]) -> tuple[dict[str, Any], tuple[Check, ...]]:
    """The bounds (msgspec `Meta` keywords, patterns as pydantic wrote them) and after-checks of
    a field's pydantic metadata."""
    meta: dict[str, Any] = {}
    checks: list[Check] = []
    for item in metadata:
        if isinstance(item, FieldInfo):  # `Field(...)` inside `Annotated`, as in a union member
            if item.alias or item.validation_alias or not item.is_required():
                raise Unmirrored(f"a default or alias inside a type: {item!r}")
            more, more_checks = constraints(item.metadata)
            meta.update(more)
            checks.extend(more_checks)
            continue
        if isinstance(item, AfterValidator):  # the contract's take the value only (no info)
            checks.append(cast(Check, item.func))
            continue
        if isinstance(item, Strict):
            continue  # msgspec never coerces
        if isinstance(item, StringConstraints):
            if item.strip_whitespace or item.to_upper or item.to_lower or item.ascii_only:
                raise Unmirrored(f"transforming string constraint: {item}")
            values = {k: getattr(item, k) for k in ("min_length", "max_length", "pattern")}
        elif isinstance(item, annotated_types.BaseMetadata):
            values = dict(vars(item)) if hasattr(item, "__dict__") else _slots(item)
        elif type(item).__name__ == "_PydanticGeneralMetadata":
            values = dict(vars(item))
        else:
            raise Unmirrored(f"metadata {item!r}")
        values.pop("strict", None)
        unknown = set(values) - {"min_length", "max_length", "pattern", "ge", "gt", "le", "lt"}
        if unknown:
            raise Unmirrored(f"constraint {sorted(unknown)}")
        meta.update({k: v for k, v in values.items() if v is not None})
    return meta, tuple(checks)


def _slots(item: Any) -> dict[str, Any]:
    return {name: getattr(item, name) for name in type(item).__dataclass_fields__}


def _aware(value: str) -> datetime:
    return datetime.fromisoformat(value)


def mirror_type(annotation: Any, metadata: Sequence[Any] = ()) -> tuple[Any, tuple[Check, ...]]:
    """The msgspec type of a pydantic field and the checks to run on its (non-null) value."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        return mirror_type(inner, [*metadata, *extra])
    if origin in (Union, types.UnionType):
        parts: list[Any] = []
        checks: tuple[Check, ...] = ()
        for arg in get_args(annotation):
            kind, more = (arg, ()) if arg is type(None) else mirror_type(arg, metadata)
            parts.append(kind)
            checks += more
        return Union[tuple(parts)], checks  # noqa: UP007
    meta, checks = constraints(metadata)
    if "pattern" in meta:
        meta["pattern"] = python_pattern(meta["pattern"])
    if origin is Literal or annotation in (bool, dict[str, Any]):
        if meta or checks:
            raise Unmirrored(f"constraint on {annotation}")
        return annotation, ()
    if annotation is AwareDatetime:
        if meta:
            raise Unmirrored(f"bounds on a timestamp: {meta}")
        strict = Annotated[str, msgspec.Meta(pattern=python_pattern(STRICT_TIMESTAMP))]
        return strict, (_aware, *checks)
    if origin is list:
        item, more = mirror_type(get_args(annotation)[0])
        if more or checks:
            raise Unmirrored("checks inside a list")
        listed = types.GenericAlias(list, (item,))  # list[item], of a type known at run time
        return (Annotated[listed, msgspec.Meta(**meta)] if meta else listed), ()
    if annotation in (str, int, float):
        return (Annotated[annotation, msgspec.Meta(**meta)] if meta else annotation), checks
    raise Unmirrored(f"type {annotation}")


def plain_model(model: type[BaseModel]) -> None:
    """Refuse models validated beyond their fields' metadata, or configured to change values."""
    decorators = model.__pydantic_decorators__
    kinds = ("validators", "field_validators", "root_validators", "model_validators")
    if any(getattr(decorators, kind) for kind in kinds):
        raise Unmirrored(f"{model.__name__} has validator methods")
    unknown = set(model.model_config) - {"extra", "frozen", "strict", "title"}
    if unknown:
        raise Unmirrored(f"{model.__name__} config {sorted(unknown)}")


def _struct_field(name: str, info: FieldInfo, kind: Any) -> tuple:
    if info.alias or info.validation_alias:
        raise Unmirrored(f"aliased field {name}")
    if info.is_required():
        return (name, kind)
    if info.default_factory is not None:
        # The contract's factories take no arguments (none reads the validated data).
        factory = cast(Callable[[], Any], info.default_factory)
        return (name, kind, msgspec.field(default_factory=factory))
    return (name, kind, info.default)


def mirror_struct(
    model: type[BaseModel], overrides: dict[str, Any] | None = None, known_keys: bool = False
) -> type:
    """A msgspec struct accepting a subset of what `model` accepts; `overrides` gives some fields
    another type (whose checks are then the caller's); `known_keys` refuses unknown keys even
    where the model ignores them."""
    plain_model(model)
    overrides = overrides or {}
    fields: list[tuple] = []
    checks: list[tuple[str, tuple[Check, ...]]] = []
    for name, info in model.model_fields.items():
        more: tuple[Check, ...] = ()
        if name in overrides:
            kind = overrides[name]
        else:
            kind, more = mirror_type(info.annotation, info.metadata)
        fields.append(_struct_field(name, info, kind))
        if more:
            checks.append((name, more))
    namespace = {"__post_init__": _post_init(tuple(checks))} if checks else {}
    return msgspec.defstruct(
        f"Mirror{model.__name__}",
        fields,
        forbid_unknown_fields=known_keys or model.model_config.get("extra") == "forbid",
        gc=False,
        namespace=namespace,
    )


def _post_init(checks: tuple[tuple[str, tuple[Check, ...]], ...]) -> Callable[[Any], None]:
    def post_init(self: Any) -> None:
        for name, fns in checks:
            value = getattr(self, name)
            if value is not None:
                for fn in fns:
                    value = fn(value)

    return post_init


class EnvelopeMirror:
    """The envelope decoded with every string field taken as is and the payload kept as its raw
    JSON text; the strings' lengths and patterns and the timestamps are then checked per column
    by polars (the same Rust regex engine pydantic uses)."""

    def __init__(self, model: type[BaseModel]) -> None:
        plain_model(model)
        self.columns = [n for n in model.model_fields if n not in ("schema_version", "payload")]
        self.timestamps: list[str] = []
        self.rules: list[pl.Expr] = []
        overrides: dict[str, Any] = {"payload": msgspec.Raw}
        for name in self.columns:
            info = model.model_fields[name]
            if get_origin(info.annotation) is Literal:
                overrides[name] = info.annotation
                continue
            meta, checks = constraints(info.metadata)
            overrides[name] = str
            if info.annotation is AwareDatetime and not meta and set(checks) <= UTC_CONVERSIONS:
                self.timestamps.append(name)
                self.rules.append(
                    pl.col(name)
                    .is_between(events.EARLIEST, events.LATEST, closed="left")
                    .fill_null(False)
                )
            elif info.annotation is str and not checks and not {"ge", "gt", "le", "lt"} & set(meta):
                self.rules.append(_string_rule(pl.col(name), meta))
            else:
                raise Unmirrored(f"envelope field {name}")
        self.decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
            mirror_struct(model, overrides)
        )

    def frame(self, accepted: list, numbers: list[int]) -> pl.DataFrame:
        """Accepted envelopes as columns with `ok`, whether every rule holds; timestamps in the
        strict form parsed to UTC (null otherwise, or when not a calendar date)."""
        columns = {name: [getattr(e, name) for e in accepted] for name in self.columns}
        payload = pl.Series("payload", [bytes(e.payload) for e in accepted], dtype=pl.Binary)
        frame = pl.DataFrame(columns, schema={n: pl.String for n in self.columns})
        return frame.with_columns(
            *(_timestamp(pl.col(n)) for n in self.timestamps),
            payload.cast(pl.String),
            pl.Series("line_number", numbers, dtype=pl.Int64),
        ).with_columns(pl.all_horizontal(pl.lit(True), *self.rules).alias("ok"))


def _string_rule(column: pl.Expr, meta: dict[str, Any]) -> pl.Expr:
    rule = pl.lit(True)
    if "pattern" in meta:
        rule = rule & column.str.contains(meta["pattern"])
    if "min_length" in meta:
        rule = rule & (column.str.len_chars() >= meta["min_length"])
    if "max_length" in meta:
        rule = rule & (column.str.len_chars() <= meta["max_length"])
    return rule


def _timestamp(column: pl.Expr) -> pl.Expr:
    parsed = column.str.replace(r"Z\z", "+00:00").str.to_datetime(
        "%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="us", strict=False
    )
    return pl.when(column.str.contains(STRICT_TIMESTAMP)).then(parsed)


def _holds_any(kind: Any) -> bool:
    return kind is Any or any(_holds_any(arg) for arg in get_args(kind))


class PayloadMirror:
    """The mirror of one payload model, holding the contract's whole-payload rule too
    (`events.payload_problem`). A payload with known keys only (the usual case) is decoded once:
    typed fields hold their bounds, and only the values of free-form fields (`dict[str, Any]`)
    are walked. One with an unknown key (skipped unchecked by a decode) is checked whole."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.known: msgspec.json.Decoder[Any] = msgspec.json.Decoder(
            mirror_struct(model, known_keys=True)
        )
        self.any_keys: msgspec.json.Decoder[Any] = msgspec.json.Decoder(mirror_struct(model))
        self.free = tuple(
            name
            for name, info in model.model_fields.items()
            if _holds_any(mirror_type(info.annotation, info.metadata)[0])
        )

    def check(self, payload: msgspec.Raw) -> None:
        """Raise (msgspec or ValueError) unless the mirror accepts `payload`."""
        try:
            value = self.known.decode(payload)
        except msgspec.ValidationError:
            self.any_keys.decode(payload)
            if not storable(bytes(payload)):
                raise ValueError("payload not storable") from None
            return
        for name in self.free:
            if events.payload_problem(getattr(value, name), f"payload.{name}", depth=2):
                raise ValueError(f"payload.{name} not storable")


def _mirror_payloads() -> dict[str, PayloadMirror]:
    decoders = {}
    for name, model in events.PAYLOADS.items():
        try:
            decoders[name] = PayloadMirror(model)
        except Unmirrored as exc:
            log.warning("event type %s is not mirrored (the contract checks it): %s", name, exc)
    return decoders


def _mirror_envelope() -> EnvelopeMirror | None:
    try:
        return EnvelopeMirror(events.Envelope)
    except Unmirrored as exc:
        log.warning("the envelope is not mirrored (the contract checks every line): %s", exc)
        return None


ENVELOPE = _mirror_envelope()
PAYLOAD_DECODERS = _mirror_payloads()
"""Per mirrored event type, the mirror that validates its payload."""

# RecursionError: msgspec's answer to nesting past its depth limit (a line, never a halt).
_REFUSED = (msgspec.MsgspecError, ValueError, ArithmeticError, KeyError, RecursionError)


def storable(payload: bytes) -> bool:
    """Whether the payload's JSON text holds no `events.payload_problem`, unknown keys included
    (a typed decode skips them unchecked). Parsed as the contract parses it (pydantic-core), so a
    text its parser refuses (nested past its recursion limit under a key a later duplicate
    replaces) goes to the contract rather than landing here."""
    try:
        return events.payload_problem(from_json(payload)) is None
    except (ValueError, RecursionError):
        return False


def scan(data: bytes, max_bytes: int) -> tuple[pl.DataFrame, list[tuple[int, bytes]]]:
    """The non-blank lines of `data` the mirror accepts, as rows (envelope columns, `line_number`
    and the payload's JSON text as written), and the others as (line number, line)."""
    lines = data.split(b"\n")
    if ENVELOPE is None:
        return _empty(), [(n, _chomp(line)) for n, line in enumerate(lines, 1) if line.strip()]
    accepted, numbers, rejected = [], [], []
    decode, payloads = ENVELOPE.decoder.decode, PAYLOAD_DECODERS
    for number, line in enumerate(lines, start=1):
        try:
            if len(line) > max_bytes and len(_chomp(line)) > max_bytes:
                raise ValueError("oversize")
            event = decode(line)
            payloads[event.type].check(event.payload)
        except _REFUSED:
            if line.strip():
                rejected.append((number, _chomp(line)))
            continue
        accepted.append(event)
        numbers.append(number)
    frame = ENVELOPE.frame(accepted, numbers)
    refused = frame.filter(~pl.col("ok"))["line_number"].to_list()
    if refused:
        rejected = sorted(rejected + [(n, _chomp(lines[n - 1])) for n in refused])
    return frame.filter("ok").select(*events.ENVELOPE_COLUMNS, "line_number", "payload"), rejected


def _chomp(line: bytes) -> bytes:
    """The line without the `\r` of a CRLF ending (as the native scanner cuts it)."""
    return line[:-1] if line.endswith(b"\r") else line


def _empty() -> pl.DataFrame:
    strings = dict.fromkeys(events.ENVELOPE_COLUMNS, pl.String)
    typed: dict[str, pl.DataType | type[pl.DataType]] = {
        "occurred_at": pl.Datetime("us", "UTC"),
        "line_number": pl.Int64,
        "payload": pl.String,
    }
    return pl.DataFrame(schema=pl.Schema({**strings, **typed}))
