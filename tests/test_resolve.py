"""conv:fi: ref resolution: owner-only, retained-only, no traversal, local dir and URI storage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest_search import APP, BRIEF_APP, TENANT, SearchEnv

from ctxdb.contract.refs import RefError
from ctxdb.search import NotFound
from ctxdb.serve.resolve import Resolver
from ctxdb.storage.conversation_files import turn_file_path

pytestmark = [pytest.mark.es]

ALICE_ATTACHMENT = "conv:fi:conv_c-sheets.turn_t1.user.attachments/budget.xlsx"
ALICE_FILE = "conv:fi:conv_c-sheets.turn_t2.files/fixed.xlsx"
BOB_FILE = "conv:fi:conv_c-bob.turn_t1.files/salaries.xlsx"


def resolver(env: SearchEnv) -> Resolver:
    return Resolver(env.settings, env.client)


def test_owner_pulls_attachment_and_hosted_file(search_env: SearchEnv) -> None:
    pulled = resolver(search_env).pull(search_env.alice, ALICE_ATTACHMENT)
    assert pulled.data == b"bytes of budget.xlsx for alice"
    assert pulled.filename == "budget.xlsx"
    assert pulled.mime == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    assert resolver(search_env).pull(search_env.alice, ALICE_FILE).data == (
        b"bytes of files/fixed.xlsx for alice"
    )


def test_short_ref_is_qualified_with_the_given_conversation(search_env: SearchEnv) -> None:
    pulled = resolver(search_env).pull(
        search_env.alice, "conv:fi:turn_t2.files/fixed.xlsx", conversation_id="c-sheets"
    )
    assert pulled.ref == ALICE_FILE
    with pytest.raises(RefError, match="belongs to conversation"):
        resolver(search_env).pull(search_env.alice, BOB_FILE, conversation_id="c-sheets")


def test_other_users_ref_is_not_found(search_env: SearchEnv) -> None:
    assert resolver(search_env).pull(search_env.bob, BOB_FILE).data.startswith(b"bytes of files/")
    with pytest.raises(NotFound):
        resolver(search_env).pull(search_env.alice, BOB_FILE)
    with pytest.raises(NotFound):
        resolver(search_env).pull(search_env.bob, ALICE_FILE)


def test_expired_turn_ref_is_not_found_although_the_bytes_exist(search_env: SearchEnv) -> None:
    root = Path(search_env.settings.files)
    chart = root / turn_file_path(TENANT, BRIEF_APP, "alice", "c-old", "t1") / "files/chart.png"
    assert chart.exists()
    with pytest.raises(NotFound):
        resolver(search_env).pull(search_env.alice, "conv:fi:conv_c-old.turn_t1.files/chart.png")


def test_missing_file_of_own_turn_is_not_found(search_env: SearchEnv) -> None:
    with pytest.raises(NotFound):
        resolver(search_env).pull(search_env.alice, "conv:fi:conv_c-sheets.turn_t1.files/nope.csv")
    with pytest.raises(NotFound):  # a directory is not a file
        resolver(search_env).pull(
            search_env.alice, "conv:fi:conv_c-sheets.turn_t1.user.attachments"
        )


@pytest.mark.parametrize(
    "ref",
    [
        "conv:fi:conv_c-sheets.turn_t1.files/../../../../bob/conv_c-bob/turn_t1/files/salaries.xlsx",
        "conv:fi:conv_c-sheets.turn_t1.../turn_t2/files/fixed.xlsx",
        "conv:fi:conv_c-sheets.turn_t1./etc/passwd",
        "conv:fi:conv_c-sheets.turn_t1.files\\..\\..\\secret",
        "conv:fi:conv_../c-bob.turn_t1.files/salaries.xlsx",
        "conv:fi:conv_c-sheets.turn_../../bob.files/x",
        "conv:fi:files/fixed.xlsx",
        "conv:ar:conv_c-sheets.turn_t1.user.prompt",
        "file:///etc/passwd",
    ],
)
def test_traversal_absolute_and_malformed_refs_are_refused(search_env: SearchEnv, ref: str) -> None:
    with pytest.raises(RefError):
        resolver(search_env).pull(search_env.alice, ref)


def test_symlink_out_of_the_turn_directory_is_refused(search_env: SearchEnv) -> None:
    root = Path(search_env.settings.files)
    alice_dir = root / turn_file_path(TENANT, APP, "alice", "c-sheets", "t1") / "files"
    alice_dir.mkdir(parents=True, exist_ok=True)
    bob_file = root / turn_file_path(TENANT, APP, "bob", "c-bob", "t1") / "files/salaries.xlsx"
    link = alice_dir / "innocent.xlsx"
    if not link.exists():
        os.symlink(bob_file, link)
    with pytest.raises(RefError, match="outside"):
        resolver(search_env).pull(
            search_env.alice, "conv:fi:conv_c-sheets.turn_t1.files/innocent.xlsx"
        )


def test_uri_storage_root_through_pyarrow_fs(search_env: SearchEnv) -> None:
    storage = f"file://{Path(search_env.settings.storage).resolve()}"
    settings = search_env.settings.replace(storage_root=storage)
    assert settings.files.startswith("file://")
    pulled = Resolver(settings, search_env.client).pull(search_env.alice, ALICE_ATTACHMENT)
    assert pulled.data == b"bytes of budget.xlsx for alice"
