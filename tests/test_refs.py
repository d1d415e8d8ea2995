"""Canonical conv: refs: every family round-trips; malformed refs raise a clear RefError."""

from __future__ import annotations

import pytest

from ctxdb.contract.refs import FAMILIES, Ref, RefError, make_ref, parse_ref, qualify

BODIES = {
    "fi": "files/report.pdf",
    "ar": "user.prompt.2",
    "tc": "code_exec_0.result",
    "so": "src_3",
    "ws": "working_summary",
    "su": "search.row.1",
    "ev": "e8f2a",
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("owner", [None, "c1f0"])
@pytest.mark.parametrize("turn", [None, "t9"])
def test_every_family_round_trips(family: str, owner: str | None, turn: str | None) -> None:
    text = make_ref(family, BODIES[family], turn, owner)
    parsed = parse_ref(text)
    assert parsed == Ref(family=family, conversation_id=owner, turn_id=turn, path=BODIES[family])
    assert str(parsed) == text
    assert parse_ref(str(parsed)) == parsed


def test_the_durable_file_ref_of_the_spec() -> None:
    ref = parse_ref("conv:fi:conv_abc.turn_t1.files/report.pdf")
    assert (ref.family, ref.conversation_id, ref.turn_id, ref.path) == (
        "fi",
        "abc",
        "t1",
        "files/report.pdf",
    )


def test_turn_and_conversation_refs_round_trip() -> None:
    for text in ("conv:turn:t1", "conv:turn:conv_c1.t1", "conv:conversation:c1"):
        assert str(parse_ref(text)) == text
    assert parse_ref("conv:turn:conv_c1.t1").turn_id == "t1"


def test_qualify_adds_the_owner_segment() -> None:
    short = "conv:fi:turn_t1.user.attachments/data.csv"
    full = qualify(short, "c1")
    assert full == "conv:fi:conv_c1.turn_t1.user.attachments/data.csv"
    assert qualify(full, "c1") == full


def test_qualify_refuses_a_ref_owned_by_another_conversation() -> None:
    with pytest.raises(RefError, match="belongs to conversation"):
        qualify("conv:fi:conv_c1.turn_t1.files/a", "c2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fi:turn_t1.files/a", "not a conv: ref"),
        ("conv:fi", "no family separator"),
        ("conv:zz:turn_t1.a", "unknown ref family"),
        ("conv:fi:", "empty path"),
        ("conv:fi:conv_c1", "owner segment but no body"),
        ("conv:fi:turn_t1", "turn segment but no path"),
        ("conv:fi:conv_.turn_t1.files/a", "invalid conversation id"),
        ("conv:fi:conv_c/1.files/a", "invalid conversation id"),
        ("conv:fi:turn_t1.files/../../etc/passwd", "unsafe path"),
        ("conv:fi:turn_t1./abs", "unsafe path"),
        ("conv:fi:turn_t1.files\\x", "unsafe path"),
        ("conv:fi:turn_t1.files//x", "unsafe path"),
        ("conv:turn:t.1", "invalid turn id"),
        ("conv:conversation:c.1", "invalid conversation id"),
    ],
)
def test_malformed_refs_raise_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(RefError, match=message):
        parse_ref(text)


def test_make_ref_rejects_unknown_families_and_unsafe_ids() -> None:
    with pytest.raises(RefError):
        make_ref("xx", "a")
    with pytest.raises(RefError):
        make_ref("fi", "files/a", turn_id="t.1")
