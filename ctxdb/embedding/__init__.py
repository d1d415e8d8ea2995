"""Embeddings of role rows with all-MiniLM-L6-v2 (offline), cached by (model, text hash).
In: `role_rows`; out: `embeddings` (the cache) and `role_row_embeddings` (per-row status).
"""
