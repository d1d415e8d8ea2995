"""The faces of the memory: the HTTP API (`http`, behind `guards`), the MCP server and its tools
(`mcp_server`, `mcp_tools`, `mcp_output`), the `conv:fi:` ref resolver (`resolve`) and the viewer
page (`viewer`), each a thin layer over the search service, the catalog and the context pack; the
bearer token or JWT of every call is checked by `ctxdb.auth`.
In: requests with a bearer credential; out: JSON responses, MCP tool results and file bytes,
never outside the caller's identity.
"""
