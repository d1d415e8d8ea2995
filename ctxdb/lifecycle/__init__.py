"""Operations that change stored memory: retention sweeps, erasure, purges, compaction, reindex.
In: the Delta tables and the indices; out: the same, shrunk or rebuilt, plus their report tables.
"""
