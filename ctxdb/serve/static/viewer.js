// ctxdb memory viewer: a static page over the HTTP API. The token stays in this tab's
// sessionStorage and goes out only as an Authorization header to this origin; every text from
// the API is written with textContent or built into elements by `markdown` (markdown.js; never
// parsed as HTML).
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

// A title for display: whole when short, else cut at the last word boundary before `max`
// characters with an ellipsis (stored titles may be cut mid-word).
function shortTitle(title, max = 60) {
  const text = String(title).replace(/\s+/g, " ").trim();
  if (text.length <= max) return text;
  const cut = text.slice(0, max - 1);
  const space = cut.lastIndexOf(" ");
  return `${(space > max / 3 ? cut.slice(0, space) : cut).replace(/[\s.,;:!?-]+$/, "")}…`;
}

// An agent as people read it. Gemini CLI names a project by the SHA-256 of its folder path (the
// folder itself is not in its sessions), so a 64-hex agent shows as "Gemini project <8 hex>";
// the stored agent stays as it is, since it is part of every turn's identity.
function agentName(agent) {
  if (!agent) return "";
  return /^[0-9a-f]{64}$/i.test(agent) ? `Gemini project ${agent.slice(0, 8)}` : agent;
}

// What a snippet or a match came from, in words (the API's targets are internal names).
const TARGET_LABELS = { user: "prompt", assistant: "answer", summary: "summary", attachment: "attachment", notes: "note" };
function targetLabel(target) { return TARGET_LABELS[target] || target; }

// A snippet as plain words (its markdown syntax dropped), labelled with what it came from.
function snippetItem(s) {
  return el("div", { class: "snippet" }, el("span", { class: "label", text: `${targetLabel(s.target)}: ` }), markdownText(s.text));
}

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

// The conversation list, a page at a time (newest activity first); "More conversations" adds
// the next page (GET /v1/conversations's next_offset).
const CONVERSATION_PAGE = 200;

async function loadConversations(offset = 0) {
  const list = await (await api(`/v1/conversations?limit=${CONVERSATION_PAGE}&offset=${offset}`)).json();
  const ol = $("conversations");
  const select = $("f-conversation");
  if (offset === 0) {
    ol.replaceChildren();
    select.replaceChildren(el("option", { value: "", text: "all" }));
  }
  const more = $("more-conversations");
  more.hidden = list.next_offset === null || list.next_offset === undefined;
  more.dataset.offset = more.hidden ? "" : String(list.next_offset);
  for (const c of list.conversations) {
    const label = shortTitle(c.title || c.conversation_id);
    ol.append(el("li", {}, el("a", { href: conversationHref(c.conversation_id), text: label, title: c.title || c.conversation_id }),
      el("div", { class: "meta", text: [agentName(c.agent), `${c.turns} turn${c.turns === 1 ? "" : "s"}`, when(c.last_activity_at)].filter(Boolean).join(" · ") })));
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
      hit.weak ? el("span", { class: "badge", text: "weak match", title: "Nothing in this turn matches the query strongly" }) : null,
      statusBadge(hit.status, hit.error_type));
    for (const s of hit.snippets) li.append(snippetItem(s));
    if (hit.explain) li.append(el("div", { class: "explain", text: explainText(hit.explain) }));
    ol.append(li);
  }
}

// The ranking knobs typed as `name=value` pairs (comma- or space-separated) as the request's
// `knobs` object; the API checks every name and value (docs/search-api.md, "Knobs").
function knobsOf(text) {
  const knobs = {};
  for (const pair of text.split(/[\s,]+/).filter(Boolean)) {
    const at = pair.indexOf("=");
    if (at < 1) throw new Error(`knob "${pair}": write name=value`);
    const raw = pair.slice(at + 1);
    knobs[pair.slice(0, at)] = raw === "true" ? true : raw === "false" ? false : raw !== "" && !isNaN(Number(raw)) ? Number(raw) : raw;
  }
  return knobs;
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
  if ($("f-days").value) body.days = Number($("f-days").value);  // blank: all time
  try {
    body.knobs = knobsOf($("f-knobs").value);
    renderHits(await (await api("/v1/search", { method: "POST", body: JSON.stringify(body) })).json());
  } catch (error) {
    $("hits").replaceChildren();
    $("search-status").textContent = `error: ${error.message}`;
    if (error.status === 401) signedOut(error.message);
  }
}

// How a turn closed, as a badge: none for an answered turn, "interrupted" for one the person
// stopped, "error" (with its type when known) for one that failed.
function statusBadge(status, errorType) {
  if (status === "cancelled") return el("span", { class: "badge interrupted", text: "interrupted", title: "Stopped before it finished" });
  if (status === "error") return el("span", { class: "badge error", text: errorType ? `error: ${errorType}` : "error" });
  return null;
}

function timelineItem(conversationId, turn) {
  const li = el("li", { class: `turn-row ${turn.status || "ok"}` },
    el("a", { href: turnHref(conversationId, turn.turn_id), text: `#${turn.ordinal} · ${when(turn.ts)}` }),
    statusBadge(turn.status, turn.error_type));
  if (turn.prompt) li.append(snippetItem({ target: "user", text: turn.prompt }));
  if (turn.answer) li.append(snippetItem({ target: "assistant", text: turn.answer }));
  return li;
}

const TIMELINE_PAGE = 200;
let timelineRun = 0;  // a newer showConversation stops an older one still streaming pages

// Every turn of a conversation, oldest first, streamed a page at a time.
async function showConversation(conversationId) {
  const run = ++timelineRun;
  const ol = $("timeline");
  const path = `/v1/conversations/${encodeURIComponent(conversationId)}/turns`;
  for (let offset = 0; ; offset += TIMELINE_PAGE) {
    const page = await (await api(`${path}?offset=${offset}&limit=${TIMELINE_PAGE}`)).json();
    if (run !== timelineRun) return;
    if (offset === 0) {
      $("conversation-title").textContent = shortTitle(page.title || conversationId, 90);
      $("conversation-meta").textContent = [agentName(page.agent), `${page.total} turn${page.total === 1 ? "" : "s"}`].filter(Boolean).join(" · ");
      ol.replaceChildren();
      show("conversation-view");
    }
    ol.append(...page.turns.map((turn) => timelineItem(conversationId, turn)));
    if (!page.turns.length || offset + page.turns.length >= page.total) return;
  }
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

// What a message is beside a prompt or an answer (its event_type; ctxdb/search/models.py names
// the same kinds for the text outputs): typed into the running turn, or an answer that is the
// turn's error or what an interrupted turn had written so far.
const MESSAGE_KINDS = { "user.followup": "follow-up", "user.steer": "steer", "event.user.followup": "follow-up", "event.user.steer": "steer", "error": "error", "interrupted": "cut off" };

function messageItem(m) {
  const who = m.role === "user" ? (currentUser || "You") : "Assistant";
  const kind = MESSAGE_KINDS[m.event_type];
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
  const status = turn.status || (turn.error ? "error" : "ok");
  $("turn-meta").replaceChildren(`${when(turn.started_at)} – ${when(turn.ended_at)}`, statusBadge(status, turn.error_type) || "");
  const asked = turn.messages.filter((m) => m.role === "user").map(messageItem);
  const answered = turn.messages.filter((m) => m.role !== "user" && m.text.trim()).map(messageItem);
  if (!answered.length && status !== "ok") {
    answered.push(el("p", { class: "meta no-answer", text: status === "cancelled" ? "Interrupted before an answer." : "Failed before an answer." }));
  }
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

// The context pack panel: what the context hooks and get_context give an agent for a project
// (GET /v1/context), shown as the exact text the agent receives. Its project list is the
// agents of the conversations, loaded when the panel is first opened.
async function loadPackProjects() {
  if ($("pack-projects").childElementCount) return;
  const list = await (await api("/v1/conversations?limit=200")).json();
  const agents = [...new Set(list.conversations.map((c) => c.agent).filter(Boolean))].sort();
  $("pack-projects").replaceChildren(...agents.map((a) => el("option", { value: a })));
}

async function showPack(event) {
  event.preventDefault();
  const params = new URLSearchParams({ budget: $("pack-budget").value || "1500" });
  const project = $("pack-project").value.trim();
  if (project) params.set("project", project);
  $("pack-status").textContent = "Building the pack…";
  $("pack-text").textContent = "";
  try {
    const pack = await (await api(`/v1/context?${params}`)).json();
    const facts = [`${pack.tokens} of ${pack.budget} tokens`, `${pack.items.length} items`];
    if (pack.dropped) facts.push(`${pack.dropped} left out to fit`);
    $("pack-status").textContent = [...facts, ...pack.warnings].join(" · ");
    $("pack-text").textContent = pack.text;
  } catch (error) {
    if (error.status === 401) return signedOut(error.message);
    $("pack-status").textContent = `error: ${error.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    start();
  });
  $("signout").addEventListener("click", () => signedOut(""));
  $("more-conversations").addEventListener("click", () =>
    loadConversations(Number($("more-conversations").dataset.offset)).catch((e) => alert(e.message)));
  $("search-form").addEventListener("submit", runSearch);
  $("pack-form").addEventListener("submit", showPack);
  $("pack-panel").addEventListener("toggle", () => { if ($("pack-panel").open) loadPackProjects().catch(() => {}); });
  start();
});
