"""The context pack: a compact, factual digest of a principal's memory for a returning agent.
In: a Principal, a ContextRequest (conversation, project or the whole user; a token budget; an
optional query) and `now`; out: a ContextPack (markdown text and its items, each with its age and
`conv:` ref), within the budget by construction, read from Delta inside the principal's identity.

`build_pack` (ctxdb/pack/build.py) is the one function behind `ctxdb context`, `GET /v1/context`,
the MCP tool `get_context` and the Claude Code `SessionStart` hook (docs/context-pack.md).
"""
