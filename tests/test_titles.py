"""Conversation titles made from prompts (ctxdb/record/titles.py, issue 40 item 8), on the shapes
real sessions have: Claude Code's IDE and slash-command wrappers (a331468564/claude-codex-chat-
archives, d-kimuson/claude-code-viewer), spec-kit's prompt template as Codex expands it
(0h-n0/local-voice-assistant-codex; the header is spec-kit's, github/spec-kit, MIT), markdown, and
a conversation whose prompts share a header, and Codex's IDE extension's setup header (seen on 7 of
17 real VS Code rollouts by a probe: the open tab's name was the title)."""

from __future__ import annotations

import pytest

from ctxdb.record.titles import (
    TITLE_CHARS,
    clean_title,
    lead_sentence,
    title_from_prompts,
    typed_text,
)

IDE_OPENED = (
    "<ide_opened_file>The user opened the file e:\\AI\\TestProject-v2\\.claude\\hooks\\"
    "stop_check.py in the IDE. This may or may not be related to the current task."
    "</ide_opened_file>\n读取项目文件，说清楚目前计划"
)
COMMAND = (
    "<command-message>orchestrator is running…</command-message>\n"
    "<command-name>/orchestrator</command-name>\n"
    "<command-args>create TODO app by Next.js</command-args>"
)
CODEX_IDE = (  # the wrapper of Codex's VS Code extension (codex_vscode 0.104), as rollouts hold it
    "# Context from my IDE setup:\n\n## Active file: apps/api/app/api/opportunities/route.ts\n\n"
    "## Open tabs:\n- route.ts: apps/api/app/api/opportunities/route.ts\n"
    "- .env.local: apps/api/.env.local\n\n## My request for Codex:\n"
    'why are we adding lang: "en" here?\n'
)
SPECKIT_HEADER = (
    "\n## User Input\n\n```text\n{input}\n```\n\n"
    "You **MUST** consider the user input before proceeding (if not empty).\n\n## Outline\n\n"
)
CONSTITUTION = SPECKIT_HEADER.format(input="") + (
    "You are updating the project constitution at `.specify/memory/constitution.md`. This file "
    "is a TEMPLATE containing placeholder tokens in square brackets."
)
IMPLEMENT = SPECKIT_HEADER.format(input="") + (
    "1. **Setup**: Run `.specify/scripts/bash/check-prerequisites.sh --json` from repo root."
)
SPECIFY = SPECKIT_HEADER.format(input="Build a local voice assistant: speech in, speech out.") + (
    "The text the user typed after `/speckit.specify` in the triggering message **is** the "
    "feature description."
)

CC_SDD_INIT = (
    "<meta>\ndescription: Initialize a new specification with detailed project description\n"
    "argument-hint: <project-description>\narguments:\n   project-description: env\n</meta>\n\n"
    "# Spec Initialization\n\n<background_information>\n- **Mission**: Initialize the first"
    " phase of spec-driven development\n</background_information>"
)
"""The head of a cc-sdd prompt as Codex 0.104 recorded it (`/kiro:spec-init env`): a `<meta>`
block, then the prompt, its sections in tags (its title was `<meta>`)."""


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        (IDE_OPENED, "读取项目文件，说清楚目前计划"),
        (CODEX_IDE, 'why are we adding lang: "en" here?'),
        (COMMAND, "create TODO app by Next.js"),
        ("<command-message>mcp</command-message>\n<command-name>/mcp</command-name>", "/mcp"),
        (
            CONSTITUTION,
            "You are updating the project constitution at .specify/memory/constitution.md.",
        ),
        (
            IMPLEMENT,
            "Setup: Run .specify/scripts/bash/check-prerequisites.sh --json from repo root.",
        ),
        (SPECIFY, "Build a local voice assistant: speech in, speech out."),
        (
            "<system-reminder>Today is Monday.</system-reminder>\n# Plan\n\n- **Read** the "
            "[docs](https://e.org) and `fix` it. Then test.",
            "Read the docs and fix it.",
        ),
        ("Hi. Can you look at `src/app.py`?", "Hi. Can you look at src/app.py?"),
        ("## Only a heading", "Only a heading"),
        ("<system-reminder>context only</system-reminder>", ""),
        ("```\n```", ""),
        ("Here is my plan\nARGUMENTS: migrate the billing tables", "migrate the billing tables"),
        (  # a real Gemini CLI prompt (mischa-thisness/M-Gemini, CC0): the quote goes on below
            'I really want this to go away: "\n╭────╮\n│ You are running Gemini CLI in your home'
            " directory. It is recommended to run in a project-specific directory. │\n╰────╯",
            "I really want this to go away",
        ),
        ('Rename "cart" to "basket" (', 'Rename "cart" to "basket"'),
        (CC_SDD_INIT, "Mission: Initialize the first phase of spec-driven development"),
    ],
)
def test_a_title_is_the_first_meaningful_sentence_without_wrappers_or_markdown(
    prompt: str, title: str
) -> None:
    assert clean_title(prompt) == title


@pytest.mark.parametrize(
    ("prompt", "typed"),
    [
        (IDE_OPENED, "读取项目文件，说清楚目前计划"),
        (CODEX_IDE, 'why are we adding lang: "en" here?'),
        (COMMAND, "create TODO app by Next.js"),
        (
            "Fix the rounding.\n\nIt is in `cart.py`:\n```\ntotal = a + b\n```",
            "Fix the rounding. It is in cart.py: total = a + b",
        ),
        ("<system-reminder>context only</system-reminder>", ""),
    ],
)
def test_what_was_typed_is_every_line_of_the_prompt_without_wrappers(
    prompt: str, typed: str
) -> None:
    """The pack's "asked:" lines and a conversation's turn list show this: the whole request
    (not only its first sentence) on one line, without what the host put around it."""
    assert typed_text(prompt) == typed


def test_a_long_title_is_cut_at_a_word_boundary() -> None:
    prompt = (
        "Fix the failing integration tests of the payments service after upgrading pydantic to"
        " v2, they fail since the upgrade"
    )
    title = clean_title(prompt)
    assert len(title) <= TITLE_CHARS and prompt.startswith(title)
    assert prompt[len(title)] == " "


def test_conversations_with_the_same_template_header_get_distinct_titles() -> None:
    titles = [title_from_prompts([p]) for p in (CONSTITUTION, IMPLEMENT, SPECIFY)]
    assert len(set(titles)) == 3
    assert not any("User Input" in t or "MUST" in t for t in titles if t)


def test_a_header_the_conversations_later_prompts_repeat_is_skipped() -> None:
    header = "# Task for the agent\nRead AGENTS.md first and follow the repository rules.\n"
    first = title_from_prompts(
        [header + "Add a CSV export to the reports page.", header + "Now PDF."]
    )
    second = title_from_prompts([header + "Rename the billing module.", header + "And its tests."])
    assert first == "Add a CSV export to the reports page."
    assert second == "Rename the billing module."
    assert title_from_prompts([header + "Add a CSV export."]) == (
        "Read AGENTS.md first and follow the repository rules."
    )


def test_the_first_prompt_that_makes_a_title_wins() -> None:
    assert title_from_prompts(["<system-reminder>x</system-reminder>", "Deploy it"]) == "Deploy it"
    assert title_from_prompts(["1"]) == "1"
    assert title_from_prompts(["```", "?!"]) == "```"
    assert title_from_prompts(["<system-reminder>x</system-reminder>", "   "]) is None


@pytest.mark.parametrize(
    ("answer", "lead"),
    [
        (
            "### 7. Verify\n\nThe router forwards port 22 now. Then it restarted.",
            "The router forwards port 22 now.",
        ),
        ("```bash\nls -la\n```\nDone: **all** tests pass. More.", "Done: all tests pass."),
        ("```bash\nls -la\n", "ls -la"),  # all code: its first line
        ("## Summary", "Summary"),
        ("", ""),
    ],
)
def test_an_answers_lead_is_its_first_prose_sentence_outside_code(answer: str, lead: str) -> None:
    assert lead_sentence(answer) == lead
