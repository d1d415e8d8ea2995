"""The viewer's markdown parser (ctxdb/serve/static/markdown.js) run under Node.js, the file the
page loads: lines that used to loop forever (issue 41 finding 1), a property test over random
markdown-like text (it always ends, and its output is bounded by its input), and the shapes issue
40 item 8 asks for (tables, nested numbered lists, empty code blocks, snippets without syntax).
The page's rendering of the same tree is checked in Chromium by tests/test_viewer.py."""

from __future__ import annotations

import json
import select
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest_components import NODE, without
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MARKDOWN_JS = Path(__file__).resolve().parents[1] / "ctxdb" / "serve" / "static" / "markdown.js"
NODE_BIN = shutil.which("node")
ANSWER_WITHIN_S = 30.0
"""A hang guard, not a timing check: a parse that has not answered by then never ends."""

pytestmark = without(NODE, NODE_BIN is not None)

# One JSON request per line on stdin: {"text", "op"}; one JSON answer per line on stdout.
HARNESS = """
const md = require(process.argv[1]);
const count = (n) => typeof n === "string" ? [0, n.length] : n.children.map(count)
  .reduce((a, b) => [a[0] + b[0], a[1] + b[1]], [1, 0]);
require("readline").createInterface({ input: process.stdin }).on("line", (line) => {
  const { text, op } = JSON.parse(line);
  const tree = md.parseMarkdown(text);
  const [elements, chars] = tree.map(count).reduce((a, b) => [a[0] + b[0], a[1] + b[1]], [0, 0]);
  const answer = op === "text" ? md.markdownText(text) : op === "tree" ? tree : null;
  process.stdout.write(JSON.stringify({ elements, chars, answer }) + "\\n");
});
"""


class Parser:
    """A Node.js process with markdown.js loaded, asked one text at a time."""

    def __init__(self) -> None:
        assert NODE_BIN is not None
        self.proc = subprocess.Popen(
            [NODE_BIN, "-e", HARNESS, str(MARKDOWN_JS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def ask(self, text: str, op: str = "tree") -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"text": text, "op": op}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_WITHIN_S)
        if not ready:
            self.proc.kill()
            pytest.fail(f"the parser never finished on {text!r}")
        return json.loads(self.proc.stdout.readline())

    def tree(self, text: str) -> list[Any]:
        return self.ask(text)["answer"]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def parser() -> Iterator[Parser]:
    p = Parser()
    yield p
    p.close()


def units(text: str) -> int:
    """The length of `text` as JavaScript counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def shape(nodes: list[Any]) -> list[Any]:
    """A tree as nested [tag, attrs, children] lists (text as itself), for exact comparisons."""
    return [
        n if isinstance(n, str) else [n["tag"], n["attrs"], shape(n["children"])] for n in nodes
    ]


LOOPED = [
    "```json:package.json",
    "```js {1,3}",
    '```python title="x.py"',
    "   # install",
    "# heading\u2028with a line separator",
]


@pytest.mark.parametrize("line", LOOPED)
def test_issue_41_finding_1_each_line_that_looped_forever_renders(
    parser: Parser, line: str
) -> None:
    text = f"Here is how:\n{line}\nnpm install\n```\nDone."
    answer = parser.ask(text)
    assert answer["chars"] <= len(text)
    assert answer["answer"][0] == {"tag": "p", "attrs": {}, "children": ["Here is how:"]}


def test_issue_41_finding_1_the_looping_lines_in_one_answer(parser: Parser) -> None:
    text = (
        'Install it:\n```json:package.json\n{"a": 1}\n```\n'
        "```js {1,3}\nconst x = 1;\n```\n"
        '```python title="x.py"\nprint(1)\n```\n'
        "   # install\n"
        "# heading\u2028with a line separator\nthe end"
    )
    assert shape(parser.tree(text)) == [
        ["p", {}, ["Install it:"]],
        ["pre", {}, [["code", {"data-lang": "json"}, ['{"a": 1}']]]],
        ["pre", {}, [["code", {"data-lang": "js"}, ["const x = 1;"]]]],
        ["pre", {}, [["code", {"data-lang": "python"}, ["print(1)"]]]],
        ["h3", {}, ["install"]],
        ["h3", {}, ["heading\u2028with a line separator"]],
        ["p", {}, ["the end"]],
    ]


FRAGMENTS = [
    "```",
    "~~~",
    "```json:package.json",
    "```js {1,3}",
    '```python title="x.py"',
    "`",
    "``",
    "#",
    "# ",
    "   # install",
    "###### ",
    "- ",
    "* ",
    "+ ",
    "1. ",
    "2) ",
    "   - ",
    "\t- ",
    "    ",
    "> ",
    ">>",
    "|",
    "| a | b |",
    "|---|:-:|",
    "---",
    "***",
    "**",
    "*",
    "_",
    "[x](https://e.org)",
    "[y](javascript:alert(1))",
    "<script>",
    "\u2028",
    "\u2029",
    "\t",
    "\\|",
    "word",
    " ",
]
line = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), min_size=0, max_size=5
).map("".join)
document = st.tuples(st.lists(line, max_size=25), st.sampled_from(["\n", "\r\n", "\r"])).map(
    lambda t: t[1].join(t[0])
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=document)
def test_issue_41_finding_1_random_markdown_like_text_ends_with_bounded_output(
    parser: Parser, text: str
) -> None:
    """Every parse answers, its text is at most the input's characters, and it makes at most a
    few elements per input character."""
    size = units(text)
    answer = parser.ask(text)
    assert answer["chars"] <= size
    assert answer["elements"] <= 3 * size + 1
    plain = parser.ask(text, "text")["answer"]
    assert units(plain) <= 2 * size + 1


def test_a_long_line_of_unmatched_markup_is_text(parser: Parser) -> None:
    text = "`a``" * 30_000 + "\n" + "**[x" * 30_000
    answer = parser.ask(text)
    assert answer["chars"] == len(text) - 1  # every character but the newline, as text


def test_issue_40_item_8_a_table_renders_as_a_table(parser: Parser) -> None:
    text = "| model | score |\n|:---|---:|\n| `a` | 1 |\n| b \\| c | 2 |\nafter"
    right = {"class": "align-right"}
    assert shape(parser.tree(text)) == [
        [
            "table",
            {},
            [
                ["thead", {}, [["tr", {}, [["th", {}, ["model"]], ["th", right, ["score"]]]]]],
                [
                    "tbody",
                    {},
                    [
                        ["tr", {}, [["td", {}, [["code", {}, ["a"]]]], ["td", right, ["1"]]]],
                        ["tr", {}, [["td", {}, ["b | c"]], ["td", right, ["2"]]]],
                        ["tr", {}, [["td", {}, ["after"]]]],
                    ],
                ],
            ],
        ]
    ]


def test_issue_40_item_8_nested_lists_keep_their_nesting_and_numbers(parser: Parser) -> None:
    text = (
        "3. Install\n   - uv\n   - ruff\n4. Configure\n   1. pyproject\n   2. pre-commit\n"
        "      ```toml\n      [tool.ruff]\n      ```\n5. Run"
    )
    assert shape(parser.tree(text)) == [
        [
            "ol",
            {"start": "3"},
            [
                ["li", {}, ["Install", ["ul", {}, [["li", {}, ["uv"]], ["li", {}, ["ruff"]]]]]],
                [
                    "li",
                    {},
                    [
                        "Configure",
                        [
                            "ol",
                            {},
                            [
                                ["li", {}, ["pyproject"]],
                                [
                                    "li",
                                    {},
                                    [
                                        "pre-commit",
                                        [
                                            "pre",
                                            {},
                                            [["code", {"data-lang": "toml"}, ["[tool.ruff]"]]],
                                        ],
                                    ],
                                ],
                            ],
                        ],
                    ],
                ],
                ["li", {}, ["Run"]],
            ],
        ]
    ]


@pytest.mark.parametrize("text", ["```text\n```", "```\n\n\n```", "```"])
def test_issue_40_item_8_an_empty_fenced_block_is_an_empty_code_block(
    parser: Parser, text: str
) -> None:
    (block,) = parser.tree(text)
    assert block["tag"] == "pre" and block["attrs"] == {"class": "empty"}
    assert block["children"][0]["tag"] == "code" and block["children"][0]["children"] == []


@pytest.mark.parametrize(
    ("snippet", "plain"),
    [
        (
            "## User Input ```text ``` You **MUST** consider the user input",
            "User Input text You MUST consider the user input",
        ),
        (
            "…scores: | model | score | |---|---| | a | 1 | and [the docs](https://e.org)",
            "…scores: · model · score · a · 1 · and the docs",
        ),
        (
            "# Plan\n\n1. **Read** `a.py`\n2. _Fix_ it\n\n- done",
            "Plan\n1. Read a.py\n2. Fix it\ndone",
        ),
    ],
)
def test_issue_40_item_8_snippets_are_text_without_markdown_syntax(
    parser: Parser, snippet: str, plain: str
) -> None:
    assert parser.ask(snippet, "text")["answer"] == plain
