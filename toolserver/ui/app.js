// toolserver inspector: plain JavaScript, no build step, nothing fetched from outside this server.
// Every request carries the API key (if one is set) as a bearer header, never in a URL; images arrive
// through fetch() as blobs for the same reason. Everything a call wrote is shown with textContent.
"use strict";

const KEY_STORE = "toolserver-inspector-key";
const REFRESH_MS = 2000;
// `archived`: the open session is a finished one, read from the trajectory archive (its images are thumbnails).
const state = { sessionId: null, archived: false, trajectory: null, selected: null, blobs: new Map() };
const $ = (id) => document.getElementById(id);

function apiKey() { return sessionStorage.getItem(KEY_STORE) || ""; }

class HttpError extends Error {
  constructor(status, body) { super(body.detail || `HTTP ${status}`); this.status = status; this.code = body.code; }
}

async function api(path) {
  const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
  const response = await fetch(path, { headers });
  if (response.status === 401) { $("key-form").hidden = false; }
  if (!response.ok) {
    let body = {};
    try { body = await response.json(); } catch (_) { /* not JSON */ }
    throw new HttpError(response.status, body);
  }
  return response;
}

function say(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  for (const child of children) node.append(child);
  return node;
}

// An image of the open session, as a thumbnail no larger than `side` px (cached as a blob URL).
async function imageUrl(key, side) {
  const cacheKey = `${state.sessionId}/${key}/${state.archived ? "archived" : side}`;
  if (!state.blobs.has(cacheKey)) {
    const id = encodeURIComponent(state.sessionId);
    const path = state.archived ? `/v1/trajectories/${id}/images/${encodeURIComponent(key)}`
      : `/v1/sessions/${id}/images/${encodeURIComponent(key)}?max_side=${side}`;
    const blob = await (await api(path)).blob();
    state.blobs.set(cacheKey, URL.createObjectURL(blob));
  }
  return state.blobs.get(cacheKey);
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

// -- the session list ---------------------------------------------------------------------------------
async function loadSessions() {
  const body = $("session-table").tBodies[0];
  try {
    const list = await (await api("/v1/sessions?limit=200")).json();
    body.replaceChildren(...list.sessions.map((s) => el("tr", {},
      el("td", {}, el("a", { href: `#${s.session_id}`, textContent: s.session_id.slice(0, 12) + "…" })),
      el("td", { textContent: s.profile }), el("td", { textContent: String(s.images) }),
      el("td", { textContent: String(s.calls) }), el("td", { textContent: age(s.age_s) }))));
    $("sessions-note").hidden = list.total <= list.sessions.length;
    $("sessions-note").textContent = `showing ${list.sessions.length} of ${list.total} sessions`;
    say("");
  } catch (error) {
    body.replaceChildren();
    $("sessions-note").hidden = false;
    $("sessions-note").textContent = error.code === "listing_disabled"
      ? "Listing sessions is off for callers on other machines; open /ui#<session id> to inspect one." : error.message;
    if (error.status !== 403) say(error.message, true);
  }
}

// -- finished sessions (the trajectory archive), newest first, filtered --------------------------------
function finishedQuery() {
  const params = new URLSearchParams({ limit: "200" });
  const fields = { q: "filter-q", profile: "filter-profile", outcome: "filter-outcome", failed: "filter-failed" };
  for (const [name, id] of Object.entries(fields)) {
    const value = $(id).value.trim();
    if (value) params.set(name, value);
  }
  return params;
}

async function loadFinished() {
  const body = $("finished-table").tBodies[0];
  const note = $("finished-note");
  try {
    const list = await (await api(`/v1/trajectories?${finishedQuery()}`)).json();
    body.replaceChildren(...list.sessions.map((s) => el("tr", {},
      el("td", {}, el("a", { href: `#${s.session_id}`, textContent: s.session_id.slice(0, 12) + "…" })),
      el("td", { textContent: s.profile }), el("td", { textContent: s.outcome }),
      el("td", { textContent: String(s.images) }), el("td", { textContent: String(s.calls) }),
      el("td", { textContent: String(s.failed_calls), className: s.failed_calls ? "failed" : "" }),
      el("td", { textContent: new Date(s.ended_at * 1000).toLocaleString(),
                 title: `${age(Date.now() / 1000 - s.ended_at)} ago` }))));
    note.hidden = list.total > 0 && list.total <= list.sessions.length;
    note.textContent = list.total ? `showing ${list.sessions.length} of ${list.total} finished sessions`
      : "No finished session matches (sessions appear here once released, expired or evicted).";
  } catch (error) {
    body.replaceChildren();
    note.hidden = false;
    note.textContent = error.code === "listing_disabled"
      ? "Listing sessions is off for callers on other machines; open /ui#<session id> to inspect one." : error.message;
  }
}

async function loadProfileNames() {
  try {
    const profiles = await (await api("/v1/profiles")).json();
    $("profile-names").replaceChildren(...profiles.map((p) => el("option", { value: p.name })));
  } catch (_) { /* the filter still takes any text */ }
}

// -- one session ----------------------------------------------------------------------------------------
async function openSession(sessionId) {
  if (sessionId !== state.sessionId) {
    state.sessionId = sessionId;
    state.archived = false;
    state.trajectory = null;
    state.selected = null;
    $("detail").hidden = true;
    $("images").replaceChildren();
    $("calls").replaceChildren();
  }
  $("session").hidden = !sessionId;
  if (sessionId) await refreshSession();
}

async function refreshSession() {
  const sessionId = state.sessionId;
  if (state.archived && state.trajectory) return;  // a finished session does not change
  let trajectory;
  const id = encodeURIComponent(sessionId);
  try {
    trajectory = await (await api(`/v1/sessions/${id}/trajectory`)).json();
  } catch (error) {
    if (error.status !== 404 && error.status !== 410) {
      say(`session ${sessionId.slice(0, 12)}…: ${error.message}`, true);
      return;
    }
    try {  // no longer live: the archive may keep it
      trajectory = await (await api(`/v1/trajectories/${id}`)).json();
    } catch (archived) {
      say(`session ${sessionId.slice(0, 12)}…: ${error.message}; ${archived.message}`, true);
      return;
    }
    if (sessionId !== state.sessionId) return;
    if (!state.archived) { state.archived = true; state.trajectory = null; }
  }
  if (sessionId !== state.sessionId) return;
  const previous = state.trajectory;
  state.trajectory = trajectory;
  const ended = state.archived
    ? ` · finished (${trajectory.outcome}, ${new Date(trajectory.ended_at * 1000).toLocaleString()})` : " · live";
  $("session-title").textContent = `Session ${trajectory.session_id} · ${trajectory.profile}${ended}`;
  $("dropped").textContent = trajectory.dropped_calls ? `(${trajectory.dropped_calls} older calls dropped)` : "";
  renderRewards(trajectory.rewards || []);
  if (!previous || previous.images.length !== trajectory.images.length) await renderImages(trajectory);
  if (!previous || previous.calls.length !== trajectory.calls.length
      || previous.dropped_calls !== trajectory.dropped_calls) renderCalls(trajectory);
  if (state.selected === null && trajectory.calls.length) await selectCall(trajectory.calls[0].seq);
}

async function renderImages(trajectory) {
  const figures = [];
  for (const image of trajectory.images) {
    const img = el("img", { alt: image.key, title: `${image.width}×${image.height}, ${image.origin}` });
    figures.push(el("figure", {}, img, el("figcaption", { textContent: `${image.index} · ${image.key}` })));
    imageUrl(image.key, 192).then((url) => { img.src = url; }).catch(() => { img.alt = `${image.key} (gone)`; });
  }
  $("images").replaceChildren(...figures);
}

function renderRewards(rewards) {
  $("rewards").hidden = !rewards.length;
  const terms = (r) => Object.entries(r.terms).map(([name, value]) => `${name} ${value}`).join(" · ");
  $("reward-table").tBodies[0].replaceChildren(...rewards.map((r) => el("tr", {},
    el("td", { textContent: String(r.total) }), el("td", { textContent: terms(r) }),
    el("td", { textContent: r.finished ? "yes" : "no" }), el("td", { textContent: r.violation || "" }),
    el("td", { textContent: r.source }))));
}

function renderCalls(trajectory) {
  $("calls").replaceChildren(...trajectory.calls.map((call) => {
    const item = el("li", { className: call.ok ? "" : "error" },
      el("span", { className: "time", textContent: `${call.duration_ms.toFixed(1)} ms` }),
      el("span", { className: "seq", textContent: `#${call.seq} ` }),
      el("span", { className: "tool", textContent: call.tool }),
      call.ok ? "" : el("span", { className: "code", textContent: ` ${call.error_code}` }));
    item.dataset.seq = String(call.seq);
    if (call.seq === state.selected) item.classList.add("selected");
    item.addEventListener("click", () => selectCall(call.seq));
    return item;
  }));
}

function sourceBox(call) {
  const meta = call.meta || {};
  if (Array.isArray(meta.box_original)) return meta.box_original;
  if (Array.isArray(meta.boxes_original) && meta.boxes_original.length) return meta.boxes_original[0];
  return null;
}

async function selectCall(seq) {
  const call = state.trajectory.calls.find((c) => c.seq === seq);
  if (!call) return;
  state.selected = seq;
  for (const item of $("calls").children) item.classList.toggle("selected", item.dataset.seq === String(seq));
  $("detail").hidden = false;
  $("call-text").textContent = call.text || "(no text: the tool returned its image alone)";
  $("call-meta").textContent = JSON.stringify({ arguments: call.arguments, meta: call.meta }, null, 2);
  const sourceKey = (call.meta || {}).source;
  const source = state.trajectory.images.find((image) => image.key === sourceKey);
  const box = sourceBox(call);
  $("box").hidden = true;
  $("source-caption").textContent = source ? `source: ${source.key} (${source.width}×${source.height})` : "no source image";
  $("source-img").hidden = !source;
  if (source) {
    const img = $("source-img");
    img.onload = () => drawBox(img, source, box);
    img.src = await imageUrl(source.key, 1024);
    if (img.complete && img.naturalWidth) drawBox(img, source, box);
  }
  const produced = call.keys.length ? call.keys[0] : null;
  $("result-img").hidden = !produced;
  $("result-caption").textContent = produced ? `produced: ${call.keys.join(", ")}` : "no image produced";
  if (produced) $("result-img").src = await imageUrl(produced, 1024);
}

// The call's box, in original pixels, scaled to the source image as displayed.
function drawBox(img, source, box) {
  const frame = $("box");
  if (!box || !img.clientWidth) { frame.hidden = true; return; }
  const sx = img.clientWidth / source.width;
  const sy = img.clientHeight / source.height;
  Object.assign(frame.style, {
    left: `${img.offsetLeft + box[0] * sx}px`, top: `${img.offsetTop + box[1] * sy}px`,
    width: `${(box[2] - box[0]) * sx}px`, height: `${(box[3] - box[1]) * sy}px`,
  });
  frame.dataset.box = JSON.stringify(box);
  frame.hidden = false;
}

// -- wiring -----------------------------------------------------------------------------------------------
function route() { openSession(decodeURIComponent(location.hash.slice(1)) || null); }

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY_STORE, $("key").value);
  $("key").value = "";
  $("key-form").hidden = true;
  loadSessions();
  loadFinished();
  route();
});
$("finished-filters").addEventListener("input", () => loadFinished());
$("finished-filters").addEventListener("submit", (event) => { event.preventDefault(); loadFinished(); });
window.addEventListener("hashchange", route);
window.addEventListener("resize", () => { if (state.selected !== null) selectCall(state.selected); });

loadSessions();
loadFinished();
loadProfileNames();
route();
setInterval(() => {  // refresh while the rollout runs
  loadSessions();
  loadFinished();
  if (state.sessionId) refreshSession();
}, REFRESH_MS);
