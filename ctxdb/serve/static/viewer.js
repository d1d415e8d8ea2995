// ctxdb memory viewer: a static page over the HTTP API. The token stays in this tab's
// sessionStorage and goes out only as an Authorization header to this origin; every text from
// the API is written with textContent (never parsed as HTML).
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "ctxdb.token";

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
    const label = c.title || c.conversation_id;
    ol.append(el("li", {}, el("a", { href: conversationHref(c.conversation_id), text: label }),
      el("div", { class: "meta", text: `${c.turns} turns · ${when(c.last_activity_at)}` })));
    select.append(el("option", { value: c.conversation_id, text: label }));
  }
}

function explainText(explain) {
  if (!explain) return "";
  const arms = Object.entries(explain.arms).map(([arm, a]) =>
    `${arm}=${a.rank ? "r" + a.rank : "-"}(w${a.weight})`).join(" ");
  return `${arms} rrf=${explain.rrf.toFixed(4)} recency=${explain.recency.toFixed(2)} final=${explain.final.toFixed(4)}`;
}

function renderHits(response) {
  const ol = $("hits"); ol.replaceChildren();
  $("search-status").textContent = `${response.hits.length} hits (${response.mode})` +
    (response.warnings.length ? ` · ${response.warnings.join(", ")}` : "");
  for (const hit of response.hits) {
    const li = el("li", { class: "hit" },
      el("a", { href: turnHref(hit.conversation_id, hit.turn_id), class: "hit-link",
                text: `${hit.title || hit.conversation_id} · turn ${hit.ordinal ?? hit.turn_id}` }),
      el("div", { class: "meta", text: `${when(hit.ts)} · ${hit.matched_targets.join(", ")}` }));
    for (const s of hit.snippets) li.append(el("div", { class: "snippet", text: `${s.target}: ${s.text}` }));
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
  $("conversation-title").textContent = hits[0].title || conversationId;
  const ol = $("timeline"); ol.replaceChildren();
  for (const hit of hits) {
    const li = el("li", { class: "turn-row" },
      el("a", { href: turnHref(conversationId, hit.turn_id), text: `#${hit.ordinal ?? "?"} · ${when(hit.ts)}` }));
    for (const s of hit.snippets) li.append(el("div", { class: "snippet", text: `${s.target}: ${s.text}` }));
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

async function showTurn(conversationId, turnId) {
  const turn = await (await api(`/v1/conversations/${encodeURIComponent(conversationId)}/turns/${encodeURIComponent(turnId)}`)).json();
  $("turn-back").setAttribute("href", conversationHref(conversationId));
  $("turn-title").textContent = `${turn.title || conversationId} · turn ${turn.ordinal ?? turnId}`;
  $("turn-meta").textContent = `${when(turn.started_at)} – ${when(turn.ended_at)}${turn.error ? " · error" : ""}`;
  $("messages").replaceChildren(...turn.messages.map((m) =>
    el("div", { class: `message ${m.role}` }, el("div", { class: "meta", text: `${m.role}${m.event_type ? " · " + m.event_type : ""} · ${when(m.ts)}` }),
       el("div", { text: m.text }))));
  $("attachments").replaceChildren(...turn.attachments.map((c) => fileItem(c, conversationId)));
  $("files").replaceChildren(...turn.files.map((c) => fileItem(c, conversationId)));
  $("turn-summary").replaceChildren(...(turn.summary ? [el("h2", { text: "Summary" }), el("p", { text: turn.summary })] : []));
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
  $("who").textContent = "signed in";
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
