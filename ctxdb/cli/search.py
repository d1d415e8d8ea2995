"""`ctxdb search|conversations|turn|pull|serve` and `ctxdb tokens issue|revoke|migrate`.

The CLI runs as the principal of a bearer token (`--token` or CTXDB_TOKEN), never as a user id
given on the command line. Output is human-readable, or JSON with `--json`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ctxdb.auth.authenticate import Authenticator, open_token_store
from ctxdb.auth.credentials import (
    AuthError,
    Principal,
    TokenStore,
    TokenStoreUnavailable,
)
from ctxdb.cli.app import app
from ctxdb.contract.projects import resolve_project
from ctxdb.contract.refs import RefError
from ctxdb.errors import SearchUnavailable, describe
from ctxdb.search.models import (
    DAYS_MAX,
    NO_ANSWER,
    MissingQuery,
    NotFound,
    SearchRequest,
    SearchResponse,
    TurnView,
    message_kind,
    status_marker,
)
from ctxdb.settings import Settings, get_settings
from ctxdb.settings.search import knob_names

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

    from ctxdb.search.service import SearchService

T = TypeVar("T")

tokens_app = typer.Typer(
    help="Issue, revoke and migrate bearer tokens (hashed; store: CTXDB_AUTH_TOKEN_STORE)."
)
app.add_typer(tokens_app, name="tokens")

TokenOpt = Annotated[
    str | None, typer.Option("--token", help="Bearer token (default: CTXDB_TOKEN).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", help="Only this project's turns: a folder (its git root counts)."),
]
QueryArg = Annotated[str, typer.Argument(help="What to look for (blank with --window).")]
TargetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--target", "-t", help="Repeatable; default user, assistant, summary, attachment, steps."
    ),
]
NthOpt = Annotated[
    str | None,
    typer.Option("--nth", help="Catalog: the n-th turn of --conversation: first, last, n or -n."),
]
WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--window",
        help=f"Nd: the last N days (1..{DAYS_MAX}); SINCE..UNTIL (ISO times, either may be"
        " left out): that span; default all time.",
    ),
]
KnobOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--knob",
        help="Repeatable NAME=VALUE: a ranking knob for this search (docs/search-api.md,"
        f" Knobs): {', '.join(knob_names())}.",
    ),
]
ExplainOpt = Annotated[bool, typer.Option("--explain", help="Per-arm ranks and contributions.")]


def _connect(settings: Settings) -> Elasticsearch:
    """The Elasticsearch client, imported only when a command needs one: a token command on the
    file store loads no client package."""
    from ctxdb.index.client import make_client

    return make_client(settings)


def _principal(settings: Settings, token: str | None) -> Principal:
    token = token or (settings.token.get_secret_value() if settings.token else None)
    try:
        return Authenticator(settings, _connect).authenticate(token)
    except AuthError as exc:
        typer.echo(f"error: {exc} (pass --token or set CTXDB_TOKEN)", err=True)
        raise typer.Exit(1) from exc
    except TokenStoreUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from exc


def _run(action: Callable[[], T]) -> T:
    """Run `action`; known failures become one line on stderr and a non-zero exit status."""
    try:
        return action()
    except MissingQuery as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (NotFound, RefError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except SearchUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(3) from exc


def _service(settings: Settings, semantic: bool = True) -> SearchService:
    """The search service (imported here: the client and the embedding stack are not light)."""
    from ctxdb.index.client import make_client
    from ctxdb.search.service import SearchService, default_embedder

    client = make_client(settings)
    embedder = default_embedder(settings, client) if semantic else None
    return SearchService(settings, client, embedder)


def render_response(response: SearchResponse) -> str:
    """Human-readable hits: identity, score, matched targets, snippets, explain, warnings."""
    lines = [f"{response.mode}: {len(response.hits)} hit(s) for {response.query!r}"]
    for i, hit in enumerate(response.hits, start=1):
        score = f"{hit.score:.5f}" if hit.score is not None else "-"
        when = hit.ts.strftime("%Y-%m-%d %H:%M") if hit.ts else "?"
        title = f" {hit.title!r}" if hit.title else ""
        matched = f" [{','.join(hit.matched_targets)}]" if hit.matched_targets else ""
        ordinal = f" #{hit.ordinal}" if hit.ordinal is not None else ""
        lines.append(
            f"{i}. {hit.conversation_id}/{hit.turn_id}{ordinal}{title} {when} "
            f"score={score}{matched}{' (weak match)' if hit.weak else ''}"
            + status_marker(hit.status, hit.error_type)
        )
        for snippet in hit.snippets:
            lines.append(f"     {snippet.target}: {snippet.text}")
        if hit.explain:
            e = hit.explain
            arms = " ".join(
                f"{arm}=r{x.rank}:{x.contribution:.5f}" if x.rank else f"{arm}=-"
                for arm, x in e.arms.items()
            )
            lines.append(
                f"     explain: {arms} rrf={e.rrf:.5f} age={e.age_days:.1f}d "
                f"recency={e.recency:.3f}"
                + (f" in_window={e.in_window}" if e.in_window is not None else "")
                + f" brevity={e.brevity:.3f} final={e.final:.5f}"
                + (f" answers={e.answers_turn}" if e.answers_turn else "")
            )
    lines += [f"warning: {w}" for w in response.warnings]
    return "\n".join(lines)


def _step_status(status: str | None) -> str:
    """A step's status after its text, unless it went as planned."""
    return f" [{status}]" if status and status not in ("ok", "complete") else ""


def render_turn(view: TurnView) -> str:
    """The text of `ctxdb turn`: heading (with the status marker), messages, steps, files."""
    heading = f"{view.conversation_id}/{view.turn_id} #{view.ordinal} {view.title or ''}".rstrip()
    lines = [heading + status_marker(view.status, view.error_type)]
    lines += [f"  {m.role}{message_kind(m.event_type)}: {m.text}" for m in view.messages]
    if view.status == "cancelled" and not any(m.role == "assistant" for m in view.messages):
        lines.append(f"  {NO_ANSWER}")
    lines += [f"  step: {s.tool or s.kind}: {s.text}{_step_status(s.status)}" for s in view.steps]
    lines += [f"  attachment: {a.filename} {a.ref or a.path}" for a in view.attachments]
    lines += [f"  file: {f.filename} {f.ref or f.path}" for f in view.files]
    lines += [f"  citation: {json.dumps(c)}" for c in view.citations]
    if view.summary:
        lines.append(f"  summary: {view.summary}")
    return "\n".join(lines)


def _shown(response: SearchResponse, as_json: bool) -> str:
    """What `ctxdb search` prints: the response as JSON, or as text."""
    if as_json:
        return response.model_dump_json(indent=2, exclude_none=True)
    return render_response(response)


def _search_request(fields: dict[str, Any]) -> SearchRequest:
    """The request of `ctxdb search`, the model checking the CLI's strings (targets, knobs,
    times) against its types; a bad one is an `error:` line and exit status 2."""
    try:
        return SearchRequest.model_validate(fields)
    except ValueError as exc:
        typer.echo(f"error: {describe(exc)}", err=True)
        raise typer.Exit(2) from exc


def _pairs(option: str, items: list[str]) -> dict[str, str]:
    """`NAME=VALUE` items as {name: value} (the model converts the values)."""
    pairs: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            typer.echo(f"error: {option} takes NAME=VALUE, not {item!r}", err=True)
            raise typer.Exit(2)
        pairs[name.strip()] = value.strip()
    return pairs


def _window(window: str | None) -> dict[str, str | int | None]:
    """`--window` as request fields: `Nd` -> days; `SINCE..UNTIL` -> since and until (either
    may be blank); none -> all time."""
    if not window:
        return {}
    if window.endswith("d") and window[:-1].isdigit():
        return {"days": int(window[:-1])}
    since, sep, until = window.partition("..")
    if not sep:
        typer.echo(
            f"error: --window takes Nd (the last N days) or SINCE..UNTIL, not {window!r}", err=True
        )
        raise typer.Exit(2)
    return {"since": since or None, "until": until or None}


def _ordinal(nth: str | None) -> str | None:
    """`--nth` as a request ordinal: first -> 1, last -> -1, else the number as given."""
    return {"first": "1", "last": "-1"}.get(nth or "", nth)


@app.command()
def search(
    query: QueryArg = "",
    target: TargetOpt = None,
    conversation: Annotated[
        str | None, typer.Option("--conversation", "-c", help="Search inside it.")
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent's turns.")] = None,
    project: ProjectOpt = None,
    window: WindowOpt = None,
    nth: NthOpt = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k")] = 5,
    knob: KnobOpt = None,
    explain: ExplainOpt = False,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hybrid conversation search (or a catalog lookup with --nth or a blank query and
    --window). `--knob weight_semantic=0` searches without the model."""
    settings = get_settings()
    caller = _principal(settings, token)
    request = _search_request(
        dict(
            query=query,
            scope="conversation" if conversation else "agent" if agent else "user",
            targets=list(target) if target else SearchRequest().targets,
            conversation_id=conversation,
            agent=agent,
            project=resolve_project(project) if project else None,
            ordinal=_ordinal(nth),
            top_k=top_k,
            knobs=_pairs("--knob", knob or []),
            explain=explain,
            **_window(window),
        )
    )
    semantic = request.ranking_knobs(settings.search.knobs).weight_semantic > 0
    response = _run(lambda: _service(settings, semantic).search(caller, request))
    typer.echo(_shown(response, as_json))


@app.command()
def conversations(
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    offset: Annotated[int, typer.Option(min=0, max=9_999, help="Skip the newest N.")] = 0,
    agent: Annotated[str | None, typer.Option()] = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Your conversations, most recent activity first, with titles."""
    settings = get_settings()
    caller = _principal(settings, token)
    listing = _run(
        lambda: _service(settings, False).conversations(
            caller, limit=limit, offset=offset, agent=agent
        )
    )
    if as_json:
        typer.echo(listing.model_dump_json(indent=2))
        return
    for c in listing.conversations:
        when = c.last_activity_at.strftime("%Y-%m-%d %H:%M") if c.last_activity_at else "?"
        typer.echo(f"{when}  {c.conversation_id}  {c.turns} turn(s)  {c.title or ''}")
    if listing.next_offset is not None:
        typer.echo(f"(more: --offset {listing.next_offset})")


@app.command()
def turn(
    conversation_id: str,
    turn_id: str,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reconstruct one turn (messages, attachments, hosted files, citations) from its TurnLog."""
    settings = get_settings()
    caller = _principal(settings, token)
    view = _run(lambda: _service(settings, False).turn(caller, conversation_id, turn_id))
    typer.echo(view.model_dump_json(indent=2) if as_json else render_turn(view))


@app.command()
def pull(
    ref: Annotated[str, typer.Argument(help="conv:fi:conv_<id>.turn_<id>.<path>")],
    conversation: Annotated[
        str | None, typer.Option("--conversation", "-c", help="Owner of a short ref.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="File to write; '-' for stdout.")
    ] = None,
    token: TokenOpt = None,
) -> None:
    """Write the bytes behind a conv:fi: ref (default: its file name in the current directory)."""
    from ctxdb.index.client import make_client
    from ctxdb.serve.resolve import Resolver

    settings = get_settings()
    caller = _principal(settings, token)
    pulled = _run(lambda: Resolver(settings, make_client(settings)).pull(caller, ref, conversation))
    if out is not None and str(out) == "-":
        sys.stdout.buffer.write(pulled.data)
        return
    target = out or Path(pulled.filename)
    target.write_bytes(pulled.data)
    typer.echo(f"wrote {pulled.size} bytes to {target} ({pulled.mime})")


@app.command()
def serve(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8080,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs); the query model loads in
    the background from the start."""
    import uvicorn

    from ctxdb.cli.dagster_env import prefix_warning
    from ctxdb.index.client import make_client
    from ctxdb.node.distribution import cache_root
    from ctxdb.search.service import WarmEmbedder, default_embedder
    from ctxdb.serve.http import create_app

    settings = get_settings()
    warning = prefix_warning(settings, cache_root(settings) / "prefixes.json")
    if warning:
        typer.echo(warning, err=True)
    client = make_client(settings)
    embedder = WarmEmbedder(default_embedder(settings, client))
    app_ = create_app(settings, client, embedder)
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"ctxdb viewer: http://{shown}:{port}/  (API docs: http://{shown}:{port}/docs)")
    uvicorn.run(app_, host=host, port=port)


@tokens_app.command("issue")
def tokens_issue(
    user: Annotated[str, typer.Option("--user", help="User id the token acts as.")],
    tenant: Annotated[
        str | None,
        typer.Option(help="Tenant the token acts in (unless CTXDB_AUTH_REQUIRE_TENANT=false)."),
    ] = None,
    label: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Issue a bearer token for a user (and tenant); printed once, stored only as a salted hash."""
    settings = get_settings()
    if tenant is None and settings.auth.require_tenant:
        typer.echo("error: --tenant is required (CTXDB_AUTH_REQUIRE_TENANT is on)", err=True)
        raise typer.Exit(2)
    store = open_token_store(settings, _connect)
    typer.echo(_run(lambda: store.issue(user, tenant=tenant, label=label)))


@tokens_app.command("revoke")
def tokens_revoke(token_id: str) -> None:
    """Revoke a token by its id (the part after `ctxdb_`)."""
    store = open_token_store(get_settings(), _connect)
    if not _run(lambda: store.revoke(token_id)):
        typer.echo(f"error: no token {token_id!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {token_id}")


@tokens_app.command("migrate")
def tokens_migrate() -> None:
    """Copy every token of the local file (<home>/auth/tokens.json) into the shared Elasticsearch
    store (`<prefix>-tokens`), hashes only; tokens already there are kept, revocations carried
    over. Then set CTXDB_AUTH_TOKEN_STORE=elasticsearch on every server."""
    from ctxdb.auth.es_tokens import ElasticsearchTokenStore, migrate

    settings = get_settings()
    records = TokenStore(settings.tokens_path).tokens()
    store = ElasticsearchTokenStore.from_settings(settings, _connect(settings))
    copied, present = _run(lambda: migrate(records, store))
    typer.echo(
        f"copied {copied} token(s) from {settings.tokens_path} to {store.index}"
        f" ({present} already there)"
    )
