"""The context hooks: the context pack of a session's project when it starts (Claude Code and
Gemini CLI `SessionStart`), and the strong hits for each prompt (Claude Code
`UserPromptSubmit`), in time or not at all.

`ctxdb capture claude-code install` adds them when `CTXDB_CLAUDE_CODE_CONTEXT` (SessionStart,
matcher `startup|resume|clear|compact`) or `CTXDB_CLAUDE_CODE_LOOKUP` (UserPromptSubmit) is true;
`ctxdb capture gemini install` adds Gemini CLI's (SessionStart, and BeforeAgent for the
lookup); uninstall removes them with
the other ctxdb hooks. The host runs

    ctxdb capture claude-code context --token-file F --config hook.json --budget N --timeout S
                                      [--url URL]

(`ctxdb capture gemini context` for Gemini CLI) with the memory's settings in its environment.
The hook reads the payload on stdin (within its time bound: up to the end of stdin or of the JSON
object, so a host that keeps stdin open is answered all the same); its `hook_event_name` says
what to answer:

* `SessionStart`: the pack of the payload `cwd`'s project (Claude Code: `project_of`, the value
  capture records, turns recorded before projects counting by the folder's agent id; Gemini CLI:
  the folder's project hash, the `agent` its turns are recorded under);
* `UserPromptSubmit` (Gemini CLI: `BeforeAgent`): only the earlier turns of that project that
  match the payload's `prompt` above the relevance floor (the pack's `related` section; nothing
  when none is strong).

It runs as the user of the token file (the capture user's token, the one the MCP server runs
as) and prints `{"hookSpecificOutput": {"hookEventName": E, "additionalContext": "<text>"}}`
within the hosts' 10,000-character limit, or `{}` when there is nothing to tell.

Fast start: with `--url` (`CTXDB_CLAUDE_CODE_CONTEXT_URL`) the hook asks that running
`ctxdb serve` (`GET /v1/context`) and imports nothing but the standard library; when nothing
answers there, or without `--url`, it builds the answer itself (Delta for the pack; Delta,
Elasticsearch and the query embedder for the lookup). The answer is made in a forked child
process (POSIX): when it is not done within `--timeout` seconds of the process start, or fails
(memory unreachable, bad token), the hook kills it, prints `{}` and exits 0 at once (on Linux
the seconds count from the process's start, the interpreter's start-up included): a slow or
failing memory never delays the session or the prompt past the bound. Only the standard library
is imported at module level.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ctxdb.contract.identity import Principal
    from ctxdb.settings import Settings


def _process_age() -> float:
    """Seconds since this process started (Linux `/proc`: the interpreter's own start-up
    counts against the bound); 0 where `/proc` does not say."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            ticks = int(stat.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as uptime:
            since_boot = float(uptime.read().split()[0])
        return max(0.0, since_boot - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


_STARTED = time.monotonic() - _process_age()
START, PROMPT = "SessionStart", "UserPromptSubmit"
MATCHER = "startup|resume|clear|compact"
"""Claude Code's SessionStart sources the pack is given for (Gemini CLI's hook has none)."""
MAX_CHARS = 9_500
"""Characters of the text (the hosts cut `additionalContext` past 10,000; the rest is JSON)."""
PROMPT_CHARS = 2_000
"""The lookup searches with the prompt's first characters (a pack query's longest)."""
PROMPT_EVENTS = {"claude-code": PROMPT, "gemini": "BeforeAgent"}
"""Each host's event for a submitted prompt (the payload's `prompt`), answered by the lookup."""


class ServiceDown(RuntimeError):
    """Nothing answered at `--url`: the hook builds the answer itself."""


def hook_command(settings: Settings, host: str, event: str) -> str:
    """The shell command of a context hook: this installation's ctxdb, the memory's environment,
    the capture user's token file (issued if needed), the hook config, and the budget and time
    bound of `event` (SessionStart or UserPromptSubmit)."""
    from ctxdb.capture.claude_code.install import config_path
    from ctxdb.capture.claude_code.mcp_config import ctxdb_command, ensure_token, server_entry

    token = ensure_token(settings)
    entry = server_entry(settings, token)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in entry["env"].items())
    config = settings.claude_code
    budget, timeout = (
        (config.context_budget, config.context_timeout_s)
        if event == START
        else (config.lookup_budget, config.lookup_timeout_s)
    )
    args = [*ctxdb_command(), "capture", host, "context"]
    args += ["--token-file", str(token), "--config", str(config_path(settings))]
    args += ["--budget", str(budget), "--timeout", str(timeout)]
    if config.context_url:
        args += ["--url", config.context_url]
    return f"env {env} " + " ".join(shlex.quote(a) for a in args)


def add(settings: Settings, project: Path | None, user: bool) -> list[str]:
    """Add the context hooks the settings turn on to the chosen Claude Code settings file (after
    `install`, which removed any earlier ones); the events added."""
    from ctxdb.capture.claude_code.install import (
        HOOK_TIMEOUT_S,
        InstallError,
        read_settings,
        settings_file,
        write_settings,
    )

    config = settings.claude_code
    wanted = [e for e, on in ((START, config.context), (PROMPT, config.lookup)) if on]
    if not wanted:
        return []
    target = settings_file(project, user)
    data = read_settings(target)
    hooks = data.get("hooks") or {}
    for event in wanted:
        if not isinstance(hooks, dict) or not isinstance(hooks.get(event, []), list):
            raise InstallError(f"{target}: settings 'hooks.{event}' is not a list; left unchanged")
    hooks = dict(hooks)
    for event in wanted:
        entry = {
            "type": "command",
            "command": hook_command(settings, "claude-code", event),
            "timeout": HOOK_TIMEOUT_S,
        }
        group: dict[str, Any] = {"hooks": [entry]}
        if event == START:
            group = {"matcher": MATCHER, **group}
        hooks[event] = [*hooks.get(event, []), group]
    write_settings(target, {**data, "hooks": hooks})
    return wanted


def request_params(payload: dict[str, Any], host: str, budget: int) -> dict[str, Any] | None:
    """The `GET /v1/context` parameters that answer `payload` (None: nothing to ask, as for a
    UserPromptSubmit without a prompt or another event)."""
    from ctxdb.contract.projects import agent_for_project, project_of

    given = payload.get("cwd")
    cwd = given if isinstance(given, str) else os.getcwd()
    if host == "gemini":
        from ctxdb.capture.gemini.session import project_hash

        project = project_hash(cwd)
    else:
        project = project_of(cwd) or agent_for_project(cwd)
    params: dict[str, Any] = {"project": project, "budget": budget, "max_chars": MAX_CHARS}
    event = payload.get("hook_event_name", START)
    if event == PROMPT_EVENTS[host]:
        prompt = payload.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return None
        return {**params, "query": prompt[:PROMPT_CHARS], "sections": "related"}
    return params if event == START else None


def excluded(config_file: str | None, cwd: Any) -> bool:
    """Whether `cwd` is a project opted out of capture (`CTXDB_CLAUDE_CODE_EXCLUDE`, kept in the
    hook config install wrote; from the settings when there is none)."""
    from ctxdb.capture.claude_code.config import HookConfig

    if config_file and Path(config_file).is_file():
        config = HookConfig.load(Path(config_file))
    else:
        from ctxdb.capture.claude_code.install import hook_config
        from ctxdb.settings import get_settings

        config = hook_config(get_settings())
    return config.excludes(cwd if isinstance(cwd, str) else os.getcwd())


def from_service(url: str, token: str, params: dict[str, Any], timeout: float) -> str:
    """The pack text `ctxdb serve` at `url` answers ("" when it names no turn); ServiceDown
    when nothing answers there."""
    import urllib.error  # here: http.client and email are 20 ms of a start without `--url`
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode(params)
    request = urllib.request.Request(
        f"{url.rstrip('/')}/v1/context?{query}", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=max(0.01, timeout)) as answer:
            pack = json.load(answer)
    except urllib.error.HTTPError:
        raise  # the server answered: a bad token or request is no reason to ask again
    except (OSError, ValueError) as exc:
        raise ServiceDown(f"{url}: {exc}") from exc
    return pack["text"] if any(item.get("ref") for item in pack.get("items", [])) else ""


def in_process(token: str, params: dict[str, Any]) -> str:
    """The same pack built here: a SessionStart's from the project's current snapshot when
    there is one (`ctxdb.pack.snapshot`; else its snapshot is written first and told), anything
    else from Delta (and the search service for a lookup)."""
    from ctxdb.auth.authenticate import Authenticator
    from ctxdb.settings import get_settings

    def connect(settings: Settings) -> Any:  # only a token store in Elasticsearch needs it
        from ctxdb.index.client import make_client

        return make_client(settings)

    settings = get_settings()
    principal = Authenticator(settings, connect).authenticate(token)
    if settings.packs_path is not None and not params.get("sections") and not params.get("query"):
        try:
            text = from_snapshot(settings, principal, params)
        except OSError as exc:  # snapshots not writable here: the pack is built as before
            sys.stderr.write(f"ctxdb context: pack snapshot not used ({exc})\n")
            text = None
        if text is not None:
            return text
    return built(settings, principal, params, connect)


def from_snapshot(settings: Settings, principal: Principal, params: dict[str, Any]) -> str | None:
    """A project's pack from its snapshot, written here first when it is missing or stale;
    None when the memory changed meanwhile (the pack is then built from Delta)."""
    from datetime import UTC, datetime

    from ctxdb.pack.snapshot import told

    assert settings.packs_path is not None
    owner = (principal.tenant, principal.user_id, params["project"])
    delta_root = Path(settings.delta_uri)
    budget, max_chars = params["budget"], params.get("max_chars")
    text = told(settings.packs_path, delta_root, owner, budget, max_chars, datetime.now(UTC))
    if text is not None:
        return text
    from ctxdb.pack.refresh import snapshot_project
    from ctxdb.storage.delta import DeltaStore

    now = datetime.now(UTC)
    snapshot_project(settings, DeltaStore.from_settings(settings), principal, owner[2], now)
    return told(settings.packs_path, delta_root, owner, budget, max_chars, now)


def built(
    settings: Settings, principal: Principal, params: dict[str, Any], connect: Callable[..., Any]
) -> str:
    """The pack of `params` built from Delta ("" when it names no turn)."""
    from datetime import UTC, datetime

    from ctxdb.pack.build import build_pack
    from ctxdb.pack.models import ContextRequest
    from ctxdb.storage.delta import DeltaStore

    sections = params.get("sections")
    request = ContextRequest(**{**params, "sections": [sections] if sections else None})
    search = None
    if request.query:
        from ctxdb.search.service import SearchService, default_embedder

        client = connect(settings)
        search = SearchService(settings, client, default_embedder(settings, client)).search
    store = DeltaStore.from_settings(settings)
    pack = build_pack(principal, request, datetime.now(UTC), store, search)
    return pack.text if any(item.ref for item in pack.items) else ""


def answer_text(payload: dict[str, Any], args: argparse.Namespace, host: str) -> str:
    """What the hook tells the host ("" for nothing): see the module doc."""
    params = request_params(payload, host, args.budget)
    if params is None or excluded(args.config, payload.get("cwd")):
        return ""  # an opted-out project is neither captured nor told its memory
    token = Path(args.token_file).read_text().strip()
    if args.url:
        try:
            return from_service(args.url, token, params, args.timeout - _elapsed())
        except ServiceDown as exc:
            sys.stderr.write(f"ctxdb context: {exc}; building the answer here\n")
    return in_process(token, params)


def _elapsed() -> float:
    return time.monotonic() - _STARTED


def _arguments(argv: list[str], host: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"ctxdb capture {host} context")
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--timeout", type=float, default=1.5)
    parser.add_argument("--url", default=None)
    return parser.parse_args(argv)


def _read_within(stdin: TextIO, seconds: float) -> str:
    """What `stdin` holds, read until it ends or holds a whole JSON object; "" when that is not
    so within `seconds` (a host that keeps stdin open never holds the hook past its bound)."""
    try:
        fd = stdin.fileno()
    except (OSError, ValueError):  # not a file (io.UnsupportedOperation is an OSError)
        return stdin.read()
    deadline = time.monotonic() + seconds
    data = b""
    while select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return data.decode(stdin.encoding or "utf-8")
        data += chunk
        if data.rstrip().endswith(b"}") and _whole_object(data):
            return data.decode(stdin.encoding or "utf-8")
    return ""


def _whole_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except ValueError:
        return False


def _payload(stdin: TextIO, seconds: float) -> dict[str, Any]:
    """The payload on stdin, read within `seconds` ({} when it is not a JSON object)."""
    try:
        payload = json.loads(_read_within(stdin, seconds) or "{}")
    except ValueError:  # not JSON, or not text (UnicodeDecodeError)
        return {}
    return payload if isinstance(payload, dict) else {}


def within(seconds: float, work: Callable[[], str]) -> str:
    """`work()` run in a forked child, or "" when it is not done within `seconds` (the child is
    then killed) or fails (its error one line on stderr). A child, not a thread: an import
    holding the GIL cannot hold the answer past the bound, and the late work is really gone."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its answer goes to the pipe only (stdout stays the parent's)
        os.close(read_end)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            found = {"text": work()}
        except Exception as exc:  # noqa: BLE001 - the session must go on whatever memory does
            found = {"error": f"{type(exc).__name__}: {exc}"}
        with open(write_end, "wb") as pipe:
            pipe.write(json.dumps(found).encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + seconds
    chunks: list[bytes] = []
    with open(read_end, "rb", buffering=0) as pipe:
        while select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)  # late: the answer is left behind, the child with it
    os.waitpid(pid, 0)
    try:
        found = json.loads(b"".join(chunks))
    except ValueError:
        return ""
    if "error" in found:
        sys.stderr.write(f"ctxdb context: {found['error']}\n")
    return str(found.get("text", ""))


def run(
    argv: list[str],
    stdin: TextIO = sys.stdin,
    stdout: IO[str] = sys.stdout,
    host: str = "claude-code",
) -> int:
    """Answer one hook payload (see the module doc); always exit 0 once arguments parse."""
    args = _arguments(argv, host)
    payload = _payload(stdin, args.timeout - _elapsed())
    text = within(args.timeout - _elapsed(), lambda: answer_text(payload, args, host))
    event = payload.get("hook_event_name", START)
    answer = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    stdout.write(json.dumps(answer if text else {}) + "\n")
    stdout.flush()
    return 0
