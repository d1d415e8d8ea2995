"""Does the context pack bring back what a returning session goes back to? (issue 45 eval target)

Real multi-session transcripts (tests/data/pack_eval/<project>/, SOURCE.md there: sessions of one
project each, never used for other fixtures) are imported one session at a time, in the order they
started, into a fresh memory through real `ctxdb` processes: `ctxdb import <host> FILE`, then
memory_job's steps as the CLI runs them (`ctxdb land`, `ctxdb derive`, `ctxdb index sync`;
Dagster's start per run would take minutes per session). Before each later session starts,
`ctxdb context --project P --json --token T` builds the pack the SessionStart hook would give it
(P the session's project: the git root of its `cwd`, else the `cwd`; a Gemini CLI session's
projectHash), twice: with the default budget and no query, and with the session's first prompt as
`--query` (what the UserPromptSubmit lookup sees).

tests/data/pack_eval/labels.jsonl says, per later session, which earlier turns it went back to (a
file, an error, a decision, named by the earlier session and the start of its prompt), labelled
by reading the transcripts before any pack was built. A session is a hit when its pack names one
of its labelled turns by ref (`conv:turn:...`); `turn-or-session` also counts the labelled turn's
conversation ref (`conv:conversation:...`, the pack's "Recent sessions" lines). Sessions without a
label (nothing earlier was gone back to) are counted apart, never as hits.

Run (the node up, `ctxdb es start`; about 30 s per session on 2 cores; `--save FILE` keeps the
packs, `--load FILE` scores kept ones again):

    ELASTICSEARCH_URL=http://127.0.0.1:9200 nice -n 10 .venv/bin/python bench/pack_eval.py
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import typer
from elasticsearch import Elasticsearch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_sessions  # noqa: E402

from ctxdb.contract.projects import project_of  # noqa: E402
from ctxdb.settings import Settings  # noqa: E402
from ctxdb.storage.delta import DeltaStore  # noqa: E402
from ctxdb.storage.tables import TURN_CATALOG, TURN_LOGS  # noqa: E402

EVAL = real_sessions.DATA / "pack_eval"
LABELS = EVAL / "labels.jsonl"
VARIANTS = ("default", "query")
PROMPT_CHARS = 2000
"""The most of a first prompt passed as `--query` (ContextRequest.query's limit)."""
PIPELINE = [["land"], ["derive"], ["index", "sync"]]
"""What memory_job runs (land, derive, embed and sync the indices), as the three CLI commands:
the same steps without Dagster's per-run start, which dominates a one-session import."""
SKIP_PREFIXES = ("<local-command", "<command-", "Caveat:", "<task-notification>")


@dataclass(frozen=True)
class Session:
    """One session file of a project: its host, id, start, project and first prompt."""

    path: Path
    host: str
    session_id: str
    started: str
    project: str
    first_prompt: str


def _claude_session(path: Path) -> Session:
    """A Claude Code transcript: its `sessionId`, first timestamp, `cwd` and first prompt."""
    session_id = started = cwd = prompt = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        session_id = session_id or record.get("sessionId", "")
        started = started or record.get("timestamp", "")
        cwd = cwd or record.get("cwd", "")
        if not prompt and record.get("type") == "user" and not record.get("isMeta"):
            prompt = _prompt_text(record.get("message", {}).get("content"))
    return Session(path, "claude-code", session_id, started, project_of(cwd) or cwd, prompt)


def _prompt_text(content: Any) -> str:
    """A user line's typed text ("" for tool results, local commands and notices)."""
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    text = content.strip() if isinstance(content, str) else ""
    return "" if text.startswith(SKIP_PREFIXES) else text


def _gemini_session(path: Path) -> Session:
    """A Gemini CLI session document: its `sessionId`, `startTime`, projectHash, first prompt."""
    data = json.loads(path.read_text(encoding="utf-8"))
    prompts = [
        _prompt_text(m.get("content")) for m in data.get("messages", []) if m.get("type") == "user"
    ]
    prompt = next((p for p in prompts if p), "")
    return Session(
        path, "gemini", data["sessionId"], data["startTime"], data["projectHash"], prompt
    )


def sessions(project_dir: Path) -> list[Session]:
    """A project's sessions in the order they started."""
    found = [_claude_session(p) for p in project_dir.glob("*.jsonl")]
    found += [_gemini_session(p) for p in project_dir.glob("session-*.json")]
    return sorted(found, key=lambda s: (s.started, s.session_id))


def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    """The labels, one JSON object a line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pipeline(session: Session, env: dict[str, str], cwd: Path) -> None:
    """Import one session file and run the memory's pipeline over it."""
    steps = [["import", session.host, str(session.path), "--settle-s", "0"]]
    for args in [*steps, *PIPELINE]:
        step = real_sessions.run(args, env, cwd)
        if step.returncode != 0:
            raise RuntimeError(f"ctxdb {' '.join(args)} failed:\n{step.output[-3000:]}")


def _pack(session: Session, query: str, env: dict[str, str], cwd: Path, token: str) -> dict:
    """`ctxdb context --project P --json` (with `--query` when given), as the token's user."""
    args = ["context", "--project", session.project, "--json", "--token", token]
    if query:
        args += ["--query", query[:PROMPT_CHARS]]
    step = real_sessions.run(args, env, cwd)
    if step.returncode != 0:
        raise RuntimeError(f"ctxdb context failed:\n{step.output[-3000:]}")
    return json.loads(step.output[step.output.index("{") :])


def turns_of(home: Path) -> pl.DataFrame:
    """Every turn in the memory at `home`: conversation id, turn id and first prompt."""
    store = DeltaStore(Settings(home=home).delta_uri)
    keys = ["conversation_id", "turn_id"]
    logs = store.read(TURN_LOGS).select(keys).unique()
    catalog = store.read(TURN_CATALOG).select([*keys, "first_user_text"]).unique(keys)
    return logs.join(catalog, on=keys, how="left")


def _flat(text: str | None) -> str:
    return " ".join((text or "").split())


def resolve(label: dict[str, Any], turns: pl.DataFrame) -> tuple[str, str] | None:
    """The (conversation id, turn id) a label names: the turn of the earlier session whose
    first prompt starts with the label's `prompt`; None when no turn or several do."""
    prefix = _flat(label["prompt"])
    found = [
        (row["conversation_id"], row["turn_id"])
        for row in turns.iter_rows(named=True)
        if label["earlier_session"] in row["conversation_id"]
        and _flat(row["first_user_text"]).startswith(prefix)
    ]
    return found[0] if len(found) == 1 else None


def turn_ref(conversation_id: str, turn_id: str) -> str:
    return f"conv:turn:conv_{conversation_id}.{turn_id}"


@dataclass
class Outcome:
    """One later session's packs (by variant) and the turns its labels resolve to."""

    project: str
    session_id: str
    packs: dict[str, dict[str, Any]]
    labelled: list[tuple[str, str]]

    def hit(self, variant: str, loose: bool) -> bool:
        """Whether the variant's pack names a labelled turn (`loose`: or its conversation)."""
        refs = {item.get("ref") for item in self.packs[variant]["items"]}
        for conversation_id, turn_id in self.labelled:
            if turn_ref(conversation_id, turn_id) in refs:
                return True
            if loose and f"conv:conversation:{conversation_id}" in refs:
                return True
        return False


def _token(env: dict[str, str], cwd: Path) -> str:
    step = real_sessions.run(
        ["tokens", "issue", "--user", getpass.getuser(), "--tenant", "local"], env, cwd
    )
    if step.returncode != 0:
        raise RuntimeError(f"ctxdb tokens issue failed:\n{step.output[-2000:]}")
    return step.output.strip().splitlines()[-1]


def run_project(
    project_dir: Path, es_url: str, work: Path, limit: int | None = None
) -> dict[str, Any]:
    """Import the project's sessions (its first `limit`) one by one into a fresh memory and
    build each later session's two packs before it: {"project", "packs": [{session_id, default,
    query}], "turns": [{conversation_id, turn_id, first_user_text}]} (every turn imported). The
    memory's indices are dropped at the end."""
    home, cwd = work / project_dir.name / "home", work / project_dir.name / "cwd"
    cwd.mkdir(parents=True)
    prefix = f"pe-{uuid.uuid4().hex[:8]}"
    env = real_sessions.environment(home, prefix, es_url)
    token = _token(env, cwd)
    packs = []
    ordered = sessions(project_dir)[:limit]
    for k, session in enumerate(ordered):
        if k > 0:
            packs.append(
                {
                    "session_id": session.session_id,
                    "default": _pack(session, "", env, cwd, token),
                    "query": _pack(session, session.first_prompt, env, cwd, token),
                }
            )
        if k < len(ordered) - 1:
            _pipeline(session, env, cwd)
    turns = turns_of(home).to_dicts()
    with Elasticsearch(es_url) as client:
        names = list(client.indices.get(index=f"{prefix}-*", expand_wildcards="all"))
        if names:
            client.indices.delete(index=",".join(names))
    return {"project": project_dir.name, "packs": packs, "turns": turns}


def outcomes(runs: list[dict[str, Any]], labels: list[dict[str, Any]]) -> list[Outcome]:
    """Each later session's packs with the turns its labels resolve to."""
    out = []
    for run in runs:
        turns = pl.DataFrame(run["turns"])
        for pack in run["packs"]:
            mine = [lab for lab in labels if lab["session"] == pack["session_id"]]
            resolved = [resolve(lab, turns) for lab in mine]
            out.append(
                Outcome(
                    run["project"],
                    pack["session_id"],
                    {v: pack[v] for v in VARIANTS},
                    [r for r in resolved if r is not None],
                )
            )
    return out


def report(found: Iterable[Outcome]) -> list[str]:
    """Per project and in total: labelled sessions, hits per variant (strict and loose)."""
    rows: dict[str, list[Outcome]] = {}
    for outcome in found:
        rows.setdefault(outcome.project, []).append(outcome)
    rows["TOTAL"] = [o for group in list(rows.values()) for o in group]
    head = " | ".join(f"{v}: turn | {v}: turn or session" for v in VARIANTS)
    lines = [f"project | later sessions | labelled | {head}"]
    for project, group in rows.items():
        labelled = [o for o in group if o.labelled]
        cells = []
        for variant in VARIANTS:
            for loose in (False, True):
                hits = sum(o.hit(variant, loose) for o in labelled)
                share = f"{hits / len(labelled):.0%}" if labelled else "-"
                cells.append(f"{hits}/{len(labelled)} ({share})")
        lines.append(f"{project} | {len(group)} | {len(labelled)} | " + " | ".join(cells))
    return lines


def main(argv: list[str]) -> None:
    """`pack_eval.py [--save FILE | --load FILE]`: run (and keep the packs) or score kept ones."""
    if argv[:1] == ["--load"]:
        runs = json.loads(Path(argv[1]).read_text())
    else:
        es_url = os.environ.get("ELASTICSEARCH_URL", "http://127.0.0.1:9200")
        with tempfile.TemporaryDirectory(prefix="pack-eval-") as tmp:
            runs = [
                run_project(p, es_url, Path(tmp))
                for p in sorted(p for p in EVAL.iterdir() if p.is_dir())
            ]
        if argv[:1] == ["--save"]:
            Path(argv[1]).write_text(json.dumps(runs, default=str))
    found = outcomes(runs, load_labels())
    for outcome in found:
        marks = {v: "hit" if outcome.hit(v, False) else "miss" for v in VARIANTS}
        typer.echo(
            f"{outcome.project} {outcome.session_id[:8]}: {marks if outcome.labelled else '-'}"
        )
    typer.echo("\n".join(report(found)))


if __name__ == "__main__":
    main(sys.argv[1:])
