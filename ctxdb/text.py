"""Text features computed by the pipeline (and identically at query time): hashes, trigrams, stems.

The embedded Elasticsearch distribution has no ngram tokenizer or stemmer filters (they live in the
analysis-common module it lacks), so both are computed here and indexed into whitespace-analyzed
fields. Written by hand because no library produces pg_trgm-style padded word trigrams.
"""

from __future__ import annotations

import hashlib
import re
import threading

import snowballstemmer

_WORD = re.compile(r"\w+", re.UNICODE)
_CHARS_PER_WORD = 16  # a prefix this many characters per word wanted holds them, most often
# Scripts written without spaces between words (Thai, kana, CJK ideographs): there each character
# counts as a word, so a sentence in them is not taken for one long word.
_UNSPACED = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_COUNTED = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+")
MIN_WORD_LEN = 3
# English function words: dropped from the text arms' queries (they share trigrams with every
# text and match near-random rows) and from the indexed `stems` field.
STOPWORDS = frozenset(
    "a about after all an and any are as at be been before but by can did do does for from had has"
    " have how i if in into is it its me my no not of on or our so such than that the their then"
    " there these they this to was we were what when where which who why will with you your".split()
)
# Control characters other than tab and newlines (Python re and polars' Rust regex alike).
CONTROL_CHARS = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
_CONTROL = re.compile(CONTROL_CHARS)


def clean_text(text: str) -> str:
    """Drop lone surrogates and control characters other than tab and newlines."""
    return _CONTROL.sub(" ", text.encode("utf-8", "replace").decode("utf-8"))


def text_hash(text: str) -> str:
    """Stable content hash (the embedding cache key together with the model id)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def words(text: str) -> list[str]:
    """Lower-cased word tokens (split on non-word characters), as pg_trgm does."""
    return [w.lower() for w in _WORD.findall(text)]


def word_trigrams(word: str) -> list[str]:
    """Padded character trigrams of one word: 'abc' -> ['_ab', 'abc', 'bc_']."""
    padded = f"_{word}_"
    return [padded[i : i + 3] for i in range(len(padded) - 2)]


def trigrams(text: str) -> str:
    """Unique padded trigrams of every word of at least 3 characters, space-separated."""
    seen: dict[str, None] = {}
    for word in words(text):
        if len(word) >= MIN_WORD_LEN:
            for gram in word_trigrams(word):
                seen.setdefault(gram, None)
    return " ".join(seen)


_LOCAL = threading.local()


def _stemmer() -> snowballstemmer.stemmer:
    """This thread's English stemmer: snowballstemmer runs PyStemmer's C build of the same
    Snowball algorithms when it is installed (a dependency: 15x faster, the same stems), and a
    PyStemmer object must not be shared between threads."""
    stemmer = getattr(_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = _LOCAL.stemmer = snowballstemmer.stemmer("english")
    return stemmer


def content_words(text: str, enough: int) -> int:
    """How many distinct words of `text` are not stopwords, counted up to `enough` (a character
    of a script written without spaces counts as a word). A prefix, cut at a space, is read
    first and most texts reach `enough` within it (search counts this for every candidate
    row)."""
    prefix = text[: enough * _CHARS_PER_WORD]
    if len(prefix) < len(text):
        prefix = prefix[: max(0, prefix.rfind(" "))]
    found = _distinct_content(prefix)
    if found < enough and len(prefix) < len(text):
        found = _distinct_content(text)
    return min(found, enough)


def _distinct_content(text: str) -> int:
    return len({w.lower() for w in _COUNTED.findall(text)} - STOPWORDS)


def stems(text: str) -> str:
    """English Snowball stems of the words of `text` but its stopwords, space-separated (the
    `stems` field, and the query matched on it)."""
    return " ".join(_stemmer().stemWords([w for w in words(text) if w not in STOPWORDS]))
