// Small bar charts of the per-minute figures the server records (the last
// hour), drawn as SVG: one bar a minute, an optional second series as ticks.
import { h, s } from "./util.js";

const W = 600;
const H = 150;
const PAD = { left: 44, right: 10, top: 12, bottom: 22 };

function nice(max) {
  if (!(max > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

function label(v) {
  if (v >= 1000) return `${(v / 1000).toFixed(v >= 10000 ? 0 : 1)}k`;
  if (v >= 10 || v === 0) return v.toFixed(0);
  return v.toFixed(v >= 1 ? 1 : 2);
}

// minutes: [{t, ...}] from the server; value(m) -> number|null; extra(m) -> number|null
export function barChart({ title, unit, minutes, value, extra, extraName, now }) {
  const end = Math.floor(now / 60) * 60;
  const start = end - 59 * 60;
  const points = minutes
    .filter((m) => m.t >= start && m.t <= end)
    .map((m) => ({ t: m.t, v: value(m), x: extra ? extra(m) : null }))
    .filter((p) => p.v !== null && p.v !== undefined);
  const top = nice(Math.max(0, ...points.map((p) => Math.max(p.v, p.x ?? 0))));
  const iw = W - PAD.left - PAD.right;
  const ih = H - PAD.top - PAD.bottom;
  const bw = iw / 60;
  const y = (v) => PAD.top + ih - (ih * v) / top;
  const x = (t) => PAD.left + ((t - start) / 60) * bw;
  const last = points.at(-1);
  const peak = points.length ? Math.max(...points.map((p) => p.v)) : null;
  const summary = points.length
    ? `${title}, last hour: latest ${label(last.v)} ${unit}, peak ${label(peak)} ${unit}, ${points.length} minutes with requests`
    : `${title}, last hour: no requests yet`;
  const grid = [0, 0.5, 1].map((f) =>
    s("g", { class: "grid" },
      s("line", { x1: PAD.left, x2: W - PAD.right, y1: y(top * f), y2: y(top * f) }),
      s("text", { x: PAD.left - 6, y: y(top * f) + 4, "text-anchor": "end" }, label(top * f))),
  );
  const ticks = [60, 45, 30, 15, 0].map((ago) =>
    s("text", { x: x(end - ago * 60) + bw / 2, y: H - 6, "text-anchor": "middle", class: "axis" },
      ago ? `-${ago} min` : "now"),
  );
  const bars = points.map((p) =>
    s("rect", { class: "col", x: x(p.t) + 1, y: y(p.v), width: Math.max(1, bw - 2), height: Math.max(0, y(0) - y(p.v)) },
      s("title", {}, `${new Date(p.t * 1000).toLocaleTimeString("en-GB", { hour12: false, hour: "2-digit", minute: "2-digit" })}: ${label(p.v)} ${unit}`)),
  );
  const marks = points
    .filter((p) => p.x !== null && p.x !== undefined)
    .map((p) => s("line", { class: "tick", x1: x(p.t) + 1, x2: x(p.t) + bw - 1, y1: y(p.x), y2: y(p.x) }));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": summary, preserveAspectRatio: "none" },
    grid, bars, marks, ticks);
  return h("figure", { class: "chart" },
    h("figcaption", {},
      h("span", { class: "chart-title", text: title }),
      h("span", { class: "chart-value", text: points.length ? `${label(last.v)} ${unit}` : "–" }),
      extra ? h("span", { class: "chart-legend" }, h("span", { class: "swatch col" }), "mean ", h("span", { class: "swatch tick" }), extraName) : null),
    svg);
}
