// Small helpers the page's modules share: building elements, formatting
// numbers and times, talking to the server with the key when one is set.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) {
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return el;
}

// Sets textContent only when it changes (live rows update four times a second).
export function setText(el, text) {
  const value = text === null || text === undefined ? "" : String(text);
  if (el.textContent !== value) el.textContent = value;
}

export function int(n) {
  return n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US");
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1).replace(/\.0$/, "")} ${units[i]}`;
}

export function secs(n) {
  if (n === null || n === undefined) return "–";
  if (n < 1) return `${Math.round(n * 1000)} ms`;
  if (n < 60) return `${n.toFixed(n < 10 ? 2 : 1)} s`;
  const m = Math.floor(n / 60);
  return `${m} min ${Math.round(n - m * 60)} s`;
}

export function clock(unix) {
  const d = new Date(unix * 1000);
  return d.toLocaleTimeString("en-GB", { hour12: false });
}

export function ago(unix) {
  const d = Math.max(0, Date.now() / 1000 - unix);
  if (d < 60) return `${Math.round(d)} s ago`;
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  return `${Math.round(d / 3600)} h ago`;
}

export function pct(part, whole) {
  return whole ? `${Math.round((100 * part) / whole)}%` : "–";
}

// The API key, when the server wants one: kept for this tab, or in
// localStorage when the user asked to be remembered.
const KEY = "engy-key";
export const auth = {
  get key() {
    return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";
  },
  set(key, remember) {
    sessionStorage.setItem(KEY, key);
    if (remember) localStorage.setItem(KEY, key);
    else localStorage.removeItem(KEY);
  },
  clear() {
    sessionStorage.removeItem(KEY);
    localStorage.removeItem(KEY);
  },
  headers(extra = {}) {
    const key = this.key;
    return key ? { "x-api-key": key, ...extra } : { ...extra };
  },
};

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function errorOf(response) {
  let message = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    message = body?.error?.message || message;
  } catch {
    // not JSON: keep the status
  }
  return new HttpError(response.status, message);
}

export async function getJSON(path) {
  const response = await fetch(path, { headers: auth.headers(), cache: "no-store" });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

export async function postJSON(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: auth.headers({ "content-type": "application/json" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

// Reads a text/event-stream body: calls onEvent(name, data) for each event.
export async function readEvents(response, onEvent, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (true) {
    if (signal?.aborted) return;
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}
