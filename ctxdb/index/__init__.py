"""Elasticsearch index lifecycle, document building, bulk writes, incremental sync and reindex."""
