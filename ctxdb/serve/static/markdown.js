// Markdown of messages, for the ctxdb viewer. The page has no build step and loads nothing from
// the network (its Content-Security-Policy allows this origin only), so no library is bundled.
// `parseMarkdown` turns text into a plain tree (strings and {tag, attrs, children} objects) with
// no DOM at all, so it also runs under Node (the tests feed it random text there); `markdown`
// builds that tree into elements with createElement and text nodes only, so a <script> in a
// message is shown as text and nothing is ever assigned to innerHTML.
//
// The subset: fenced code (any info string), ATX headings, nested bullet and numbered lists
// (numbers kept), quotes, GitHub tables, rules and paragraphs; inline code, bold, italic and
// links whose target is http(s). Every block parser consumes at least one line, and the line
// tests that start a block are the same ones that end a paragraph, so the parse always ends.
"use strict";

const MAX_DEPTH = 12;  // lists and quotes nested deeper than this are shown as their text
const INLINE_MAX = 4000;  // a longer line is shown as text (its inline patterns cost n squared)

const INLINE = new RegExp([
  "(?<!`)(`{1,3})(?!`)([\\s\\S]*?[^`])\\1(?!`)",            // 1, 2: inline code
  "\\*\\*(?=\\S)([\\s\\S]+?)\\*\\*",                       // 3: bold
  "(?<![\\w*])\\*(?=\\S)([^*]+?)\\*(?![\\w*])",              // 4: italic *x*
  "(?<!\\w)_(?=\\S)([^_]+?)_(?!\\w)",                        // 5: italic _x_
  "\\[([^\\]]+)\\]\\(([^)\\s]+)\\)",                         // 6, 7: link
].join("|"), "g");

function node(tag, children = [], attrs = {}) {
  return { tag, attrs, children };
}

// Inline markup of one piece of text, as tree nodes (text stays text).
function inline(text) {
  if (text.length > INLINE_MAX) return [text];
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[2] !== undefined) out.push(node("code", [m[2]]));
    else if (m[3] !== undefined) out.push(node("strong", inline(m[3])));
    else if (m[4] !== undefined || m[5] !== undefined) out.push(node("em", inline(m[4] ?? m[5])));
    else if (/^https?:\/\//i.test(m[7])) {
      out.push(node("a", inline(m[6]), { href: m[7], rel: "noopener noreferrer", target: "_blank" }));
    } else out.push(m[0]);
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

function withBreaks(lines) {
  return lines.flatMap((line, i) => (i ? [node("br"), ...inline(line)] : inline(line)));
}

// Columns of leading white space (a tab counts four).
function indentOf(line) {
  let width = 0;
  for (const ch of line) {
    if (ch === " ") width += 1;
    else if (ch === "\t") width += 4 - (width % 4);
    else break;
  }
  return width;
}

// `line` without its first `width` columns of leading white space.
function dedent(line, width) {
  let cut = 0;
  let seen = 0;
  while (cut < line.length && seen < width && (line[cut] === " " || line[cut] === "\t")) {
    seen += line[cut] === "\t" ? 4 - (seen % 4) : 1;
    cut += 1;
  }
  return line.slice(cut);
}

const isBlank = (line) => !line.trim();

function fenceOpen(line) {
  const m = /^\s*(`{3,}|~{3,})([\s\S]*)$/.exec(line);
  if (!m || (m[1][0] === "`" && m[2].includes("`"))) return null;
  return { marker: m[1], lang: (/^\s*([\w+#.-]+)/.exec(m[2]) || [])[1] || "" };
}

function headingOf(line) {
  const m = /^ {0,3}(#{1,6})(?:[ \t\u2028\u2029]+([\s\S]*?))?[ \t]*$/.exec(line);
  if (!m) return null;
  return { level: m[1].length, text: (m[2] || "").replace(/[ \t]+#+$/, "").replace(/^#+$/, "") };
}

const isRule = (line) => /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/.test(line);

function listItem(line) {
  const m = /^([ \t]*)([-*+]|\d{1,9}[.)])(?:([ \t]+)([\s\S]*)|[ \t]*$)/.exec(line);
  if (!m) return null;
  const indent = indentOf(m[1]);
  const gap = m[3] ? m[3].replace(/\t/g, "    ").length : 1;
  const content = indent + m[2].length + (gap > 4 ? 1 : gap);
  return { indent, content, ordered: /\d/.test(m[2]), number: parseInt(m[2], 10), text: m[4] || "" };
}

const quoteOf = (line) => /^ {0,3}> ?/.exec(line);

// The cells of a table row: split on unescaped pipes, outer pipes dropped.
function cells(line) {
  const row = line.trim().replace(/^\|/, "").replace(/(?<!\\)\|$/, "");
  return row.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function tableStart(lines, i) {
  if (!lines[i].includes("|") || i + 1 >= lines.length || !lines[i + 1].includes("-")) return null;
  const head = cells(lines[i]);
  const rule = cells(lines[i + 1]);
  if (head.length !== rule.length || !rule.every((c) => /^:?-+:?$/.test(c))) return null;
  return { head, align: rule.map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : "")) };
}

// Which block starts at line i, or null for paragraph text. The block parsers and the paragraph's
// stop test both ask this one function.
function blockAt(lines, i) {
  const line = lines[i];
  const fence = fenceOpen(line);
  if (fence) return { kind: "fence", fence };
  const heading = headingOf(line);
  if (heading) return { kind: "heading", heading };
  if (isRule(line)) return { kind: "rule" };
  if (listItem(line)) return { kind: "list" };
  if (quoteOf(line)) return { kind: "quote" };
  const table = tableStart(lines, i);
  if (table) return { kind: "table", table };
  return null;
}

function parseFence(lines, i, fence) {
  const close = new RegExp(`^\\s*${fence.marker[0] === "`" ? "`" : "~"}{${fence.marker.length},}\\s*$`);
  const body = [];
  let j = i + 1;
  for (; j < lines.length && !close.test(lines[j]); j += 1) body.push(lines[j]);
  const text = body.join("\n");
  const attrs = fence.lang ? { "data-lang": fence.lang } : {};
  const empty = !text.trim();
  return [node("pre", [node("code", empty ? [] : [text], attrs)], empty ? { class: "empty" } : {}), j + 1];
}

// The lines of the list item starting at line i, dedented, and the line after it.
function itemLines(lines, i, item) {
  const body = [item.text];
  let j = i + 1;
  while (j < lines.length) {
    if (isBlank(lines[j])) {
      let k = j;
      while (k < lines.length && isBlank(lines[k])) k += 1;
      if (k >= lines.length || indentOf(lines[k]) <= item.indent) break;
      for (; j < k; j += 1) body.push("");
      continue;
    }
    const width = indentOf(lines[j]);
    if (width > item.indent) body.push(dedent(lines[j], Math.min(width, item.content)));
    else if (!blockAt(lines, j) && !isBlank(body[body.length - 1])) body.push(lines[j].trim());
    else break;
    j += 1;
  }
  return [body, j];
}

function listItemNode(body, depth) {
  const blocks = parseBlocks(body, depth + 1);
  const [first, ...rest] = blocks;
  return node("li", first && first.tag === "p" ? [...first.children, ...rest] : blocks);
}

function parseList(lines, i, depth) {
  const first = listItem(lines[i]);
  const items = [];
  let j = i;
  for (;;) {
    const item = listItem(lines[j]);
    const [body, next] = itemLines(lines, j, item);
    items.push(listItemNode(body, depth));
    let k = next;
    while (k < lines.length && isBlank(lines[k])) k += 1;
    const sibling = k < lines.length ? listItem(lines[k]) : null;
    j = next;
    if (!sibling || sibling.ordered !== first.ordered) break;
    j = k;
  }
  const attrs = first.ordered && first.number !== 1 ? { start: String(first.number) } : {};
  return [node(first.ordered ? "ol" : "ul", items, attrs), j];
}

function parseQuote(lines, i, depth) {
  const body = [];
  let j = i;
  for (; j < lines.length; j += 1) {
    const m = quoteOf(lines[j]);
    if (m) body.push(lines[j].slice(m[0].length));
    else if (!isBlank(lines[j]) && !blockAt(lines, j) && !isBlank(body[body.length - 1])) body.push(lines[j]);
    else break;
  }
  return [node("blockquote", parseBlocks(body, depth + 1)), j];
}

function parseTable(lines, i, table) {
  const cell = (tag, text, n) => node(tag, inline(text), table.align[n] ? { class: `align-${table.align[n]}` } : {});
  const head = node("thead", [node("tr", table.head.map((c, n) => cell("th", c, n)))]);
  const rows = [];
  let j = i + 2;
  for (; j < lines.length && !isBlank(lines[j]) && !blockAt(lines, j); j += 1) {
    rows.push(node("tr", cells(lines[j]).slice(0, table.head.length).map((c, n) => cell("td", c, n))));
  }
  return [node("table", rows.length ? [head, node("tbody", rows)] : [head]), j];
}

function parseParagraph(lines, i) {
  const para = [lines[i].trim()];
  let j = i + 1;
  for (; j < lines.length && !isBlank(lines[j]) && !blockAt(lines, j); j += 1) para.push(lines[j].trim());
  return [node("p", withBreaks(para)), j];
}

// One block from line i (i is not blank): [tree node, the first line after it]; always past i.
function parseBlock(lines, i, depth) {
  const block = blockAt(lines, i);
  const nested = depth < MAX_DEPTH;
  if (!block) return parseParagraph(lines, i);
  switch (block.kind) {
    case "fence": return parseFence(lines, i, block.fence);
    case "heading":
      return [node(`h${Math.min(6, block.heading.level + 2)}`, inline(block.heading.text)), i + 1];
    case "rule": return [node("hr"), i + 1];
    case "table": return parseTable(lines, i, block.table);
    case "list": return nested ? parseList(lines, i, depth) : parseParagraph(lines, i);
    default: return nested ? parseQuote(lines, i, depth) : parseParagraph(lines, i);
  }
}

function parseBlocks(lines, depth) {
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    if (isBlank(lines[i])) { i += 1; continue; }
    const [block, next] = parseBlock(lines, i, depth);
    blocks.push(block);
    i = Math.max(next, i + 1);
  }
  return blocks;
}

// The block tree of a markdown text: a list of nodes (strings and {tag, attrs, children}).
function parseMarkdown(text) {
  return parseBlocks(String(text).replace(/\r\n?/g, "\n").split("\n"), 0);
}

const BLOCK_TAGS = new Set(["p", "pre", "ul", "ol", "li", "blockquote", "table", "thead", "tbody",
  "tr", "hr", "h1", "h2", "h3", "h4", "h5", "h6"]);

// The words of a tree node without markdown syntax: blocks and list items on lines of their own,
// numbered items with their numbers, table cells separated by " · ".
function textOf(n) {
  if (typeof n === "string") return n;
  if (n.tag === "br") return "\n";
  if (n.tag === "tr") return n.children.map(textOf).join(" · ");
  if (n.tag === "ol") {
    const start = Number(n.attrs.start || 1);
    return n.children.map((li, k) => `${start + k}. ${textOf(li)}`).join("\n");
  }
  const block = (c) => typeof c !== "string" && BLOCK_TAGS.has(c.tag);
  return n.children.map((c, k) => (k && block(c) ? "\n" : "") + textOf(c)).join("");
}

// Markup left in a text whose lines were joined into one (search snippets are cut from text
// with its white space collapsed): mid-line headings, table rules and pipes, fences.
const FLAT_SYNTAX = [
  [/(^|\s)#{1,6}(?=\s)/g, "$1"],
  [/\|?(?:\s*:?-{3,}:?\s*\|)+(?:\s*:?-{3,}:?\s*)?/g, " "],
  [/(^|\s)\|(?=\s|$)/g, "$1·"],
  [/·(?:\s*·)+/g, "·"],
  [/`{3,}[\w+-]*/g, ""],
];

// A markdown text as plain words (search snippets): the same parse, syntax dropped.
function markdownText(text) {
  let plain = textOf(node("div", parseMarkdown(text)));
  for (const [pattern, replacement] of FLAT_SYNTAX) plain = plain.replace(pattern, replacement);
  return plain.replace(/[ \t]{2,}/g, " ").trim();
}

function buildNode(n) {
  if (typeof n === "string") return document.createTextNode(n);
  const element = document.createElement(n.tag);
  for (const [key, value] of Object.entries(n.attrs)) element.setAttribute(key, value);
  for (const child of n.children) element.append(buildNode(child));
  return element;
}

// A markdown text as a <div class="markdown"> of elements and text nodes.
function markdown(text) {
  const root = document.createElement("div");
  root.className = "markdown";
  for (const block of parseMarkdown(text)) root.append(buildNode(block));
  return root;
}

if (typeof module === "object" && module.exports) module.exports = { parseMarkdown, markdownText };
