"""The sample generator: realistic synthetic turn events for demos, tests and benchmarks.
In: a seed and sizes; out: JSONL event files (never imported by the runtime path).
"""
