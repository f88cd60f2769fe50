// engy's page: what the server is doing, live. Reads /engy/status and the
// /engy/events stream (server/page.py); no third-party code, no build step.
import { barChart } from "./charts.js";
import { createChat } from "./chat.js";
import {
  ago, auth, bytes, clock, getJSON, h, HttpError, int, pct, postJSON, readEvents, secs, setText,
} from "./util.js";

const PANELS = ["requests", "sessions", "models", "cache", "figures", "chat"];
const SHOWN_REQUESTS = 200;
const STOP_WORDS = { end: "end of turn", tool_call: "tool call", length: "token limit", stop: "stop sequence" };
const LANE_WORDS = { main: "main conversation", title: "title side request", summary: "summary side request", subagent: "subagent" };

const state = {
  server: {},
  requests: new Map(),
  sessions: new Map(),
  figures: [],
  served: [],
  loaded: [],
  loadedAt: 0,
  installed: null,
  pulls: [],
  link: "connecting",
  open: new Set(), // request rows whose details are shown
};

// ---- panels and tabs -------------------------------------------------------

const tabs = PANELS.map((p) => document.getElementById(`tab-${p}`));
let active = "requests";

function show(panel, focus = false) {
  if (!PANELS.includes(panel)) panel = "requests";
  active = panel;
  for (const p of PANELS) {
    const tab = document.getElementById(`tab-${p}`);
    const on = p === panel;
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    document.getElementById(`panel-${p}`).hidden = !on;
  }
  if (focus) document.getElementById(`tab-${panel}`).focus();
  if (panel === "models" && state.installed === null) refreshInstalled();
  if (location.hash !== `#${panel}`) history.replaceState(null, "", `#${panel}`);
  render();
}

for (const tab of tabs) {
  tab.addEventListener("click", () => show(tab.id.slice(4)));
  tab.addEventListener("keydown", (e) => {
    const i = tabs.indexOf(tab);
    const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
    if (to === undefined) return;
    e.preventDefault();
    show(PANELS[(to + tabs.length) % tabs.length], true);
  });
}
window.addEventListener("hashchange", () => show(location.hash.slice(1)));

// ---- theme -------------------------------------------------------------------

const themeButton = document.getElementById("theme");
function applyTheme(theme) {
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
  themeButton.textContent = `Theme: ${theme}`;
  themeButton.setAttribute("aria-label", `Colour theme: ${theme} (change)`);
}
themeButton.addEventListener("click", () => {
  const order = ["auto", "light", "dark"];
  const next = order[(order.indexOf(localStorage.getItem("engy-theme") || "auto") + 1) % 3];
  localStorage.setItem("engy-theme", next);
  applyTheme(next);
});
applyTheme(localStorage.getItem("engy-theme") || "auto");

// ---- notices, the key, confirmations -----------------------------------------

const toasts = document.getElementById("toasts");
function notify(message, kind = "error") {
  const el = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status", text: message });
  toasts.append(el);
  setTimeout(() => el.remove(), 6000);
}

const keyDialog = document.getElementById("key-dialog");
const keyInput = document.getElementById("key-input");
const keyRemember = document.getElementById("key-remember");
const keyButton = document.getElementById("key-button");
function askKey(wrong) {
  document.getElementById("key-wrong").hidden = !wrong;
  keyInput.value = "";
  if (!keyDialog.open) keyDialog.showModal();
  keyInput.focus();
}
document.getElementById("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const key = keyInput.value.trim();
  if (!key) return;
  auth.set(key, keyRemember.checked);
  keyDialog.close();
  start();
});
document.getElementById("key-cancel").addEventListener("click", () => keyDialog.close());
keyButton.addEventListener("click", () => askKey(false));
document.getElementById("key-forget").addEventListener("click", () => {
  auth.clear();
  keyDialog.close();
  location.reload();
});

const confirmDialog = document.getElementById("confirm-dialog");
function confirmAction(message, action) {
  return new Promise((resolve) => {
    document.getElementById("confirm-text").textContent = message;
    const ok = document.getElementById("confirm-ok");
    ok.textContent = action;
    const done = (answer) => {
      confirmDialog.close();
      resolve(answer);
    };
    ok.onclick = () => done(true);
    document.getElementById("confirm-cancel").onclick = () => done(false);
    confirmDialog.oncancel = () => resolve(false);
    confirmDialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

// ---- the data ----------------------------------------------------------------

function setLink(link) {
  state.link = link;
  const el = document.getElementById("link");
  el.dataset.link = link;
  setText(el, { live: "live", connecting: "connecting…", key: "key needed", offline: "offline, retrying…" }[link]);
}

function takeRequests(list) {
  for (const r of list) state.requests.set(r.id, r);
  if (state.requests.size > 400) {
    const ids = [...state.requests.keys()].sort((a, b) => a - b);
    for (const id of ids.slice(0, ids.length - 400)) state.requests.delete(id);
  }
}

function takeModels(data) {
  state.served = data.served;
  state.loaded = data.loaded;
  state.loadedAt = Date.now() / 1000;
}

function takePulls(pulls) {
  const before = new Map(state.pulls.map((p) => [p.id, p.state]));
  state.pulls = pulls;
  if (pulls.some((p) => p.state !== before.get(p.id) && (p.state === "done" || p.state === "failed"))) refreshInstalled();
}

function onEvent(name, data) {
  if (name === "snapshot") {
    state.server = data.server;
    state.requests.clear();
    state.sessions.clear();
    takeRequests(data.requests);
    for (const s of data.sessions) state.sessions.set(s.key, s);
    state.figures = data.figures;
    takeModels(data);
    takePulls(data.pulls);
    keyButton.hidden = !data.server.keyed;
    document.getElementById("hidden-note").hidden = data.server.reveal;
  } else if (name === "update") {
    takeRequests(data.requests);
    for (const s of data.sessions) state.sessions.set(s.key, s);
    if (data.figures) state.figures = data.figures;
  } else if (name === "models") takeModels(data);
  else if (name === "pulls") takePulls(data);
  render();
}

let streamAbort = null;
async function connect() {
  if (streamAbort) streamAbort.abort();
  const controller = new AbortController();
  streamAbort = controller;
  while (!controller.signal.aborted) {
    try {
      const response = await fetch("/engy/events", { headers: auth.headers(), cache: "no-store", signal: controller.signal });
      if (response.status === 401) {
        setLink("key");
        clearData();
        askKey(Boolean(auth.key));
        return;
      }
      if (!response.ok) throw new HttpError(response.status, `HTTP ${response.status}`);
      setLink("live");
      await readEvents(response, onEvent, controller.signal);
    } catch (err) {
      if (controller.signal.aborted) return;
    }
    setLink("offline");
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}

function clearData() {
  state.requests.clear();
  state.sessions.clear();
  state.figures = [];
  state.loaded = [];
  state.served = [];
  state.installed = null;
  render();
}

async function refreshInstalled() {
  try {
    const data = await getJSON("/engy/models");
    takeModels(data);
    state.installed = data.installed;
    render();
  } catch (err) {
    if (err.status !== 401) notify(`models: ${err.message}`);
  }
}

function start() {
  setLink("connecting");
  connect();
  if (active === "models") refreshInstalled();
}

// ---- rendering -------------------------------------------------------------

let pending = false;
function render() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    const live = [...state.requests.values()].filter((r) => !["done", "failed", "stopped"].includes(r.state)).length;
    setText(document.getElementById("count-requests"), live ? String(live) : "");
    renderServing();
    ({ requests: renderRequests, sessions: renderSessions, models: renderModels, cache: renderCache, figures: renderFigures, chat: renderChat })[active]();
  });
}
// Counts that move with the clock (waiting, keep-alive) without news.
setInterval(() => {
  if (active === "models" || active === "sessions" || active === "figures") render();
}, 1000);

// The header names what this server serves and whether it is loaded, on
// every tab, before any request (a store served whole lists the first few).
const SERVING_SHOWN = 3;
function renderServing() {
  const line = document.getElementById("serving");
  const loaded = new Map(state.loaded.map((m) => [m.id, m]));
  const shown = state.served.slice(0, SERVING_SHOWN).map((m) => {
    const on = loaded.get(m.id);
    return h("span", { class: "served-model", dataset: { model: m.id } },
      h("strong", { text: m.id }), " ",
      on ? badge("ok", `loaded${on.backend ? `, ${on.backend}` : ""}`) : badge("muted", "not loaded yet"));
  });
  const more = state.served.length - shown.length;
  if (!state.served.length) line.replaceChildren(h("span", { class: "muted", text: "no model served" }));
  else line.replaceChildren(h("span", { class: "muted", text: "serving" }), ...shown,
    ...(more > 0 ? [h("span", { class: "muted", text: `and ${more} more (Models)` })] : []));
}

function badge(kind, text) {
  return h("span", { class: `badge b-${kind}`, text });
}

function stateParts(r) {
  switch (r.state) {
    case "queued":
      return { sub: `waiting ${secs(r.duration)}` };
    case "reading": {
      const share = r.prompt_tokens ? r.read / r.prompt_tokens : 0;
      const eta = r.eta === null ? "" : ` · ETA ${secs(r.eta)}`;
      return { progress: share, sub: `${Math.floor(share * 100)}% of ${int(r.prompt_tokens)}${eta}` };
    }
    case "generating":
      return { sub: r.tps === null ? "" : `${r.tps.toFixed(1)} tok/s` };
    case "done":
      return { sub: `${STOP_WORDS[r.stop] || r.stop}${r.tps === null ? "" : ` · ${r.tps.toFixed(1)} tok/s`}` };
    case "failed":
      return { sub: r.error };
    default:
      return { sub: "client went away or stopped it" };
  }
}

const COLUMNS = [
  ["when", "When"], ["client", "Client"], ["model", "Model"], ["endpoint", "Endpoint"], ["state", "State"],
  ["prompt", "Prompt"], ["cached", "Cached"], ["output", "Generated"], ["ttft", "First token"], ["duration", "Duration"],
];

function requestRow(r) {
  const tr = h("tr", { class: "req", dataset: { id: r.id }, tabindex: 0, "aria-expanded": "false" });
  for (const [key, name] of COLUMNS) tr.append(h("td", { class: `c-${key}`, "data-label": name }));
  const cell = tr.querySelector(".c-state");
  cell.append(h("span", { class: "badge" }), h("span", { class: "bar", hidden: true }, h("span")), h("span", { class: "sub" }));
  const toggle = () => {
    const id = Number(tr.dataset.id);
    if (state.open.has(id)) state.open.delete(id);
    else state.open.add(id);
    render();
  };
  tr.addEventListener("click", toggle);
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      toggle();
    }
  });
  return tr;
}

function fillRow(tr, r) {
  tr.dataset.state = r.state;
  const c = (key) => tr.querySelector(`.c-${key}`);
  setText(c("when"), clock(r.at));
  setText(c("client"), r.client);
  setText(c("model"), r.model);
  setText(c("endpoint"), r.endpoint);
  const cell = c("state");
  const [b, bar, sub] = cell.children;
  b.className = `badge b-${r.state}`;
  setText(b, r.state);
  const parts = stateParts(r);
  bar.hidden = parts.progress === undefined;
  if (!bar.hidden) bar.firstChild.style.width = `${(parts.progress * 100).toFixed(1)}%`;
  setText(sub, parts.sub);
  sub.title = r.state === "failed" ? r.error : "";
  setText(c("prompt"), r.state === "queued" ? "–" : int(r.prompt_tokens));
  setText(c("cached"), r.state === "queued" ? "–" : `${int(r.cached_tokens)}${r.prompt_tokens ? ` (${pct(r.cached_tokens, r.prompt_tokens)})` : ""}`);
  setText(c("output"), int(r.output_tokens));
  setText(c("ttft"), secs(r.ttft));
  setText(c("duration"), secs(r.duration));
  tr.setAttribute("aria-expanded", String(state.open.has(r.id)));
}

function detailRow(r) {
  const session = state.sessions.get(r.session);
  const items = [];
  const add = (term, value) => value && items.push(h("dt", { text: term }), h("dd", { text: value }));
  add("Session", session ? `${session.title || sessionName(session)} (${LANE_WORDS[r.lane] || r.lane}, turn ${r.turn})` : "");
  add("Cache", verdictText(r));
  add("Changed since the previous turn", r.changed ? `${r.changed} (since turn ${r.turn - 1})` : "");
  add("Where the prompt left the cache", r.miss);
  add("Error", r.error);
  if (state.server.reveal) {
    add("Prompt (last user text)", r.preview || "(none)");
    add("Answer", r.answer || (r.state === "done" ? "(no text)" : ""));
  } else add("Prompt", "hidden: this page is not on loopback and the server has no key");
  return h("tr", { class: "detail", dataset: { for: r.id } }, h("td", { colspan: COLUMNS.length }, h("dl", {}, items)));
}

const rows = new Map();
function renderRequests() {
  const body = document.getElementById("requests-body");
  const list = [...state.requests.values()].sort((a, b) => b.id - a.id).slice(0, SHOWN_REQUESTS);
  document.getElementById("requests-empty").hidden = list.length > 0;
  const wanted = [];
  for (const r of list) {
    let tr = rows.get(r.id);
    if (!tr) {
      tr = requestRow(r);
      rows.set(r.id, tr);
    }
    fillRow(tr, r);
    wanted.push(tr);
    if (state.open.has(r.id)) wanted.push(detailRow(r));
  }
  for (const [id, tr] of rows) if (!state.requests.has(id)) rows.delete(id);
  // Reorder in place: rows keep their focus and the reader keeps their place.
  let at = body.firstChild;
  for (const tr of wanted) {
    if (tr !== at) body.insertBefore(tr, at);
    else at = at.nextSibling;
  }
  while (at) {
    const next = at.nextSibling;
    at.remove();
    at = next;
  }
  const live = list.filter((r) => !["done", "failed", "stopped"].includes(r.state)).length;
  setText(document.getElementById("requests-summary"), `${live} running · ${list.length - live} finished · newest first`);
}

// ---- sessions ----------------------------------------------------------------

function sessionName(s) {
  const who = s.client.replace(/ [\d.]+$/, "");
  return s.id ? `${who} session ${s.id.slice(0, 8)}` : `${who} conversation`;
}

function verdictText(t) {
  if (t.verdict === "cached") return `read from cache: ${int(t.cached_tokens)} of ${int(t.prompt_tokens)} tokens`;
  if (t.verdict === "missed") return `missed the cache: ${int(t.cached_tokens)} of ${int(t.prompt_tokens)} tokens cached, the previous turn had ${int(t.prev_prompt)}`;
  if (t.verdict === "first") return `first turn: ${int(t.cached_tokens)} of ${int(t.prompt_tokens)} tokens cached`;
  return "";
}

const VERDICT = { cached: ["ok", "from cache"], missed: ["bad", "missed"], first: ["plain", "first turn"] };

function turnRow(t) {
  const [kind, word] = VERDICT[t.verdict] || ["plain", t.state];
  const why = [];
  if (t.changed) why.push(h("span", { class: "changed", text: `${t.changed} since turn ${t.turn - 1}` }));
  // A turn read from cache still evaluates its new message: only a miss says where.
  if (t.miss && t.verdict === "missed") why.push(h("span", { class: "miss", text: `diverged at ${t.miss}` }));
  if (!why.length && t.verdict === "missed") why.push(h("span", { class: "muted", text: "the prompt repeats the previous turn; its cache was overwritten or evicted" }));
  const share = t.prompt_tokens ? t.cached_tokens / t.prompt_tokens : 0;
  return h("tr", { class: "turn", dataset: { id: t.id, verdict: t.verdict || "" } },
    h("td", { "data-label": "Turn", text: t.turn }),
    h("td", { "data-label": "When", text: clock(t.at) }),
    h("td", { "data-label": "Prompt", text: int(t.prompt_tokens) }),
    h("td", { "data-label": "Cached", class: "c-share" },
      h("span", { class: "bar" }, h("span", { class: "fill" })), ` ${int(t.cached_tokens)} (${pct(t.cached_tokens, t.prompt_tokens)})`),
    h("td", { "data-label": "Generated", text: int(t.output_tokens) }),
    h("td", { "data-label": "Cache", class: "c-verdict" }, badge(kind, word)),
    h("td", { "data-label": "Why", class: "c-why" }, why));
}

function renderSessions() {
  const root = document.getElementById("sessions-list");
  const list = [...state.sessions.values()].sort((a, b) => b.last - a.last).slice(0, 20);
  document.getElementById("sessions-empty").hidden = list.length > 0;
  const cards = list.map((s) => {
    const turns = s.lanes.reduce((n, l) => n + l.turns, 0);
    const source = s.source === "prefix" ? "grouped by a shared prompt prefix" : `session id from ${s.source}`;
    return h("article", { class: "card session", dataset: { key: s.key } },
      h("header", {},
        h("h3", { class: "session-title", text: s.title || sessionName(s) }),
        h("p", { class: "muted small" },
          [s.client, s.id ? `id ${s.id}` : null, source, `${turns} request${turns === 1 ? "" : "s"}`,
            `${pct(s.cached_tokens, s.prompt_tokens)} of prompt tokens from cache`, `last ${ago(s.last)}`].filter(Boolean).join(" · "))),
      s.lanes.map((lane) => h("section", { class: "lane", dataset: { kind: lane.kind } },
        h("h4", {}, LANE_WORDS[lane.kind] || lane.kind, lane.name ? h("span", { class: "muted small", text: ` ${lane.name}` }) : null,
          h("span", { class: "muted small", text: ` · ${lane.turns} turn${lane.turns === 1 ? "" : "s"}` })),
        h("div", { class: "table-wrap" },
          h("table", { class: "turns" },
            h("thead", {}, h("tr", {}, ["Turn", "When", "Prompt", "Cached", "Generated", "Cache", "Why"].map((c) => h("th", { scope: "col", text: c })))),
            h("tbody", {}, lane.entries.map(turnRow)))))));
  });
  root.replaceChildren(...cards);
  for (const fill of root.querySelectorAll(".turn")) {
    const id = Number(fill.dataset.id);
    const t = list.flatMap((s) => s.lanes.flatMap((l) => l.entries)).find((e) => e.id === id);
    if (t) fill.querySelector(".fill").style.width = `${t.prompt_tokens ? (100 * t.cached_tokens) / t.prompt_tokens : 0}%`;
  }
}

// ---- models ------------------------------------------------------------------

async function act(path, body, done) {
  try {
    const answer = await postJSON(path, body);
    if (done) notify(done(answer), "ok");
  } catch (err) {
    notify(err.message);
  }
  refreshInstalled();
}

function button(text, attrs, onclick) {
  return h("button", { type: "button", ...attrs, disabled: attrs.disabled || !state.server.manage, onclick }, text);
}

function keepAlive(m) {
  if (m.keep_alive_left === null) return "kept";
  if (m.busy) return "busy";
  return secs(Math.max(0, m.keep_alive_left - (Date.now() / 1000 - state.loadedAt)));
}

// Faults the model's thread answered and went on from (a failed restore, decode, save).
function faultsLine(m) {
  const seen = Object.entries(m.faults || {});
  if (!seen.length) return null;
  const text = "faults survived: " + seen.map(([phase, n]) => `${phase} ×${n}`).join(", ");
  return h("div", { class: "small", dataset: { faults: "" }, text });
}

function renderModels() {
  const loaded = document.getElementById("loaded-body");
  document.getElementById("loaded-empty").hidden = state.loaded.length > 0;
  document.getElementById("loaded-table").parentElement.hidden = state.loaded.length === 0;
  loaded.replaceChildren(...state.loaded.map((m) => {
    const busy = m.sequences.filter((q) => q.busy).length;
    return h("tr", { dataset: { model: m.id } },
      h("th", { scope: "row", "data-label": "Model" }, m.id, m.images ? badge("plain", "images") : null,
        ...(m.limits || []).map((text) => h("div", { class: "small muted", text })),
        faultsLine(m)),
      h("td", { "data-label": "Window", text: `${int(m.context_length)} tokens${m.fitted ? " (auto)" : ""}` }),
      h("td", { "data-label": "Backend", text: m.backend }),
      h("td", { "data-label": "Memory" }, bytes(m.cost),
        m.kv_bytes ? h("div", { class: "small muted", text: `KV ${m.kv_types || "f16"} ${bytes(m.kv_bytes)}` }) : null),
      h("td", { "data-label": "Layers", class: "small", text: m.split || (m.offloaded ? `${m.offloaded} offloaded` : "CPU") }),
      h("td", { "data-label": "Tool calls", text: m.family || "–" }),
      h("td", { "data-label": "Keep-alive", text: keepAlive(m) }),
      h("td", { "data-label": "Sequences", text: m.sequences.length ? `${busy} of ${m.sequences.length} busy` : "–" }),
      h("td", { "data-label": "" }, button("Unload", { class: "secondary", "aria-label": `Unload ${m.id}`, disabled: m.busy },
        () => act("/engy/models/unload", { model: m.id }, (a) => `unloaded ${a.unloaded}`))));
  }));

  const installed = document.getElementById("installed-body");
  // The store's models, and the ones this server was given by path.
  const list = [...(state.installed || [])];
  for (const m of state.served) {
    if (state.installed !== null && !list.some((i) => i.id === m.id)) {
      list.push({ id: m.id, quant: m.quantization, size: null, context: m.context_length, source: "engy serve MODEL", images: m.images, served: true, removable: false });
    }
  }
  document.getElementById("installed-empty").hidden = list.length > 0 || state.installed === null;
  document.getElementById("installed-table").parentElement.hidden = list.length === 0;
  const loadedIds = new Set(state.loaded.map((m) => m.id));
  installed.replaceChildren(...list.map((m) => {
    const isLoaded = loadedIds.has(m.id);
    const status = isLoaded ? badge("ok", "loaded") : m.served ? badge("plain", "served") : badge("muted", "not served");
    return h("tr", { dataset: { model: m.id } },
      h("th", { scope: "row", "data-label": "Model" }, m.id, m.images ? badge("plain", "images") : null),
      h("td", { "data-label": "Quant", text: m.quant || "–" }),
      h("td", { "data-label": "Size", text: bytes(m.size) }),
      h("td", { "data-label": "Context", text: m.context ? int(m.context) : "–" }),
      h("td", { "data-label": "Source", text: m.source }),
      h("td", { "data-label": "Status" }, status),
      h("td", { "data-label": "", class: "actions" },
        button("Load", { "aria-label": `Load ${m.id}`, disabled: isLoaded || !m.served, title: m.served ? "" : "this server was started for another model" },
          () => act("/engy/models/load", { model: m.id }, (a) => `loaded ${a.loaded}`)),
        button("Remove", { class: "danger", "aria-label": `Remove ${m.id}`, disabled: !m.removable }, async () => {
          const what = m.source === "file" ? "forget it (the file stays where it is)" : "delete its files";
          if (await confirmAction(`Remove ${m.id}${m.quant ? ` (${m.quant})` : ""}? This will ${what}.`, "Remove")) {
            act("/engy/models/rm", { model: m.quant ? `${m.id}@${m.quant}` : m.id }, (a) => `removed ${a.removed.join(", ") || m.id}`);
          }
        })));
  }));

  const pulls = document.getElementById("pulls");
  pulls.replaceChildren(...[...state.pulls].reverse().map((p) => {
    const files = p.files.map((f) => {
      const share = f.total ? f.done / f.total : null;
      return h("div", { class: "pull-file" },
        h("span", { class: "name", text: f.name }),
        h("span", { class: "bar", role: "progressbar", "aria-label": `${f.name} downloaded`, "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": share === null ? null : Math.round(share * 100) },
          h("span", { class: "fill", dataset: { share: share ?? 0 } })),
        h("span", { class: "small", text: `${bytes(f.done)}${f.total ? ` of ${bytes(f.total)}` : ""}${f.speed ? ` · ${bytes(f.speed)}/s` : ""}` }));
    });
    return h("div", { class: "pull card", dataset: { state: p.state, ref: p.ref } },
      h("div", { class: "pull-head" }, h("strong", { text: p.ref }), badge(p.state === "done" ? "ok" : p.state === "failed" ? "bad" : "plain", p.state),
        p.model && p.state === "done" ? h("span", { class: "muted small", text: `installed as ${p.model}` }) : null),
      files, p.error ? h("p", { class: "error small", text: p.error }) : null);
  }));
  for (const fill of pulls.querySelectorAll(".fill")) fill.style.width = `${(Number(fill.dataset.share) * 100).toFixed(1)}%`;
  document.getElementById("pull-go").disabled = !state.server.manage;
}

document.getElementById("pull-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const input = document.getElementById("pull-ref");
  const ref = input.value.trim();
  if (!ref) return;
  postJSON("/engy/models/pull", { ref }).then((job) => {
    input.value = "";
    state.pulls = [...state.pulls.filter((p) => p.id !== job.id), job];
    render();
  }, (err) => notify(err.message));
});

// ---- cache -------------------------------------------------------------------

function renderCache() {
  const root = document.getElementById("cache-list");
  const prompt = state.figures.reduce((n, m) => n + m.prompt_tokens, 0);
  const cached = state.figures.reduce((n, m) => n + m.cached_tokens, 0);
  setText(document.getElementById("cache-summary"), prompt
    ? `Last hour: ${int(cached)} of ${int(prompt)} prompt tokens were read from cache (${pct(cached, prompt)}).`
    : "Last hour: no requests yet.");
  document.getElementById("cache-empty").hidden = state.loaded.length > 0;
  root.replaceChildren(...state.loaded.map((m) => h("article", { class: "card", dataset: { model: m.id } },
    h("h3", { text: m.id }),
    m.caches.length
      ? h("div", { class: "table-wrap" }, h("table", { class: "tiers" },
        h("thead", {}, h("tr", {}, ["Tier", "Entries", "Size", "Budget", "Hits", "Tokens restored"].map((c) => h("th", { scope: "col", text: c })))),
        h("tbody", {}, m.caches.map((c) => h("tr", { dataset: { tier: c.tier } },
          h("th", { scope: "row", "data-label": "Tier", text: c.tier === "ram" ? "RAM" : c.tier }),
          h("td", { "data-label": "Entries", text: int(c.entries) }),
          h("td", { "data-label": "Size", text: bytes(c.bytes) }),
          h("td", { "data-label": "Budget" }, h("span", { class: "bar", title: pct(c.bytes, c.budget) }, h("span", { class: "fill", dataset: { share: c.budget ? c.bytes / c.budget : 0 } })), ` ${pct(c.bytes, c.budget)} of ${bytes(c.budget)}`),
          h("td", { "data-label": "Hits", text: int(c.hits) }),
          h("td", { "data-label": "Tokens restored", text: int(c.restored_tokens) }))))))
      : h("p", { class: "muted", text: "This model's engine reports no saved prompt states yet." }),
    h("h4", { text: "Sequences" }),
    m.sequences.length
      ? h("ul", { class: "seqs" }, m.sequences.map((q) => h("li", { class: q.busy ? "busy" : "" },
        h("strong", { text: `#${q.index}` }), ` ${int(q.tokens)} tokens held`, q.busy ? badge("plain", "busy") : null)))
      : h("p", { class: "muted", text: "No sequences reported." }))));
  for (const fill of root.querySelectorAll(".fill")) fill.style.width = `${Math.min(100, Number(fill.dataset.share) * 100).toFixed(1)}%`;
}

// ---- figures -----------------------------------------------------------------

function renderFigures() {
  const root = document.getElementById("charts");
  const now = Date.now() / 1000;
  const minutes = state.figures;
  root.replaceChildren(
    barChart({ title: "Decode", unit: "tok/s", minutes, now, value: (m) => m.decode_tps }),
    barChart({ title: "Time to first token", unit: "s", minutes, now, value: (m) => m.ttft_mean, extra: (m) => m.ttft_max, extraName: "max" }),
    barChart({ title: "Prefill", unit: "tok/s", minutes, now, value: (m) => m.prefill_tps }),
    barChart({ title: "Requests", unit: "a minute", minutes, now, value: (m) => m.requests }),
  );
  const total = minutes.reduce((n, m) => n + m.requests, 0);
  const out = minutes.reduce((n, m) => n + m.output_tokens, 0);
  setText(document.getElementById("figures-summary"), `Last hour: ${int(total)} requests, ${int(out)} tokens generated.`);
}

// ---- chat --------------------------------------------------------------------

const chat = createChat(document.getElementById("chat"), {
  models: () => {
    const loaded = new Map(state.loaded.map((m) => [m.id, m]));
    return state.served.map((m) => ({ ...m, loaded: loaded.has(m.id), images: m.images || Boolean(loaded.get(m.id)?.images) }));
  },
  notify,
});
function renderChat() {
  chat.refresh();
}

show(location.hash.slice(1) || "requests");
start();
