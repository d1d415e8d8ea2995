"""`ctxdb capture claude-code hook|install|uninstall|project` and `ctxdb import claude-code`.
Install also registers the `ctxdb mcp` server (`.mcp.json`, see capture/claude_code/mcp_config.py).

`ctxdb capture claude-code hook` is also served by a fast path in `ctxdb.cli.main` that skips
loading the other commands (a hook runs once per Claude Code event and must start fast).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from ctxdb.capture.claude_code.config import HookConfig
from ctxdb.capture.claude_code.importer import (
    SETTLE_S,
    ImportStats,
    Mapped,
    find_transcripts,
    import_transcripts,
)
from ctxdb.capture.claude_code.install import (
    InstallError,
    config_path,
    hook_config,
    install,
    uninstall,
)
from ctxdb.capture.claude_code.turns import Identity, agent_for_project
from ctxdb.capture.codex import importer as codex
from ctxdb.capture.gemini import importer as gemini
from ctxdb.capture.gemini.session import project_hash
from ctxdb.capture.hosts import import_sessions
from ctxdb.cli import hooks
from ctxdb.cli.app import app
from ctxdb.settings import Settings, get_settings

capture_app = typer.Typer(help="Capture agents' turns as they happen.", no_args_is_help=True)
app.add_typer(capture_app, name="capture")
claude_app = typer.Typer(
    help="Claude Code: hooks that record every turn of every session.", no_args_is_help=True
)
capture_app.add_typer(claude_app, name="claude-code")
import_app = typer.Typer(help="Backfill turns from agents' own transcripts.", no_args_is_help=True)
app.add_typer(import_app, name="import")

ProjectOption = Annotated[
    Path | None,
    typer.Option("--project", help="Project folder: edits DIR/.claude/settings.local.json."),
]
T = TypeVar("T")
UserOption = Annotated[
    bool, typer.Option("--user", help="Every project: edits ~/.claude/settings.json.")
]


def _where(project: Path | None, user: bool) -> tuple[Path | None, bool]:
    if project is not None and user:
        typer.echo("error: give --project DIR or --user, not both", err=True)
        raise typer.Exit(2)
    return project, user


def _refused(call: Callable[[], T]) -> T:
    """`call()`; an InstallError it raises (nothing was changed) is one line on stderr, exit 2."""
    try:
        return call()
    except InstallError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@claude_app.command("hook")
def hook_command(
    config: Annotated[
        Path | None, typer.Option("--config", help="Hook config written by install.")
    ] = None,
) -> None:
    """Read one Claude Code hook payload on stdin and record it (always exits 0, prints nothing)."""
    raise typer.Exit(hooks.claude_code(["--config", str(config)] if config else []))


TokenFileOption = Annotated[Path, typer.Option("--token-file", help="The capture user's token.")]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Hook config written by install (opt-outs).")
]
UrlOption = Annotated[
    str | None, typer.Option("--url", help="A running `ctxdb serve` to ask first.")
]


def _context_args(
    token_file: Path, config: Path | None, budget: int, timeout: float, url: str | None
) -> list[str]:
    args = ["--token-file", str(token_file), "--budget", str(budget), "--timeout", str(timeout)]
    args += ["--config", str(config)] if config else []
    return args + (["--url", url] if url else [])


@claude_app.command("context")
def context_hook_command(
    token_file: TokenFileOption,
    config: ConfigOption = None,
    budget: Annotated[int, typer.Option(help="Most tokens the answer holds.")] = 1500,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 1.5,
    url: UrlOption = None,
) -> None:
    """SessionStart / UserPromptSubmit hook: print the project's context pack, or the prompt's
    strong hits, for Claude Code ({} when late)."""
    raise typer.Exit(
        hooks.claude_code_context(_context_args(token_file, config, budget, timeout, url))
    )


@claude_app.command("install")
def install_command(project: ProjectOption = None, user: UserOption = False) -> None:
    """Add the capture hooks to Claude Code's settings (idempotent, keeps other settings)."""
    from ctxdb.capture.claude_code import mcp_config  # token store and search: install only

    project, user = _where(project, user)
    settings = get_settings()
    change = _refused(lambda: install(settings, project, user))
    config = hook_config(settings)
    state = "added to" if change.changed else "already in"
    typer.echo(f"ctxdb hooks {state} {change.path}")
    from ctxdb.capture.claude_code import context_hook

    added = _refused(lambda: context_hook.add(settings, project, user))
    if context_hook.START in added:
        typer.echo(f"SessionStart context pack hook added ({context_hook.MATCHER})")
    if context_hook.PROMPT in added:
        typer.echo("UserPromptSubmit lookup hook added (strong hits for each prompt)")
        if not settings.claude_code.context_url:
            typer.echo(
                "note: without CTXDB_CLAUDE_CODE_CONTEXT_URL (a running `ctxdb serve`) each"
                " lookup loads the search stack in a cold process and often reaches its"
                f" {settings.claude_code.lookup_timeout_s:g} s bound with nothing to add;"
                " run `ctxdb serve` and set the URL",
                err=True,
            )
    typer.echo(f"turns are recorded as user {config.user_id!r} (tenant {config.tenant!r})")
    typer.echo(f"events: {config.spool}; hook config: {config_path(settings)}")
    if user:
        typer.echo(
            "MCP server (search your memory), for every project: "
            f"{mcp_config.add_command(settings)}"
        )
        return
    server = _refused(lambda: mcp_config.register(settings, project))
    state = "added to" if server.changed else "already in"
    typer.echo(f"ctxdb MCP server {state} {server.path} (runs as {config.user_id!r})")


@claude_app.command("uninstall")
def uninstall_command(project: ProjectOption = None, user: UserOption = False) -> None:
    """Remove exactly the ctxdb hooks from Claude Code's settings."""
    from ctxdb.capture.claude_code import mcp_config

    project, user = _where(project, user)
    change = _refused(lambda: uninstall(project, user))
    if change.changed:
        typer.echo(f"removed {change.entries} ctxdb hooks from {change.path}")
    else:
        typer.echo(f"no ctxdb hooks in {change.path}")
    if user:
        typer.echo("MCP server: `claude mcp remove --scope user ctxdb` removes it")
        return
    server = _refused(lambda: mcp_config.unregister(project))
    if server.changed:
        typer.echo(f"removed the ctxdb MCP server from {server.path}")


@claude_app.command("project")
def project_command(
    folder: Annotated[Path | None, typer.Argument(help="Project folder (default: here).")] = None,
) -> None:
    """Print the agent id a project's turns are recorded under (for `ctxdb search --agent`)."""
    typer.echo(agent_for_project(str((folder or Path.cwd()).absolute())))


@import_app.command("claude-code")
def import_claude_code(
    path: Annotated[
        Path | None,
        typer.Argument(help="A transcript or a folder of them (default: ~/.claude/projects)."),
    ] = None,
    settle_s: Annotated[
        float,
        typer.Option(help="A transcript untouched this many seconds is finished (last turn)."),
    ] = SETTLE_S,
) -> None:
    """Backfill Claude Code transcripts as landing files (re-imports add nothing new)."""
    source = path or Path.home() / ".claude" / "projects"
    if not source.exists():
        typer.echo(f"error: {source} does not exist", err=True)
        raise typer.Exit(2)
    settings = get_settings()
    config = _refused(lambda: hook_config(settings))
    spool_dir = Path(config.spool).parent
    transcripts = find_transcripts(source)
    total = sum(p.stat().st_size for p in transcripts)
    with typer.progressbar(length=total, label="importing", file=sys.stderr) as bar:
        stats = import_transcripts(
            transcripts,
            spool_dir,
            config.identity,
            settle_s=settle_s,
            excluded=config.excludes,
            progress=bar.update,
            output_chars=config.tool_output_chars,
            erased=_erased(settings),
        )
    typer.echo(
        f"{stats.files} transcripts, {stats.lines} lines ({stats.bad_lines} unreadable, "
        f"{stats.truncated} cut off), {stats.turns} turns, {stats.events} events; "
        f"{stats.written} files written, {stats.unchanged} unchanged under {spool_dir / 'import'}"
        + (f"; {stats.skipped} excluded" if stats.skipped else "")
        + _erased_note(stats)
    )
    _warn_late(stats, config.identity)
    for problem in stats.problems[:20]:
        typer.echo(f"  {problem}", err=True)
    if len(stats.problems) > 20:
        typer.echo(f"  ... and {len(stats.problems) - 20} more", err=True)


def _erased(settings: Settings) -> Callable[[str], bool]:
    """Whether a conversation was erased (`ctxdb erase`): its events are never imported again."""
    from ctxdb.storage.delta import DeltaStore
    from ctxdb.storage.tombstones import erased

    return erased(DeltaStore.from_settings(settings))


def _erased_note(stats: ImportStats) -> str:
    return f"; {stats.erased} events of erased conversations left out" if stats.erased else ""


def _warn_late(stats: ImportStats, identity: Identity) -> None:
    """Say how many imported turns are older than the retention period (kept that period from
    when they land, `ctxdb.record.expiry`), never silently."""
    import polars as pl

    from ctxdb.record.expiry import late_history

    now = datetime.now(UTC)
    turns = pl.DataFrame(
        {"ts": [datetime.fromisoformat(t) for t in stats.ended]},
        schema={"ts": pl.Datetime("us", "UTC")},
    ).with_columns(tenant=pl.lit(identity.tenant), app=pl.lit(identity.app), landed_at=pl.lit(now))
    notice = late_history(turns, get_settings()).notice("imported")
    if notice:
        typer.echo(notice, err=True)


codex_app = typer.Typer(help="Codex CLI: import its session rollouts.", no_args_is_help=True)
capture_app.add_typer(codex_app, name="codex")
gemini_app = typer.Typer(help="Gemini CLI: import its chat sessions.", no_args_is_help=True)
capture_app.add_typer(gemini_app, name="gemini")
SettleOption = Annotated[
    float, typer.Option(help="A session untouched this many seconds is finished (last turn).")
]


def _host(adapter: str, app_name: str) -> tuple[Path, Identity, HookConfig]:
    """Where a host's events go (`<landing>/<adapter>`), whose they are, and the opt-outs."""
    return _refused(lambda: hooks.host_target(adapter, app_name))


def _import_host(
    source: Path,
    adapter: str,
    app_name: str,
    find: Callable[[Path], list[Path]],
    read: Callable[[Path, Identity, bool, Callable[[str], str]], Mapped],
    excluded: Callable[[HookConfig], Callable[[str | None], bool]],
    settle_s: float,
) -> None:
    """Import the session files `find` lists at `source` into `<landing>/<adapter>/import`."""
    spool_dir, identity, config = _host(adapter, app_name)
    if not source.exists():
        typer.echo(f"error: {source} does not exist", err=True)
        raise typer.Exit(2)
    files = find(source)
    total = sum(p.stat().st_size for p in files)
    with typer.progressbar(length=total, label="importing", file=sys.stderr) as bar:
        stats = import_sessions(
            files,
            spool_dir,
            identity,
            read,
            settle_s,
            excluded=excluded(config),
            progress=bar.update,
            erased=_erased(get_settings()),
        )
    typer.echo(
        f"{stats.files} sessions, {stats.lines} lines ({stats.bad_lines} unreadable, "
        f"{stats.truncated} cut off), {stats.turns} turns, {stats.events} events; "
        f"{stats.written} files written, {stats.unchanged} unchanged under {spool_dir / 'import'}"
        + (f"; {stats.skipped} excluded" if stats.skipped else "")
        + (f"; {stats.failed} failed" if stats.failed else "")
        + _erased_note(stats)
    )
    _warn_late(stats, identity)
    for problem in stats.problems[:20]:
        typer.echo(f"  {problem}", err=True)


@import_app.command("codex")
@codex_app.command("import")
def import_codex(
    path: Annotated[
        Path | None,
        typer.Argument(help="A rollout or a folder of them (default: ~/.codex/sessions)."),
    ] = None,
    settle_s: SettleOption = SETTLE_S,
) -> None:
    """Backfill Codex CLI rollouts as landing files (re-imports add nothing new)."""
    source = (path or codex.SESSIONS).expanduser()
    _import_host(
        source,
        codex.ADAPTER,
        "codex",
        codex.find_rollouts,
        codex.rollout_events,
        lambda config: config.excludes,
        settle_s,
    )


def _gemini_excluded(config: HookConfig) -> Callable[[str | None], bool]:
    """Gemini sessions name their project by hash: the hashes of the excluded folders."""
    hashes = {project_hash(folder) for folder in config.exclude}
    return lambda digest: digest in hashes


@import_app.command("gemini")
@gemini_app.command("import")
def import_gemini(
    path: Annotated[
        Path | None,
        typer.Argument(help="A session file or a folder of them (default: ~/.gemini/tmp)."),
    ] = None,
    settle_s: SettleOption = SETTLE_S,
) -> None:
    """Backfill Gemini CLI chat sessions as landing files (re-imports add nothing new)."""
    source = (path or gemini.SESSIONS).expanduser()
    _import_host(
        source,
        gemini.ADAPTER,
        hooks.GEMINI_APP,
        gemini.find_sessions,
        gemini.session_events,
        _gemini_excluded,
        settle_s,
    )


@gemini_app.command("hook")
def gemini_hook_command(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="Hook config written by claude-code install (skips the settings)."
        ),
    ] = None,
) -> None:
    """Run from Gemini CLI's AfterAgent / SessionEnd hooks: import the payload's session."""
    raise typer.Exit(hooks.gemini(["--config", str(config)] if config else []))


@gemini_app.command("install")
def gemini_install_command(project: ProjectOption = None, user: UserOption = False) -> None:
    """Add ctxdb's hooks to Gemini CLI's settings: capture (AfterAgent, SessionEnd) and, with
    CTXDB_CLAUDE_CODE_CONTEXT, the SessionStart context pack."""
    from ctxdb.capture.gemini import install as gemini_install

    project, user = _where(project, user)
    settings = get_settings()
    change = _refused(lambda: gemini_install.install(settings, project, user))
    state = "added to" if change.changed else "already in"
    typer.echo(f"ctxdb Gemini CLI hooks ({change.entries} events) {state} {change.path}")


@gemini_app.command("uninstall")
def gemini_uninstall_command(project: ProjectOption = None, user: UserOption = False) -> None:
    """Remove exactly ctxdb's hooks from Gemini CLI's settings."""
    from ctxdb.capture.gemini import install as gemini_install

    project, user = _where(project, user)
    change = _refused(lambda: gemini_install.uninstall(project, user))
    if change.changed:
        typer.echo(f"removed {change.entries} ctxdb hooks from {change.path}")
    else:
        typer.echo(f"no ctxdb hooks in {change.path}")


@gemini_app.command("context")
def gemini_context_command(
    token_file: TokenFileOption,
    config: ConfigOption = None,
    budget: Annotated[int, typer.Option(help="Most tokens the pack holds.")] = 1500,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the pack.")] = 1.5,
    url: UrlOption = None,
) -> None:
    """Gemini CLI SessionStart hook: print the project's context pack ({} when late)."""
    raise typer.Exit(hooks.gemini_context(_context_args(token_file, config, budget, timeout, url)))


@gemini_app.command("project")
def gemini_project_command(
    folder: Annotated[Path | None, typer.Argument(help="Project folder (default: here).")] = None,
) -> None:
    """Print the agent id a Gemini CLI project's turns are recorded under (its projectHash)."""
    typer.echo(project_hash(str((folder or Path.cwd()).absolute())))
