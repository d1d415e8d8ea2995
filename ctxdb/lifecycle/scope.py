"""What an erasure removes: one user or one conversation, of one tenant (and optionally one app).

The identity is the full one: search treats (tenant, user_id) as the caller and landing treats
(tenant, app, user_id) as a conversation's owner, so a user id alone names a different person in
each tenant. `resolve` fills in the tenant when the id exists in exactly one, and refuses with the
list of matches when it exists in several. A scope gives its predicate for each store: a polars
expression and a SQL predicate for Delta, a query for Elasticsearch, and a test for one landing
line (bytes, as landing reads them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Literal

import polars as pl

ScopeColumn = Literal["user_id", "conversation_id"]
OWNER = ["tenant", "app", "user_id", "conversation_id"]


@dataclass(frozen=True)
class Scope:
    """Everything whose `column` (user_id or conversation_id) equals `value`, inside `tenant`
    (and `app`) when given."""

    column: ScopeColumn
    value: str
    tenant: str | None = None
    app: str | None = None
    owner: str | None = None
    """For a conversation: the user who owns it (the first to land it). Conversation ids come
    from clients, so another user's lines may name the same id; with the owner set, only the
    owner's lines and rows are this scope."""

    def __post_init__(self) -> None:
        if self.column not in ("user_id", "conversation_id"):
            raise ValueError(f"cannot erase by {self.column!r}: use user_id or conversation_id")
        if not self.value or not self.value.strip():
            raise ValueError(f"an erasure needs a non-empty {self.column}")
        if self.owner is not None and self.column != "conversation_id":
            raise ValueError("only a conversation scope has an owner")
        for name in ("tenant", "app", "owner"):
            given = getattr(self, name)
            if given is not None and not given.strip():
                raise ValueError(f"an erasure's {name} must not be blank")

    @property
    def label(self) -> str:
        return "user" if self.column == "user_id" else "conversation"

    def describe(self) -> str:
        """E.g. `user 'u1' of tenant 'acme', app 'chat'`."""
        where = [f"{name} {value!r}" for name, value in self._context().items()]
        return f"{self.label} {self.value!r}" + (f" of {', '.join(where)}" if where else "")

    def with_tenant(self, tenant: str) -> Scope:
        return replace(self, tenant=tenant)

    def with_owner(self, owner: str) -> Scope:
        return replace(self, owner=owner)

    def as_json(self) -> dict[str, str | None]:
        return {
            "column": self.column,
            "value": self.value,
            "tenant": self.tenant,
            "app": self.app,
            "owner": self.owner,
        }

    @classmethod
    def from_json(cls, data: dict[str, str | None]) -> Scope:
        return cls(
            data["column"],  # type: ignore[arg-type]
            data["value"],  # type: ignore[arg-type]
            data.get("tenant"),
            data.get("app"),
            data.get("owner"),
        )

    def narrows(self, other: Scope) -> bool:
        """True when `other` is this scope with tenant/app/owner filled in where this one left
        them."""
        return (
            (self.column, self.value) == (other.column, other.value)
            and self.tenant in (None, other.tenant)
            and self.app in (None, other.app)
            and self.owner in (None, other.owner)
        )

    def fields(self) -> dict[str, str]:
        """The column values a row of this scope has (tenant and app only when given)."""
        return {**self._context(), self.column: self.value}

    def _context(self) -> dict[str, str]:
        given = (("tenant", self.tenant), ("app", self.app), ("user_id", self.owner))
        return {k: v for k, v in given if v is not None}

    def covers(self, columns: list[str]) -> bool:
        """True when a table with `columns` can be filtered by this scope."""
        return set(self.fields()) <= set(columns)

    def expr(self) -> pl.Expr:
        """The polars predicate selecting this scope's rows."""
        return pl.all_horizontal([pl.col(k) == v for k, v in self.fields().items()])

    def sql(self) -> str:
        """The Delta SQL predicate selecting this scope's rows."""
        return " AND ".join(
            f"{k} = '{v.replace(chr(39), chr(39) * 2)}'" for k, v in self.fields().items()
        )

    def es_query(self) -> dict:
        return {"bool": {"filter": [{"term": {k: v}} for k, v in self.fields().items()]}}

    def in_raw_line(self) -> pl.Expr:
        """Matches a quarantined raw line (text) that names this scope's value and no other
        tenant, app or owner than the scope's."""
        named = pl.col("raw_line").str.contains(_pattern(self.column, self.value))
        return named & self.in_context()

    def in_context(self) -> pl.Expr:
        """Matches a quarantined raw line that names no other tenant, app or owner than the
        scope's (a line that names none of them matches)."""
        line = pl.col("raw_line")
        return pl.all_horizontal(
            pl.lit(True),
            *(
                line.str.contains(_pattern(name, value)) | ~line.str.contains(rf'"{name}"\s*:')
                for name, value in self._context().items()
            ),
        )

    def in_line(self, line: bytes) -> bool:
        """True when a landing-file line (bytes between two `\\n`) is an event of this scope: a
        JSON object whose field equals the value (and whose tenant/app, when present, are the
        scope's), or, when the line is not a JSON object, text naming the value and no other
        tenant or app."""
        if not line.strip():
            return False
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict):
            return event.get(self.column) == self.value and all(
                event.get(name, value) == value for name, value in self._context().items()
            )
        if re.search(_pattern(self.column, self.value).encode(), line) is None:
            return False
        for name, value in self._context().items():
            named = re.findall(rf'"{name}"\s*:\s*"([^"]*)"'.encode(), line)
            if named and value.encode() not in named:
                return False
        return True


def _pattern(column: str, value: str) -> str:
    return rf'"{column}"\s*:\s*"{re.escape(value)}"'


class AmbiguousScope(ValueError):
    """The identifier exists in more than one tenant and none was named."""

    def __init__(self, scope: Scope, owners: pl.DataFrame) -> None:
        self.scope = scope
        self.matches = matches(owners)
        listed = "; ".join(
            f"tenant {tenant!r} (apps {', '.join(repr(a) for a in apps)})"
            for tenant, apps in self.matches
        )
        super().__init__(
            f"{scope.describe()} exists in {len(self.matches)} tenants: {listed}; "
            "name the tenant (--tenant, and --app to narrow further)"
        )


def matches(owners: pl.DataFrame) -> list[tuple[str, list[str]]]:
    """Each tenant among `owners` with its apps, sorted."""
    grouped = owners.group_by("tenant").agg(pl.col("app").unique().sort()).sort("tenant")
    return [(tenant, list(apps)) for tenant, apps in grouped.iter_rows()]


def resolve(scope: Scope, owners: pl.DataFrame) -> Scope:
    """`scope` with its tenant named: as given, or the only tenant among `owners` (the identities
    where the value was found); AmbiguousScope when it was found in several tenants."""
    if scope.tenant is not None:
        return scope
    tenants = owners["tenant"].drop_nulls().unique().to_list()
    if len(tenants) > 1:
        raise AmbiguousScope(scope, owners)
    return scope.with_tenant(tenants[0]) if tenants else scope
