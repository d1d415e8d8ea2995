"""Dagster resources: typed wrappers that hand ctxdb's plain clients to assets."""
