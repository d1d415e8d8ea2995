"""Claude Code capture: hooks that record each turn live, and an importer of old transcripts.
In: hook payloads (JSON on stdin) and transcripts (`~/.claude/projects/<project>/<session>.jsonl`);
out: contract events in JSONL files under the landing location (docs/capture.md).

The hook's modules (hook, config, transcript, turns, and capture's `part_files`)
use the standard library only, so a hook process starts fast; install and the CLI load the
settings.
"""
