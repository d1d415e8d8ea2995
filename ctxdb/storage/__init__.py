"""Delta access and the table catalog: the Arrow schemas, reads, appends and MERGEs, file paths.
In: Arrow/polars frames to write; out: scans and frames of every ctxdb table (no domain logic).
"""
