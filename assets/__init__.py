"""Dagster assets of the data path: each Delta table, the embeddings and the search index, with
their asset checks; the work itself is ctxdb's, an asset only wires it to Dagster.
In: landed JSONL files, the upstream tables and the resources (Delta, Elasticsearch, embedder);
out: materialized tables and indices, with row counts, metadata and check results.
"""
