"""The stems field and the query's stems come from PyStemmer's C build of Snowball (through
snowballstemmer): the same stems as the pure-Python Snowball that built earlier indices, on every
word of the real chats in bench/data, and the same from many threads at once."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import Stemmer
from snowballstemmer.english_stemmer import EnglishStemmer

from ctxdb.text import STOPWORDS, stems

DATA = Path(__file__).parent.parent / "bench" / "data"
SOURCES = ["chitchat/events.jsonl", "realistic/events.jsonl", "realtalk/events.jsonl"]


def chat_words() -> list[str]:
    words: set[str] = set()
    for name in SOURCES:
        path = DATA / name
        if path.exists():  # realtalk is built locally only
            words |= {w.lower() for w in re.findall(r"\w+", path.read_text(encoding="utf-8"))}
    return sorted(words - STOPWORDS)


def test_the_c_stemmer_is_the_one_in_use_and_agrees_with_pure_python() -> None:
    words = chat_words()
    assert len(words) > 5_000
    assert stems(" ".join(words)).split() == [EnglishStemmer().stemWord(w) for w in words]
    assert Stemmer.Stemmer("english").stemWords(["running"]) == ["run"]


def test_stems_are_the_same_from_many_threads() -> None:
    words = chat_words()
    texts = [" ".join(words[i : i + 40]) for i in range(0, len(words), 40)]
    expected = [stems(text) for text in texts]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            assert list(pool.map(stems, texts)) == expected
