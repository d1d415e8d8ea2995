"""Codex CLI capture: an importer of its session rollouts (`~/.codex/sessions/.../rollout-*.jsonl`)
into contract events under the landing location (docs/capture.md#codex-cli)."""
