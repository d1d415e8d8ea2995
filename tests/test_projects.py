"""Projects (issue 45 item 2): each captured turn of a coding host carries its project, the git
root of its `cwd` (else the `cwd`), from capture through TurnLogs and role rows to search and the
context pack.

`project_of` is tried on a real folder tree, hostile values included (a symlink loop, a deleted
folder, undecodable bytes, a nesting deeper than its bound). Then real sessions go through the
real CLI: two Claude Code transcripts of tests/data/claude_code (one for Ann, one for Bob, both
moved into a subfolder of the same git repository), a third one of Ann's left in a folder that
does not exist here, and a Codex rollout of tests/data/codex moved into a git worktree (`.git`
is a file), each imported with `ctxdb import claude-code` / `ctxdb capture codex import` and
`ctxdb jobs run memory_job` once for the module. Each turn's TurnLog and role rows carry the
project; `ctxdb search --project` returns only that project's turns and never Bob's, who
worked in the same folder; `ctxdb context --project` holds only that project's sessions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import anyio
import polars as pl
import pytest
from conftest import delete_prefix_indices
from mcp import Client

from ctxdb.contract.identity import Principal
from ctxdb.contract.projects import MAX_DEPTH, PROJECT_MAX_CHARS, project_of, resolve_project
from ctxdb.index.client import make_client
from ctxdb.search.service import SearchService
from ctxdb.serve.mcp_server import build_server
from ctxdb.serve.mcp_tools import MemoryTools
from ctxdb.serve.resolve import Resolver
from ctxdb.settings import Settings
from ctxdb.storage.delta import DeltaStore
from ctxdb.storage.tables import ROLE_ROWS, TURN_LOGS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import real_sessions  # noqa: E402

CTXDB = str(Path(sys.executable).with_name("ctxdb"))
DATA = Path(__file__).parent / "data"
SPOTTER = DATA / "claude_code" / "-home-marco-projects-spotter"
ANN_SHOP = SPOTTER / "55604662-cf2a-4331-851a-ec234028f8ca.jsonl"
BOB_SHOP = SPOTTER / "d6e0bada-1959-4eec-a9d2-0bfade768d8f.jsonl"
ANN_ELSEWHERE = DATA / "claude_code" / "-workspace" / "c45af7b1-cb7c-4e51-93db-8cbb250a877a.jsonl"
CODEX = DATA / "codex" / "rollout-2025-09-19T09-02-12-01996135-afde-7911-97f0-d863511eca56.jsonl"
CODEX_SESSION = "01996135-afde-7911-97f0-d863511eca56"
ANN = Principal(user_id="ann", tenant="local")


# project_of on a real folder tree


def test_the_git_root_of_a_folder_is_its_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "cart").mkdir(parents=True)
    assert project_of(str(repo / "src" / "cart")) == str(repo)
    assert project_of(str(repo / "src" / ".." / "src" / "cart") + "/") == str(repo)
    assert project_of(str(repo)) == str(repo)
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")  # a worktree
    assert project_of(str(worktree)) == str(worktree)
    plain = tmp_path / "notes" / "2026"
    plain.mkdir(parents=True)
    assert project_of(str(plain)) == str(plain)  # no git root: the folder itself
    assert project_of("abc123hash") is None  # Gemini CLI: a project hash, not a folder
    assert project_of(None) is None and project_of("") is None
    assert project_of("C:\\src\\shop") == "C:\\src\\shop"  # a Windows transcript, as given
    monkeypatch.chdir(repo / "src")
    assert resolve_project(".") == str(repo) and resolve_project("home-ann-src") == "home-ann-src"


def test_hostile_folders_give_a_bounded_answer(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    loop = repo / "loop"
    loop.symlink_to(loop)  # a symlink loop: never a folder
    assert project_of(str(loop)) == str(loop)
    assert project_of(str(loop / "deeper")) == str(loop / "deeper")
    gone = repo / "gone"
    gone.mkdir()
    gone.rmdir()  # a deleted folder: the cwd as given, no guess from its parents
    assert project_of(str(gone)) == str(gone)
    (tmp_path / "target").mkdir()
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / ".git").symlink_to(tmp_path / "target")  # a linked .git is not followed
    assert project_of(str(tmp_path / "plain")) == str(tmp_path / "plain")
    undecodable = os.fsdecode(bytes(repo) + b"/caf\xe9")  # a Latin-1 folder name
    os.mkdir(os.fsencode(undecodable))
    answer = project_of(undecodable)
    assert answer == str(repo) + "/caf\\udce9"  # escaped, valid UTF-8, no filesystem guess
    answer.encode("utf-8")
    assert project_of("/" + "x" * (PROJECT_MAX_CHARS + 10)) == "/" + "x" * (PROJECT_MAX_CHARS - 1)
    deep = repo.joinpath(*["d"] * (MAX_DEPTH + 2))
    deep.mkdir(parents=True)
    assert project_of(str(deep)) == str(deep)  # the git root lies past the walk's bound
    assert project_of(str(repo.joinpath(*["d"] * (MAX_DEPTH - 2)))) == str(repo)


# Real sessions through the real CLI


def moved(source: Path, target: Path, cwd: str, keys: tuple[str, ...] = ("cwd",)) -> Path:
    """`source` with every `cwd` (top level, or in a line's payload) set to `cwd`."""
    lines = []
    for line in source.read_text().splitlines():
        record = json.loads(line)
        for holder in (record, record.get("payload")):
            if isinstance(holder, dict) and any(k in holder for k in keys):
                holder.update({k: cwd for k in keys if k in holder})
        lines.append(json.dumps(record))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    return target


@dataclass
class Memory:
    settings: Settings
    env: dict[str, str]
    shop: Path
    garden: Path
    tokens: dict[str, str]

    def ctxdb(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [CTXDB, *args], env={**self.env, **env}, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def logs(self) -> pl.DataFrame:
        return DeltaStore(self.settings.delta_uri).read(TURN_LOGS)


@pytest.fixture(scope="module")
def memory(
    es_base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Memory]:
    """Ann's and Bob's sessions imported with the CLI and `memory_job` run once over them."""
    home = tmp_path_factory.mktemp("projects")
    prefix = f"t{uuid.uuid4().hex[:12]}"
    settings = es_base_settings.replace(home=home, elasticsearch={"index_prefix": prefix})
    env = real_sessions.environment(home, prefix, settings.elasticsearch.url)
    shop, garden = home / "src" / "shop", home / "src" / "garden"
    (shop / ".git").mkdir(parents=True)
    (shop / "lib").mkdir()
    garden.mkdir()
    (garden / ".git").write_text("gitdir: /elsewhere/.git/worktrees/garden\n")
    memory = Memory(settings, env, shop, garden, {})
    sessions = home / "sessions"
    ann, bob = {"CTXDB_CLAUDE_CODE_USER_ID": "ann"}, {"CTXDB_CLAUDE_CODE_USER_ID": "bob"}
    cwd = str(shop / "lib")
    memory.ctxdb(
        "import", "claude-code", str(moved(ANN_SHOP, sessions / "a" / ANN_SHOP.name, cwd)), **ann
    )
    memory.ctxdb("import", "claude-code", str(ANN_ELSEWHERE), **ann)
    rollout = moved(CODEX, sessions / "codex" / CODEX.name, str(garden))
    memory.ctxdb("capture", "codex", "import", str(rollout), "--settle-s", "0", **ann)
    memory.ctxdb(
        "import", "claude-code", str(moved(BOB_SHOP, sessions / "b" / BOB_SHOP.name, cwd)), **bob
    )
    memory.ctxdb("jobs", "run", "memory_job")
    for user in ("ann", "bob"):
        issued = memory.ctxdb("tokens", "issue", "--user", user, "--tenant", "local")
        memory.tokens[user] = issued.stdout.strip().splitlines()[-1]
    yield memory
    with make_client(settings) as client:
        delete_prefix_indices(client, prefix)


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_every_imported_turn_carries_its_project(memory: Memory) -> None:
    logs = memory.logs()
    projects: dict[tuple[str, str], set[str | None]] = {}
    for user, conversation, project in logs.select("user_id", "conversation_id", "project").rows():
        projects.setdefault((user, conversation), set()).add(project)
    assert projects[("ann", ANN_SHOP.stem)] == {str(memory.shop)}  # the git root of shop/lib
    assert projects[("bob", BOB_SHOP.stem)] == {str(memory.shop)}
    assert projects[("ann", ANN_ELSEWHERE.stem)] == {"/workspace"}  # not here: as given
    assert projects[("ann", CODEX_SESSION)] == {str(memory.garden)}  # a worktree's root
    rows = DeltaStore(memory.settings.delta_uri).read(ROLE_ROWS)
    joined = rows.join(logs, on=["conversation_id", "turn_id"], suffix="_log")
    assert joined.height == rows.height and (joined["project"] == joined["project_log"]).all()


def _conversations(memory: Memory, user: str, *args: str) -> set[str]:
    done = memory.ctxdb("search", *args, "--top-k", "50", "--json", "--token", memory.tokens[user])
    return {hit["conversation_id"] for hit in json.loads(done.stdout)["hits"]}


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_search_by_project_returns_that_projects_turns_only(memory: Memory) -> None:
    window = ("", "--window", "2000-01-01T00:00:00Z..")
    everything = _conversations(memory, "ann", *window)
    assert everything == {ANN_SHOP.stem, ANN_ELSEWHERE.stem, CODEX_SESSION}
    shop = _conversations(memory, "ann", *window, "--project", str(memory.shop))
    assert shop == {ANN_SHOP.stem}  # never Bob's session in the same folder
    assert _conversations(memory, "bob", *window, "--project", str(memory.shop)) == {BOB_SHOP.stem}
    subfolder = _conversations(memory, "ann", *window, "--project", str(memory.shop / "lib"))
    assert subfolder == {ANN_SHOP.stem}  # a folder inside the repository names its root
    found = _conversations(memory, "ann", "phoenix server start", "--project", str(memory.shop))
    assert found == {ANN_SHOP.stem}
    assert _conversations(memory, "ann", "phoenix server start", "--project", "/workspace") <= {
        ANN_ELSEWHERE.stem
    }
    garden = _conversations(memory, "ann", *window, "--project", str(memory.garden))
    assert garden == {CODEX_SESSION}


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_the_context_pack_of_a_project_holds_its_sessions_only(memory: Memory) -> None:
    args = ("context", "--json", "--project", str(memory.shop / "lib"))
    ann = json.loads(memory.ctxdb(*args, "--token", memory.tokens["ann"]).stdout)
    refs = {item["ref"] for item in ann["items"] if item.get("ref")}
    assert any(ANN_SHOP.stem in ref for ref in refs)
    assert not any(BOB_SHOP.stem in ref or ANN_ELSEWHERE.stem in ref for ref in refs)
    assert ann["project"] == str(memory.shop)
    bob = json.loads(memory.ctxdb(*args, "--token", memory.tokens["bob"]).stdout)
    assert {BOB_SHOP.stem} == {
        ref.split(":")[-1].split(".")[0].removeprefix("conv_")
        for item in bob["items"]
        if (ref := item.get("ref"))
    }


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_the_pack_and_the_turn_list_show_what_the_person_typed(memory: Memory) -> None:
    """The real Codex VS Code rollout wraps each prompt in `# Context from my IDE setup:`: the
    pack's session, unfinished and recent-work lines and the conversation's turn list show the
    request typed under `## My request for Codex:`; a page of the list past its end still
    names the conversation (title and agent)."""
    args = ("context", "--json", "--project", str(memory.garden), "--token", memory.tokens["ann"])
    pack = json.loads(memory.ctxdb(*args).stdout)
    lines = [item["text"] for item in pack["items"] if CODEX_SESSION in (item.get("ref") or "")]
    assert lines and all("IDE setup" not in line and "My request" not in line for line in lines)
    assert any("幫我檢查一下 go.mod" in line for line in lines)
    with make_client(memory.settings) as client:
        listed = SearchService(memory.settings, client).conversation_turns(ANN, CODEX_SESSION)
        past_the_end = SearchService(memory.settings, client).conversation_turns(
            ANN, CODEX_SESSION, offset=500
        )
    assert (past_the_end.title, past_the_end.agent, past_the_end.turns) == (
        listed.title,
        listed.agent,
        [],
    )  # a page past the end still names its conversation
    prompts = [turn.prompt for turn in listed.turns]
    assert prompts[0].startswith("幫我檢查一下 go.mod") and not any(
        "IDE setup" in p for p in prompts
    )


@pytest.mark.es
@pytest.mark.model
@pytest.mark.slow
def test_the_mcp_resource_of_a_folder_project_is_its_pack(memory: Memory) -> None:
    """`ctxdb://context/{+project}` with the absolute folder a coding host records (the MCP
    SDK's default policy refused it as an unknown resource): the pack `get_context` gives."""
    with make_client(memory.settings) as client:
        service = SearchService(memory.settings, client)
        tools = MemoryTools(
            memory.settings, service, Resolver(memory.settings, client), lambda: ANN
        )

        async def read() -> str:
            async with Client(build_server(tools)) as mcp:
                found = await mcp.read_resource(f"ctxdb://context/{memory.garden}")
            return found.contents[0].text  # type: ignore[union-attr]

        text = anyio.run(read)
        assert text == tools.get_context(project_or_agent=str(memory.garden)).content[0].text  # type: ignore[union-attr]
    assert CODEX_SESSION in text and text.startswith(
        f"# Memory from ctxdb: project {memory.garden}"
    )


# Existing memories: re-derivation fills the column


@pytest.mark.es
def test_derive_full_gives_an_existing_memory_the_column_and_fills_resumed_sessions(
    es_base_settings: Settings, tmp_path: Path
) -> None:
    """A memory derived before projects (its tables lack the column) and then a resumed session
    whose new turn carries a project: `ctxdb derive --full` writes the column, the resumed
    conversation's earlier turn takes its project, a conversation that never got one stays
    null."""
    from conftest_turn_record import Turn as Events
    from conftest_turn_record import write_jsonl
    from deltalake import write_deltalake

    prefix = f"t{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env |= {"CTXDB_HOME": str(tmp_path), "CTXDB_ELASTICSEARCH_INDEX_PREFIX": prefix}
    env["ELASTICSEARCH_URL"] = es_base_settings.elasticsearch.url
    landing, store = tmp_path / "landing", DeltaStore(str(tmp_path / "delta"))
    old = [Events("shop-1", "t1").basic(), Events("notes-1", "n1").basic()]
    write_jsonl(landing / "before.jsonl", [e for t in old for e in t.events])

    def ctxdb(*args: str) -> None:
        done = subprocess.run([CTXDB, *args], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]

    ctxdb("land")
    ctxdb("derive")
    for table in (TURN_LOGS, ROLE_ROWS):  # as a memory derived before the column existed
        frame = store.read(table).drop("project").to_arrow()
        write_deltalake(store.uri(table), frame, mode="overwrite", schema_mode="overwrite")
    assert "project" not in store.read(TURN_LOGS).columns
    resumed = Events("shop-1", "t2", start=old[0].ts + timedelta(hours=1))
    resumed.add("turn.started", {"project": "/home/ann/src/shop"})
    resumed.add("user.submission", {"text": "and the tax line?", "event_type": "prompt"})
    resumed.add("assistant.completion", {"text": "Same rounding."})
    resumed.add("turn.closed")
    write_jsonl(landing / "after.jsonl", resumed.events)
    ctxdb("land")
    ctxdb("derive", "--full")
    logs = store.read(TURN_LOGS).sort("turn_id")
    assert dict(zip(logs["turn_id"], logs["project"], strict=True)) == {
        "n1": None,
        "t1": "/home/ann/src/shop",
        "t2": "/home/ann/src/shop",
    }
    rows = store.read(ROLE_ROWS)
    assert set(rows.filter(pl.col("conversation_id") == "shop-1")["project"]) == {
        "/home/ann/src/shop"
    }
