"""`make run`: sample events in, the main Dagster job end to end, searchable memory out.

Writes the generator's sample into the landing location once (a re-run lands nothing new), runs
`memory_job` in process on the project's Dagster instance (so the run shows in the UI), prints the
row count of every Delta table and the index status, then searches as one of the sample users.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import polars as pl
import typer
from dagster import DagsterInstance

from assets.shards import all_shards_tags
from ctxdb.auth.authenticate import Authenticator, open_token_store
from ctxdb.auth.credentials import AuthError, Principal
from ctxdb.cli.search import render_response
from ctxdb.index.client import make_client
from ctxdb.index.status import all_status
from ctxdb.sample.generate import generate_events, write_sample
from ctxdb.search.models import SearchRequest
from ctxdb.search.service import SearchService, default_embedder
from ctxdb.settings import Settings, get_settings
from ctxdb.storage import tables
from ctxdb.storage.delta import DeltaStore
from pipelines.definitions import defs

SAMPLE_SEED = 7
DEMO_QUERIES = (
    "the spreadsheet trouble from last week",
    "InvalidFileException: openpyxl does not support the old .xls file format",
    "opnpyxl xls convertion",
)
DEMO_TABLES = (
    tables.RAW_TURN_EVENTS,
    tables.QUARANTINED_EVENTS,
    tables.TURN_LOGS,
    tables.CONVERSATION_TIMELINES,
    tables.ROLE_ROWS,
    tables.TURN_CATALOG,
    tables.REPLAY_ARTIFACTS,
    tables.EMBEDDINGS,
    tables.ROW_EMBEDDINGS,
)


def land_sample(settings: Settings, users: int = 4, conversations: int = 40) -> tuple[str, str]:
    """Write the sample once; returns the (tenant, user) with the most conversations (the demo
    principal)."""
    generated = generate_events(users=users, conversations=conversations, seed=SAMPLE_SEED)
    landing = Path(settings.landing_uri)
    if not any(landing.glob("events-*.jsonl*")):
        parts = write_sample(generated, landing, files_root=Path(settings.files))
        typer.echo(
            f"wrote {len(generated.events)} sample events in {len(parts)} files to {landing}"
        )
    else:
        typer.echo(f"sample already in {landing}; landing only what is new")
    owners = Counter(
        (e["tenant"], e["user_id"]) for e in generated.events if e["type"] == "turn.started"
    )
    return owners.most_common(1)[0][0]


def run_job() -> None:
    result = defs.resolve_job_def("memory_job").execute_in_process(
        instance=DagsterInstance.get(), tags=all_shards_tags()
    )
    if not result.success:
        raise SystemExit("memory_job failed; see the log above")


def print_tables(settings: Settings) -> None:
    store = DeltaStore.from_settings(settings)
    typer.echo("\nDelta tables (rows):")
    for name in DEMO_TABLES:
        dt = store.table(name)
        count = 0 if dt is None else store.scan(name).select(pl.len()).collect().item()
        typer.echo(f"  {name:<24} {count:>8}")


def print_index(settings: Settings) -> None:
    typer.echo("\nElasticsearch indices:")
    for row in all_status(make_client(settings), settings.elasticsearch.index_prefix):
        coverage = "-" if row.coverage_pct is None else f"{row.coverage_pct:.1f}%"
        typer.echo(
            f"  {row.alias:<20} {row.index or '-':<24} docs={row.docs:<7} vectors={coverage}"
        )


def demo_principal(settings: Settings, tenant: str, user_id: str) -> Principal:
    """Authenticate as the demo user with a token kept beside the token store (issued once)."""
    token_file = settings.tokens_path.with_name(f"demo-{user_id}.token")
    if token_file.exists():
        try:
            return Authenticator(settings, make_client).authenticate(token_file.read_text().strip())
        except AuthError:
            pass
    token = open_token_store(settings, make_client).issue(user_id, tenant=tenant, label="make run")
    token_file.write_text(token)
    typer.echo(f"issued a search token for {user_id} in {token_file}")
    return Authenticator(settings, make_client).authenticate(token)


def search_demo(settings: Settings, tenant: str, user_id: str) -> None:
    principal = demo_principal(settings, tenant, user_id)
    client = make_client(settings)
    service = SearchService(settings, client, default_embedder(settings, client))
    for query in DEMO_QUERIES:
        typer.echo(f"\n$ ctxdb search {query!r}   (as {principal.user_id})")
        response = service.search(principal, SearchRequest(query=query, top_k=3))
        typer.echo(render_response(response))


def main() -> None:
    # ctxdb's INFO progress reaches the console through the Dagster run (dagster.yaml manages the
    # `ctxdb` logger); this handler prints warnings only, so no progress line shows twice.
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[console])
    settings = get_settings()
    tenant, user_id = land_sample(settings)
    run_job()
    print_tables(settings)
    print_index(settings)
    search_demo(settings, tenant, user_id)


if __name__ == "__main__":
    main()
