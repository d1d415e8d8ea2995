"""Landing: JSONL/JSONL.gz files (local or object store) validated by a line scanner (native
or pure Python), in waves.
In: files under the landing root; out: `raw_turn_events`, `quarantined_events`, `landed_files`.
"""
