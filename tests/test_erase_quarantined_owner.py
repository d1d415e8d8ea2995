"""Erasure finds the owner of every quarantined line it deletes, including lines that polars'
JSON reader cannot take (an integer beyond 64 bits, `NaN`) and lines that are not JSON at all.

Issue 24 follow-up: such lines are now quarantined as `number_out_of_range`; erasure read their
tenant with `json_path_match`, got null, and so missed their owner when resolving a scope.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_turn_record import NOW, Turn, write_jsonl

from ctxdb.landing.run import land
from ctxdb.lifecycle import erase as erasure
from ctxdb.lifecycle.scope import AmbiguousScope, Scope
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import QUARANTINED_EVENTS

HUGE = 10**400


@pytest.mark.parametrize(
    ("raw", "owner"),
    [
        ('{"tenant": "t1", "app": "a", "user_id": "u", "n": ' + str(HUGE) + "}", ("t1", "a", "u")),
        ('{"tenant": "t1", "user_id": "u", "x": NaN}', ("t1", None, "u")),
        ('{"tenant": "t\\u00e9", "user_id": "u", "type": 42', ("t\u00e9", None, "u")),
        ("not json at all", (None, None, None)),
    ],
)
def test_line_owner_reads_lines_polars_cannot(raw: str, owner: tuple) -> None:
    assert erasure._line_owner(raw) == owner


def test_a_user_whose_only_other_tenant_line_holds_a_huge_integer_is_ambiguous(
    tmp_path: Path, settings: Settings
) -> None:
    """User `u1` exists in tenant `acme` (landed) and in tenant `other` only through a quarantined
    line with a 400-digit integer: an erasure of `u1` without a tenant must see both tenants."""
    poison = Turn("c-poison", "t1", tenant="other").add(
        "assistant.completion", {"text": "x", "tokens_out": HUGE}
    )
    landing = tmp_path / "landing"
    write_jsonl(landing / "a.jsonl", [*Turn("c-a", "t1").basic().events, poison])
    store = DeltaStore(str(tmp_path / "delta"))
    land(store, str(landing), now=NOW, scanner="python")
    quarantined = store.read(QUARANTINED_EVENTS)
    assert quarantined["reason"].to_list() == ["number_out_of_range"]

    owners, _ = erasure._owners(store, None, settings, Scope("user_id", "u1"))
    assert set(owners["tenant"].to_list()) == {"acme", "other"}
    with pytest.raises(AmbiguousScope):
        erasure.resolve(Scope("user_id", "u1"), owners)
