"""Acceptance eval over the real public sessions (issue 40): questions a user asks about past
sessions (bench/real_sessions_questions.jsonl, each labelled by reading the sessions with the
conversation and turn that answer it), asked with every face's defaults over the memory the real
pipeline builds (bench/real_sessions.py: the README's import commands, land, derive,
memory_job):

* cli: `ctxdb search QUESTION --json --token T`;
* http: `POST /v1/search {"query": QUESTION}` on `ctxdb serve`, with the bearer token;
* mcp: the `search_conversations` tool through the MCP Python SDK's client, `ctxdb mcp` over
  stdio (`CTXDB_HOME`, `CTXDB_TOKEN` and the Elasticsearch URL in the server's environment);
* viewer: the body the viewer page sends by default (ctxdb/serve/static/viewer.js `runSearch`:
  top 20, the four default targets, no window) to the same endpoint, its first 5 hits read.

Prints, per face, how many questions have their labelled turn in the top 5 (out of N), and the
questions each face misses. Run (the node up, `ctxdb es start`):

    ELASTICSEARCH_URL=http://127.0.0.1:9200 .venv/bin/python bench/real_sessions_eval.py
"""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from mcp import Client, StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_sessions  # noqa: E402

QUESTIONS = Path(__file__).resolve().parent / "real_sessions_questions.jsonl"
TOP = 5
VIEWER_BODY = {
    "top_k": 20,
    "explain": False,
    "targets": ["user", "assistant", "attachment", "summary"],
}
"""What the viewer's search form sends besides the query when no filter is touched."""

Hit = tuple[str, str]
"""(conversation_id, turn_id)."""


def load_questions(path: Path) -> list[dict[str, Any]]:
    """The labelled questions, one JSON object a line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def hits_of(payload: dict[str, Any]) -> list[Hit]:
    """The first TOP hits of a search answer (the API's, the CLI's JSON or the MCP tool's)."""
    return [(h["conversation_id"], h["turn_id"]) for h in payload["hits"][:TOP]]


def cli_face(env: dict[str, str], token: str) -> Callable[[str], list[Hit]]:
    def ask(question: str) -> list[Hit]:
        step = real_sessions.run(["search", question, "--json", "--token", token], env, Path.cwd())
        if step.returncode != 0:
            raise RuntimeError(step.output[-2000:])
        return hits_of(json.loads(step.output[step.output.index("{") :]))

    return ask


def http_face(port: int, token: str, extra: dict[str, Any]) -> Callable[[str], list[Hit]]:
    def ask(question: str) -> list[Hit]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/search",
            data=json.dumps({"query": question, **extra}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as reply:
            return hits_of(json.load(reply))

    return ask


async def mcp_answers(env: dict[str, str], token: str, questions: list[str]) -> list[list[Hit]]:
    """Every question through `search_conversations` over one stdio session."""
    server = StdioServerParameters(
        command=str(real_sessions.CTXDB), args=["mcp"], env={**env, "CTXDB_TOKEN": token}
    )
    answers = []
    async with Client(stdio_client(server, errlog=subprocess.DEVNULL)) as memory:
        for question in questions:
            result = await memory.call_tool("search_conversations", {"query": question})
            if result.is_error:
                raise RuntimeError(result.content[0].text)
            answers.append(hits_of(result.structured_content))
    return answers


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serving(env: dict[str, str], port: int) -> subprocess.Popen:
    """`ctxdb serve` on `port`, once it answers."""
    server = subprocess.Popen(
        [str(real_sessions.CTXDB), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=5):
                return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("ctxdb serve did not answer within 180 s")


def score(questions: list[dict], answers: list[list[Hit]]) -> tuple[int, list[str]]:
    """Questions whose labelled turn is among their answer's first TOP hits, and the missed ids."""
    missed = [
        q["id"]
        for q, hits in zip(questions, answers, strict=True)
        if (q["conversation_id"], q["turn_id"]) not in hits
    ]
    return len(questions) - len(missed), missed


def main(
    home: Annotated[Path | None, typer.Option(help="ctxdb home (default: a new temp dir).")] = None,
    reuse: Annotated[bool, typer.Option(help="Search the memory already built in --home.")] = False,
    index_prefix: Annotated[str, typer.Option(help="Index prefix of that memory.")] = "realeval",
    es_url: Annotated[str, typer.Option(envvar="ELASTICSEARCH_URL")] = "http://127.0.0.1:9200",
    questions_file: Annotated[Path, typer.Option("--questions")] = QUESTIONS,
) -> None:
    """Build the memory (unless --reuse), then ask every question through every face."""
    home = home or Path(tempfile.mkdtemp(prefix="ctxdb-real-"))
    env = real_sessions.environment(home, index_prefix, es_url)
    if not reuse:
        for step in real_sessions.build(env, home):
            typer.echo(f"ctxdb {' '.join(step.args[:3])}: exit {step.returncode}", err=True)
            if step.returncode != 0:
                typer.echo(step.output[-3000:], err=True)
                raise typer.Exit(1)
    issued = real_sessions.run(
        ["tokens", "issue", "--user", getpass.getuser(), "--tenant", "local"], env, home
    )
    token = issued.output.strip().splitlines()[-1]
    questions = load_questions(questions_file)
    texts = [q["question"] for q in questions]
    port = free_port()
    server = serving(env, port)
    try:
        faces = {
            "cli": [cli_face(env, token)(t) for t in texts],
            "http": [http_face(port, token, {})(t) for t in texts],
            "mcp": anyio.run(mcp_answers, env, token, texts),
            "viewer": [http_face(port, token, VIEWER_BODY)(t) for t in texts],
        }
    finally:
        server.terminate()
        server.wait(60)
    typer.echo(f"\n| face | right turn in top {TOP} | missed |\n| --- | --- | --- |")
    for face, answers in faces.items():
        found, missed = score(questions, answers)
        typer.echo(f"| {face} | {found} of {len(questions)} | {', '.join(missed) or '-'} |")
    print_per_host(questions, faces)


def print_per_host(questions: list[dict], faces: dict[str, list[list[Hit]]]) -> None:
    """The same count per host whose session holds the answer (one column per host)."""
    hosts = sorted({q["host"] for q in questions})
    typer.echo(f"\n| face | {' | '.join(hosts)} |\n| --- |{' --- |' * len(hosts)}")
    for face, answers in faces.items():
        cells = []
        for host in hosts:
            pairs = [(q, a) for q, a in zip(questions, answers, strict=True) if q["host"] == host]
            found, _ = score([q for q, _ in pairs], [a for _, a in pairs])
            cells.append(f"{found} of {len(pairs)}")
        typer.echo(f"| {face} | {' | '.join(cells)} |")


if __name__ == "__main__":
    typer.run(main)
