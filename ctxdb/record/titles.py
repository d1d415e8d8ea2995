"""Conversation titles made from prompts, when the host sent no `conversation.title`.

A raw first prompt makes a poor title: hosts wrap it in context the person never typed
(`<ide_opened_file>…</ide_opened_file>`, `<system-reminder>`, slash-command tags, Codex's IDE
setup before `## My request for Codex:`), prompt templates put the same header before every
prompt (spec-kit's `## User Input` / ```` ```text ```` / `You **MUST** consider the user
input…`), and markdown syntax reads as noise. A title here is the
first meaningful sentence of the first prompt: wrappers dropped (a slash command becomes its
arguments, else its name), a template's user-input section replaced by what the person typed, a
header the conversation's later prompts repeat skipped, markdown syntax removed, cut at a word
boundary. Pure functions over strings; `timelines.conversation_titles` calls
`title_from_prompts`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

TITLE_CHARS = 80
"""The longest title (cut at a word boundary)."""

_CONTEXT_TAGS = (
    r"ide_[a-z_]+|system-reminder|command-message|local-command-[a-z]+|"
    r"user-prompt-submit-hook|task-notification|environment_context|user_instructions"
)
_CONTEXT = re.compile(rf"<({_CONTEXT_TAGS})\b[^>]*>.*?</\1>", re.DOTALL)
_UNCLOSED_CONTEXT = re.compile(rf"<({_CONTEXT_TAGS})\b[^>]*>.*", re.DOTALL)
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_FRONT_MATTER = re.compile(r"\A(?:---\n.*?\n---|<meta>\n.*?\n</meta>)\n", re.DOTALL)
"""A prompt template's header: YAML front matter, or the `<meta>` block of cc-sdd's Codex
prompts (`description:`, `argument-hint:`, `arguments:`)."""
_USER_INPUT = re.compile(
    r"^\s*#{1,6}\s*User Input\s*\n+\s*(`{3,}|~{3,})[^\n]*\n(?P<input>.*?)\n?\s*\1[ \t]*\n?"
    r"(?:\s*You \*\*MUST\*\* consider the user input[^\n]*\n?)?",
    re.DOTALL | re.IGNORECASE,
)
_ARGUMENTS = re.compile(r"^\s*ARGUMENTS:[ \t]*(?P<input>\S[^\n]*)$", re.MULTILINE)
_IDE_REQUEST = re.compile(
    r"^\s*#{1,6}\s*My request for Codex:[ \t]*\n?(?P<input>.*)", re.MULTILINE | re.DOTALL
)
"""Codex's IDE extension puts `# Context from my IDE setup:` (active file, open tabs) before
what the person typed, under this heading."""
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}#{1,6}(\s|$)")
_TAG_LINE = re.compile(r"^\s*</?[A-Za-z][\w:.-]*>\s*$")
"""A line that is only a markup tag (`<instructions>`, `</background_information>`): a
template's structure, not words."""
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_MARKERS = [
    (re.compile(r"^\s{0,3}#{1,6}\s*"), ""),  # heading
    (re.compile(r"^\s*(>\s*)+"), ""),  # quote
    (re.compile(r"^\s*([-*+]|\d{1,9}[.)])\s+"), ""),  # list item
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # link or image: its text
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # bold
    (re.compile(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])"), r"\1"),  # italic
    (re.compile(r"(?<!\w)_(?=\S)([^_]+?)(?<=\S)_(?!\w)"), r"\1"),  # italic
    (re.compile(r"`+"), ""),  # inline code
    (re.compile(r"\s*\|\s*"), " "),  # table cells
]
_HEADING_MARK = "\x00"
"""Marks a candidate line that was a heading: used for a title only when no prose line is left."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=[。！？])")
_MIN_SENTENCE = 12
"""A first sentence shorter than this ("Hi.", "OK!") keeps the rest of its line."""


def _unwrapped(prompt: str) -> str:
    """The prompt without host context wrappers; a slash command as its arguments or name."""
    command = _COMMAND_NAME.search(prompt)
    if command:
        args = _COMMAND_ARGS.search(prompt)
        return (args.group(1).strip() if args else "") or command.group(1)
    text = _UNCLOSED_CONTEXT.sub("", _CONTEXT.sub("", prompt))
    return _FRONT_MATTER.sub("", text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\n"))


def _template_input(text: str) -> str:
    """A template's user-input section replaced by what was typed in it (removed when empty)."""
    request = _IDE_REQUEST.search(text)
    if request and request.group("input").strip():
        return request.group("input")
    match = _USER_INPUT.search(text)
    if match:
        typed = match.group("input").strip()
        return typed if typed else text[match.end() :]
    arguments = _ARGUMENTS.search(text)
    return arguments.group("input") if arguments else text


def plain_line(line: str) -> str:
    """One line of markdown as plain words (markers, emphasis, code ticks and link syntax gone)."""
    for pattern, replacement in _MARKERS:
        line = pattern.sub(replacement, line)
    return " ".join(line.split())


def _candidate_lines(text: str) -> list[str]:
    """The lines of `text` that can make a title: fence markers, rules and lone tags out; each
    line plain."""
    out = []
    for raw in text.split("\n"):
        if _FENCE.match(raw) or _TABLE_RULE.match(raw) or _RULE.match(raw) or _TAG_LINE.match(raw):
            continue
        heading = bool(_HEADING.match(raw))
        line = plain_line(raw)
        if any(ch.isalnum() for ch in line):
            out.append((_HEADING_MARK if heading else "") + line)
    return out


def _first_sentence(line: str) -> str:
    parts = _SENTENCE_END.split(line, maxsplit=1)
    return parts[0] if len(parts[0]) >= _MIN_SENTENCE else line


def _cut(text: str) -> str:
    """`text` within TITLE_CHARS, cut at the last word boundary when it is longer."""
    if len(text) <= TITLE_CHARS:
        return text
    cut = text[:TITLE_CHARS]
    space = cut.rfind(" ")
    return cut[:space] if space > TITLE_CHARS // 3 else cut


def _shared_header(lines: list[str], others: Sequence[list[str]]) -> int:
    """How many leading lines of `lines` another prompt of the conversation begins with too
    (the longest such run), when something is left after them; else 0."""
    best = 0
    for other in others:
        n = 0
        while n < min(len(lines), len(other)) and lines[n] == other[n]:
            n += 1
        best = max(best, n)
    return best if best < len(lines) else 0


def clean_title(prompt: str, later: Sequence[str] = ()) -> str:
    """The title a prompt makes ("" when nothing in it is meaningful); a leading header that
    one of the `later` prompts of the same conversation repeats is skipped."""
    lines = _candidate_lines(_template_input(_unwrapped(prompt)))
    others = [_candidate_lines(_template_input(_unwrapped(p))) for p in later]
    return _without_dangling(_cut(_lead(lines[_shared_header(lines, others) :])))


_OPENERS = "“‘「『([{«"
_TRAILING = " ,;:-"


def _without_dangling(title: str) -> str:
    """`title` without what opens text it no longer holds (`go away: "` when the quote went on
    to the next lines): trailing opening quotes and brackets, an unpaired `"`, then separators."""
    while title and (
        title[-1] in _OPENERS
        or (title[-1] == '"' and title.count('"') % 2)
        or title[-1] in _TRAILING
    ):
        title = title[:-1]
    return title


def _lead(lines: list[str]) -> str:
    """The first sentence of the first prose line (of the first heading when there is none)."""
    prose = [line for line in lines if not line.startswith(_HEADING_MARK)]
    chosen = prose[0] if prose else (lines[0].lstrip(_HEADING_MARK) if lines else "")
    return _first_sentence(chosen)


def lead_sentence(text: str) -> str:
    """What a markdown text says first, as plain words: its first prose line's first sentence
    outside code blocks (a heading, code or a rule is not what an answer concludes); the text's
    first line when it is all code."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return _lead(_candidate_lines("\n".join(_outside_fences(lines)))) or _lead(
        _candidate_lines("\n".join(lines))
    )


def _outside_fences(lines: list[str]) -> list[str]:
    """`lines` less fenced code blocks (an unclosed fence runs to the end)."""
    out, fenced = [], False
    for line in lines:
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def typed_text(prompt: str) -> str:
    """What the person typed in a prompt, as plain words on one line: host wrappers dropped (a
    slash command as its arguments or name), a template's user-input section as what was typed
    in it, markdown syntax removed; when no line holds a word, the unwrapped prompt's words as
    they are ("" when it was only wrappers)."""
    unwrapped = _unwrapped(prompt)
    lines = _candidate_lines(_template_input(unwrapped))
    return " ".join(line.lstrip(_HEADING_MARK) for line in lines) or " ".join(unwrapped.split())


def title_from_prompts(prompts: Sequence[str]) -> str | None:
    """The title of a conversation from its prompts in turn order: the first prompt's, else
    the next one that makes any, else the first prompt's words as they are (wrappers dropped);
    None when every prompt is empty or only wrappers."""
    for n, prompt in enumerate(prompts):
        title = clean_title(prompt, prompts[n + 1 :])
        if title:
            return title
    words = [" ".join(_unwrapped(p).split()) for p in prompts]
    return next((_cut(w) for w in words if w), None)
