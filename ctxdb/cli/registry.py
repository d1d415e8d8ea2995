"""Which module defines each top-level `ctxdb` command, and its one-line help, so that `ctxdb`
imports only the module of the command it runs and `ctxdb --help` imports none.

Each command module stays the home of its commands (options, docstrings); this table only names
them. tests/test_cli_startup.py imports every module and checks that the table lists exactly what
they register, in that order, with the first paragraph of each help as its line here.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    """A top-level command or group: the `ctxdb.cli` module registering it, its one-line help."""

    module: str
    help: str


COMMANDS: dict[str, Entry] = {
    "generate": Entry(
        "data",
        "Write deterministic sample events for all four adapters (some lines deliberately bad).",
    ),
    "land": Entry(
        "data",
        "Land pending JSONL files into raw_turn_events (bad lines into quarantined_events), under "
        "the writer lease. Files older than the landing cursor (the newest landed mtime less an "
        "hour) are taken as landed unless --full.",
    ),
    "derive": Entry(
        "data",
        "Derive TurnLogs, timelines, role rows, catalog and replay artifacts incrementally, under "
        "the writer lease.",
    ),
    "tables": Entry(
        "data",
        "Row count, Delta version and maintenance policy (writer, what the retention sweep "
        "removes by, state table or not) of every table in the registry.",
    ),
    "search": Entry(
        "search",
        "Hybrid conversation search (or a catalog lookup with --nth or a blank query and "
        "--window). `--knob weight_semantic=0` searches without the model.",
    ),
    "conversations": Entry(
        "search", "Your conversations, most recent activity first, with titles."
    ),
    "turn": Entry(
        "search",
        "Reconstruct one turn (messages, attachments, hosted files, citations) from its TurnLog.",
    ),
    "context": Entry(
        "context",
        "A compact digest of your memory for an agent: recent sessions, unfinished turns, recent "
        "work and related turns, each with its age and ref (--conversation reloads one).",
    ),
    "pull": Entry(
        "search",
        "Write the bytes behind a conv:fi: ref (default: its file name in the current directory).",
    ),
    "serve": Entry(
        "search",
        "Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs); the query model loads in "
        "the background from the start.",
    ),
    "mcp": Entry(
        "mcp_command", "Serve the memory tools over MCP on stdin/stdout, as the token's user."
    ),
    "erase": Entry(
        "ops",
        "Erase a user or a conversation of one tenant everywhere, then verify that nothing "
        "remains (older table versions included).",
    ),
    "compact": Entry(
        "ops", "OPTIMIZE every Delta table; exit 1 when small files stay above the bound."
    ),
    "sql": Entry(
        "sql",
        "Run SQL over the Delta tables (each table is a view named like the table), read-only.",
    ),
    "capture": Entry("capture", "Capture agents' turns as they happen."),
    "import": Entry("capture", "Backfill turns from agents' own transcripts."),
    "es": Entry("es", "Manage the embedded Elasticsearch node."),
    "index": Entry("index", "Search indices: status, verify and reindex."),
    "tokens": Entry(
        "search",
        "Issue, revoke and migrate bearer tokens (hashed; store: CTXDB_AUTH_TOKEN_STORE).",
    ),
    "retention": Entry("ops", "Retention sweeps."),
    "jobs": Entry("ops", "Launch Dagster jobs of the ctxdb code location."),
}
"""Every top-level command, in the order `ctxdb --help` lists them."""
