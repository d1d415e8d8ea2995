"""Elasticsearch: client, mappings, health, versioned indices, documents, bulk writes, sync.
In: derived rows and their embeddings; out: the `-rows` and `-turns` indices behind aliases.
"""
