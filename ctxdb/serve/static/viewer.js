// ctxdb memory viewer: a static page over the HTTP API. The token stays in this tab's
// sessionStorage and goes out only as an Authorization header to this origin; every text from
// the API is written with textContent or built into elements by `markdown` below (never parsed
// as HTML).
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "ctxdb.token";
let currentUser = "";

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { ...(options.headers || {}), Authorization: `Bearer ${token}` };
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new ApiError(response.status, typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return response;
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

// Markdown of messages, rendered by hand: the page has no build step and loads nothing from the
// network (its Content-Security-Policy allows this origin only), so no library is bundled. It is
// a deliberately small subset: fenced code, headings, lists, quotes and paragraphs; inline code,
// bold, italic and links whose target is http(s). Every piece of text becomes a text node, so a
// <script> in a message is shown as text; nothing is ever assigned to innerHTML.
const INLINE = new RegExp([
  "(`+)([\\s\\S]+?)\\1",                                   // 1, 2: inline code
  "\\*\\*(?=\\S)([\\s\\S]+?)\\*\\*",                       // 3: bold
  "(?<![\\w*])\\*(?=\\S)([^*]+?)\\*(?![\\w*])",              // 4: italic *x*
  "(?<!\\w)_(?=\\S)([^_]+?)_(?!\\w)",                        // 5: italic _x_
  "\\[([^\\]]+)\\]\\(([^)\\s]+)\\)",                         // 6, 7: link
].join("|"), "g");

function inline(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[2] !== undefined) out.push(el("code", { text: m[2] }));
    else if (m[3] !== undefined) out.push(el("strong", {}, ...inline(m[3])));
    else if (m[4] !== undefined || m[5] !== undefined) out.push(el("em", {}, ...inline(m[4] ?? m[5])));
    else if (/^https?:\/\//i.test(m[7])) {
      out.push(el("a", { href: m[7], rel: "noopener noreferrer", target: "_blank" }, ...inline(m[6])));
    } else out.push(document.createTextNode(m[0]));
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

function withBreaks(lines) {
  return lines.flatMap((line, i) => (i ? [el("br"), ...inline(line)] : inline(line)));
}

function markdown(text) {
  const root = el("div", { class: "markdown" });
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  const LIST = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+-]*)\s*$/);
    if (fence) {
      const body = [];
      for (i += 1; i < lines.length && !lines[i].trim().startsWith(fence[1]); i += 1) body.push(lines[i]);
      i += 1;
      const code = el("code", { text: body.join("\n") });
      if (fence[2]) code.dataset.lang = fence[2];
      root.append(el("pre", {}, code));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(el(`h${Math.min(6, heading[1].length + 2)}`, {}, ...inline(heading[2])));
      i += 1;
      continue;
    }
    if (LIST.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = el(ordered ? "ol" : "ul");
      for (; i < lines.length && LIST.test(lines[i]); i += 1) list.append(el("li", {}, ...inline(lines[i].match(LIST)[2])));
      root.append(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      for (; i < lines.length && /^\s*>/.test(lines[i]); i += 1) quoted.push(lines[i].replace(/^\s*>\s?/, ""));
      root.append(el("blockquote", {}, ...withBreaks(quoted)));
      continue;
    }
    if (!line.trim()) { i += 1; continue; }
    const para = [];
    for (; i < lines.length && lines[i].trim() && !LIST.test(lines[i]) && !/^\s*(```|~~~|>|#{1,6}\s)/.test(lines[i]); i += 1) para.push(lines[i]);
    root.append(el("p", {}, ...withBreaks(para)));
  }
  return root;
}

// A title for display: whole when short, else cut at the last word boundary before `max`
// characters with an ellipsis (stored titles may be cut mid-word).
function shortTitle(title, max = 60) {
  const text = String(title).replace(/\s+/g, " ").trim();
  if (text.length <= max) return text;
  const cut = text.slice(0, max - 1);
  const space = cut.lastIndexOf(" ");
  return `${(space > max / 3 ? cut.slice(0, space) : cut).replace(/[\s.,;:!?-]+$/, "")}…`;
}

// What a snippet or a match came from, in words (the API's targets are internal names).
const TARGET_LABELS = { user: "prompt", assistant: "answer", summary: "summary", attachment: "attachment", notes: "note" };
function targetLabel(target) { return TARGET_LABELS[target] || target; }

function when(ts) { return ts ? new Date(ts).toLocaleString() : ""; }
function turnHref(c, t) { return `/conversations/${encodeURIComponent(c)}/turns/${encodeURIComponent(t)}`; }
function conversationHref(c) { return `/conversations/${encodeURIComponent(c)}`; }

function show(section) {
  for (const id of ["search-view", "conversation-view", "turn-view", "not-found"]) $(id).hidden = id !== section;
}

// The path's segments, decoded; null when one has a malformed %-escape (decodeURIComponent
// throws a URIError: a "%" not followed by two hex digits, or bytes that are not UTF-8).
function pathParts() {
  try {
    return location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  } catch (error) {
    if (error instanceof URIError) return null;
    throw error;
  }
}

// A failure the page cannot show in one of its views: one line saying what and why.
function pageError(title, message) {
  $("signin").hidden = true; $("app").hidden = true;
  $("page-error-title").textContent = title;
  $("page-error-text").textContent = message;
  $("page-error").hidden = false;
}

function badAddress() {
  pageError("Malformed address", `The address ${location.pathname} has a malformed %-escape ` +
    "(a % must be followed by two hex digits that spell UTF-8), so it names no conversation or turn.");
}

function signedOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  $("app").hidden = true; $("signout").hidden = true; $("who").textContent = "";
  $("signin").hidden = false; $("signin-error").textContent = message || "";
}

async function loadConversations() {
  const list = await (await api("/v1/conversations?limit=200")).json();
  const ol = $("conversations"); ol.replaceChildren();
  const select = $("f-conversation");
  select.replaceChildren(el("option", { value: "", text: "all" }));
  for (const c of list.conversations) {
    const label = shortTitle(c.title || c.conversation_id);
    ol.append(el("li", {}, el("a", { href: conversationHref(c.conversation_id), text: label, title: c.title || c.conversation_id }),
      el("div", { class: "meta", text: `${c.turns} turn${c.turns === 1 ? "" : "s"} · ${when(c.last_activity_at)}` })));
    select.append(el("option", { value: c.conversation_id, text: label }));
  }
}

function explainText(explain) {
  if (!explain) return "";
  const arms = Object.entries(explain.arms).map(([arm, a]) =>
    `${arm}=${a.rank ? "r" + a.rank : "-"}(w${a.weight})`).join(" ");
  const window = explain.in_window === null ? "" : ` in_window=${explain.in_window}`;
  return `${arms} rrf=${explain.rrf.toFixed(4)} recency=${explain.recency.toFixed(2)}${window}` +
    ` brevity=${explain.brevity.toFixed(2)} final=${explain.final.toFixed(4)}`;
}

function renderHits(response) {
  const ol = $("hits"); ol.replaceChildren();
  const weak = response.hits.filter((h) => h.weak).length;
  $("search-status").textContent = `${response.hits.length} hits` + (weak ? ` (${weak} weak)` : "") +
    (response.warnings.length ? ` · ${response.warnings.join(", ")}` : "");
  for (const hit of response.hits) {
    const li = el("li", { class: hit.weak ? "hit weak" : "hit" },
      el("a", { href: turnHref(hit.conversation_id, hit.turn_id), class: "hit-link",
                text: `${shortTitle(hit.title || hit.conversation_id)} · turn ${hit.ordinal ?? hit.turn_id}` }),
      el("div", { class: "meta", text: `${when(hit.ts)} · matched in ${hit.matched_targets.map(targetLabel).join(", ")}` }),
      hit.weak ? el("span", { class: "badge", text: "weak match", title: "Nothing in this turn matches the query strongly" }) : null);
    for (const s of hit.snippets) li.append(el("div", { class: "snippet" }, el("span", { class: "label", text: `${targetLabel(s.target)}: ` }), s.text));
    if (hit.explain) li.append(el("div", { class: "explain", text: explainText(hit.explain) }));
    ol.append(li);
  }
}

async function runSearch(event) {
  if (event) event.preventDefault();
  const body = {
    query: $("query").value, top_k: 20, explain: $("f-explain").checked,
    targets: [...document.querySelectorAll("#f-targets input:checked")].map((i) => i.value),
  };
  const conversation = $("f-conversation").value;
  if (conversation) { body.scope = "conversation"; body.conversation_id = conversation; }
  if ($("f-since").value) body.since = `${$("f-since").value}T00:00:00Z`;
  if ($("f-until").value) body.until = `${$("f-until").value}T23:59:59Z`;
  try {
    renderHits(await (await api("/v1/search", { method: "POST", body: JSON.stringify(body) })).json());
  } catch (error) {
    $("hits").replaceChildren();
    $("search-status").textContent = `error: ${error.message}`;
    if (error.status === 401) signedOut(error.message);
  }
}

async function showConversation(conversationId) {
  const body = { query: "", scope: "conversation", conversation_id: conversationId,
                 since: "1970-01-01T00:00:00Z", top_k: 50 };
  const response = await (await api("/v1/search", { method: "POST", body: JSON.stringify(body) })).json();
  if (!response.hits.length) return show("not-found");
  const hits = [...response.hits].sort((a, b) => (a.ordinal ?? 0) - (b.ordinal ?? 0));
  $("conversation-title").textContent = shortTitle(hits[0].title || conversationId, 90);
  const ol = $("timeline"); ol.replaceChildren();
  for (const hit of hits) {
    const li = el("li", { class: "turn-row" },
      el("a", { href: turnHref(conversationId, hit.turn_id), text: `#${hit.ordinal ?? "?"} · ${when(hit.ts)}` }));
    for (const s of hit.snippets) li.append(el("div", { class: "snippet" }, el("span", { class: "label", text: `${targetLabel(s.target)}: ` }), s.text));
    ol.append(li);
  }
  show("conversation-view");
}

async function download(card, conversationId) {
  const params = new URLSearchParams({ ref: card.ref, conversation_id: conversationId });
  const blob = await (await api(`/v1/pull?${params}`)).blob();
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: card.filename || "file" });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function fileItem(card, conversationId) {
  const li = el("li", {}, el("span", { text: `${card.filename || card.path || card.ref} ` }),
    el("span", { class: "meta", text: [card.mime, card.size != null ? `${card.size} bytes` : ""].filter(Boolean).join(" · ") }));
  if (card.ref) {
    const button = el("button", { type: "button", class: "download", text: "Download" });
    button.addEventListener("click", () => download(card, conversationId).catch((e) => alert(e.message)));
    li.append(" ", button);
  }
  if (card.text) li.append(el("div", { class: "snippet", text: card.text }));
  return li;
}

const FOLLOW_UPS = { "user.followup": "follow-up", "user.steer": "steer", "event.user.followup": "follow-up", "event.user.steer": "steer" };

function messageItem(m) {
  const who = m.role === "user" ? (currentUser || "You") : "Assistant";
  const kind = FOLLOW_UPS[m.event_type];
  return el("div", { class: `message ${m.role}` },
    el("div", { class: "meta", text: [who, kind, when(m.ts)].filter(Boolean).join(" · ") }), markdown(m.text));
}

const STEP_LABELS = { tool_call: "call", tool_result: "result", thinking: "", step: "" };

function stepItem(step) {
  const titled = step.kind === "step" && step.tool && (step.text || "").startsWith(step.tool);  // "Read a.py"
  const name = titled ? step.text : [step.tool || (step.kind === "thinking" ? "Thinking" : "Step"), STEP_LABELS[step.kind]].filter(Boolean).join(" ");
  const text = titled ? "" : step.text || "";
  const status = step.status && !["complete", "ok"].includes(step.status) ? step.status : "";
  const head = [el("span", { class: "step-name", text: name }),
    status ? " " : null, status ? el("span", { class: `badge ${status}`, text: status }) : null];
  if (!text.includes("\n") && text.length <= 160) {
    return el("li", { class: `step ${step.kind}` }, ...head, text ? el("span", { class: "step-text", text: ` ${text}` }) : null);
  }
  const firstLine = text.split("\n", 1)[0];
  return el("li", { class: `step ${step.kind}` }, el("details", {},
    el("summary", {}, ...head, el("span", { class: "step-text", text: ` ${firstLine.length > 120 ? shortTitle(firstLine, 120) : firstLine}` })),
    el("pre", {}, el("code", { text }))));
}

// A file list and its heading: both hidden when the turn has none.
function fileList(id, cards, conversationId) {
  $(id).replaceChildren(...cards.map((c) => fileItem(c, conversationId)));
  $(`${id}-section`).hidden = !cards.length;
}

async function showTurn(conversationId, turnId) {
  const turn = await (await api(`/v1/conversations/${encodeURIComponent(conversationId)}/turns/${encodeURIComponent(turnId)}`)).json();
  $("turn-back").setAttribute("href", conversationHref(conversationId));
  $("turn-title").textContent = `${shortTitle(turn.title || conversationId)} · turn ${turn.ordinal ?? turnId}`;
  $("turn-title").title = turn.title || conversationId;
  $("turn-meta").textContent = `${when(turn.started_at)} – ${when(turn.ended_at)}${turn.error ? " · error" : ""}`;
  const asked = turn.messages.filter((m) => m.role === "user").map(messageItem);
  const answered = turn.messages.filter((m) => m.role !== "user").map(messageItem);
  const steps = turn.steps.length ? [el("section", { id: "steps", class: "steps" },
    el("h2", { text: `Steps (${turn.steps.length})` }), el("ol", {}, ...turn.steps.map(stepItem)))] : [];
  $("messages").replaceChildren(...asked, ...steps, ...answered);
  fileList("attachments", turn.attachments, conversationId);
  fileList("files", turn.files, conversationId);
  $("turn-summary").replaceChildren(...(turn.summary ? [el("h2", { text: "Summary" }), markdown(turn.summary)] : []));
  show("turn-view");
}

async function route() {
  const parts = pathParts();
  if (parts === null) return badAddress();
  try {
    if (parts[0] === "conversations" && parts.length === 4 && parts[2] === "turns") return await showTurn(parts[1], parts[3]);
    if (parts[0] === "conversations" && parts.length === 2) return await showConversation(parts[1]);
    if (parts.length === 0) return show("search-view");
    show("not-found");
  } catch (error) {
    if (error.status === 401) return signedOut(error.message);
    if (error.status === 404) return show("not-found");
    pageError("Something went wrong", `error: ${error.message}`);
  }
}

async function start() {
  if (pathParts() === null) return badAddress();
  if (!sessionStorage.getItem(TOKEN_KEY)) return signedOut("");
  try {
    await loadConversations();
  } catch (error) {
    return signedOut(error.status === 401 ? "That token was not accepted." : error.message);
  }
  $("signin").hidden = true; $("app").hidden = false; $("signout").hidden = false;
  try {
    currentUser = (await (await api("/v1/me")).json()).user_id;
  } catch (error) {
    currentUser = "";
  }
  $("who").textContent = currentUser ? `Signed in as ${currentUser}` : "Signed in";
  await route();
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    start();
  });
  $("signout").addEventListener("click", () => signedOut(""));
  $("search-form").addEventListener("submit", runSearch);
  start();
});
