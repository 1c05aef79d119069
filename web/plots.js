// Plots besides the Pareto chart, as inline SVG: the history of the first objective over the
// trials (with its best-so-far line), the parameter importances the data supports, the small
// horizontal bars (per-position acceptance, latency percentiles) and the latency histograms.

import { el, ticks } from "./chart.js";
import { h, metricLabel } from "./util.js";

// The objective's value per trial over the trial number: a dot per measured trial (hollow:
// infeasible under the chart's SLO; grey: not a point of the chart, so its feasibility is not
// known here), a cross on the axis per failed or pruned one, and the best feasible value so
// far as a step line. `feasible`: Map trial number → bool (the chart's points).
export function historyPlot(host, trials, { metric, direction, feasible }) {
  host.replaceChildren();
  const W = 720, H = 240, m = { l: 64, r: 20, t: 14, b: 40 };
  const rows = [...trials].sort((a, b) => a.number - b.number);
  const measured = rows.filter((t) => t.state === "complete" && Number.isFinite(t.metrics?.[metric]));
  if (!measured.length) {
    host.append(h("p", { class: "meta", text: `No trial has measured ${metricLabel(metric)} yet.` }));
    return;
  }
  const last = Math.max(1, ...rows.map((t) => t.number));
  const ymax = Math.max(1e-6, ...measured.map((t) => t.metrics[metric])) * 1.12;
  const px = (n) => m.l + (n / last) * (W - m.l - m.r);
  const py = (v) => H - m.b - (v / ymax) * (H - m.t - m.b);
  const isBetter = (a, b) => (direction === "maximize" ? a > b : a < b);
  let best = null;
  const steps = [];
  for (const t of measured) {
    const v = t.metrics[metric];
    if (feasible.get(t.number) === true && (best === null || isBetter(v, best))) best = v;
    if (best !== null) steps.push([t.number, best]);
  }
  const bestTrial = measured.find((t) => t.metrics[metric] === best && feasible.get(t.number) === true);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "history", role: "img", "data-testid": "history-plot",
    "aria-label": `${metricLabel(metric)} of each of ${measured.length} measured trials by trial number` +
      (best !== null ? `; best feasible ${best.toFixed(2)} at trial ${bestTrial.number}` : "; none feasible") }, host);
  for (const t of ticks(ymax, 4)) {
    el("line", { x1: m.l, x2: W - m.r, y1: py(t), y2: py(t), class: "grid" }, svg);
    el("text", { x: m.l - 6, y: py(t) + 4, class: "tick", "text-anchor": "end" }, svg).textContent = t;
  }
  for (const n of ticks(last, Math.min(last, 10)).filter(Number.isInteger)) {
    el("text", { x: px(n), y: H - m.b + 16, class: "tick", "text-anchor": "middle" }, svg).textContent = n;
  }
  el("text", { x: (W + m.l) / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, svg).textContent = "trial number";
  el("text", { x: 14, y: H / 2, class: "axis", "text-anchor": "middle", transform: `rotate(-90 14 ${H / 2})` }, svg)
    .textContent = metricLabel(metric);
  if (steps.length) {
    const d = steps.map(([n, v], i) => (i ? `H${px(n)}V${py(v)}` : `M${px(n)},${py(v)}`)).join("") + `H${px(last)}`;
    el("path", { d, class: "best-line", "data-testid": "best-so-far", "data-values": steps.map((s) => s[1]).join(",") }, svg);
  }
  for (const t of rows) {
    const v = t.metrics?.[metric];
    if (t.state === "complete" && Number.isFinite(v)) {
      const f = feasible.get(t.number);
      const cls = f === true ? "feasible" : f === false ? "infeasible" : "unplotted";
      const c = el("circle", { cx: px(t.number), cy: py(v), r: 4.5, class: `hpt ${cls}`,
        "data-testid": "history-point", "data-trial": t.number, "data-value": v, "data-feasible": f ?? "" }, svg);
      el("title", {}, c).textContent = `trial ${t.number}: ${v.toFixed(2)}` +
        (f === true ? "" : f === false ? " (infeasible)" : " (not on the chart: a repeat of a configuration, or another target)");
    } else if (["fail", "pruned"].includes(t.state)) {
      const x = px(t.number), y = H - m.b;
      const g = el("g", { class: "hfail", "data-testid": "history-fail", "data-trial": t.number }, svg);
      el("path", { d: `M${x - 4},${y - 4}L${x + 4},${y + 4}M${x - 4},${y + 4}L${x + 4},${y - 4}` }, g);
      el("title", {}, g).textContent = `trial ${t.number}: ${t.state === "fail" ? "failed" : "pruned"}`;
    }
  }
}

// What the importance answer (GET /api/jobs/{id}/importance) says: bars for the parameters
// whose importance the permutation test supports, and its sentence (alone when it cannot tell).
export function importancePlot(host, imp) {
  const rows = imp.supported || [];
  const sentence = h("p", { class: rows.length ? "meta" : "", "data-testid": "importance-sentence", text: imp.sentence });
  if (!rows.length) { host.replaceChildren(sentence); return; }
  const box = h("div");
  bars(box, rows.map((r) => ({ label: r.param, value: r.share, note: `p=${r.p_value.toFixed(2)}` })), { unit: "%", max: 1 });
  box.firstChild.setAttribute("aria-label", imp.sentence);
  host.replaceChildren(box, sentence);
}

// Small horizontal bars (per-position acceptance, latency percentiles).
export function bars(host, rows, { unit = "", max } = {}) {
  host.replaceChildren();
  const top = max ?? Math.max(1e-9, ...rows.map((r) => r.value ?? 0));
  const rowH = 22, w = 520, lab = 140;
  const svg = el("svg", { viewBox: `0 0 ${w} ${rows.length * rowH + 4}`, class: "bars", role: "img",
    "aria-label": rows.map((r) => `${r.label}: ${r.value == null ? "n/a" : unit === "%" ? `${(r.value * 100).toFixed(1)}%` : `${r.value.toFixed(2)} ${unit}`}`).join("; ") }, host);
  rows.forEach((r, i) => {
    const y = i * rowH + 2;
    el("text", { x: 0, y: y + 15, class: "tick" }, svg).textContent = r.label;
    const bw = r.value == null ? 0 : ((w - lab - 90) * r.value) / top;
    el("rect", { x: lab, y, width: Math.max(0, bw), height: rowH - 6, class: "bar" }, svg);
    el("text", { x: lab + bw + 6, y: y + 15, class: "tick" }, svg).textContent =
      r.value == null ? "n/a" : `${unit === "%" ? (r.value * 100).toFixed(1) : r.value.toFixed(2)}${unit === "%" ? "%" : ` ${unit}`}${r.note ? ` (${r.note})` : ""}`;
  });
}

// Ticks over [lo, hi] at a 1/2/2.5/5 × 10^k step (for histogram axes, which need not start at 0).
function niceTicks(lo, hi, n = 5) {
  const raw = (hi - lo) / n || Math.abs(hi) || 1;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(6));
  return out;
}

// Histogram of per-request values (ms) as inline SVG, with vertical marker lines
// (`markers`: [{label, value}], e.g. the p50/p90/p99 the report states).
export function histogram(host, values, { title = "", unit = "ms", markers = [] } = {}) {
  host.replaceChildren();
  const vals = values.filter((v) => Number.isFinite(v));
  const w = 360, h = 190, m = { l: 40, r: 12, t: 22, b: 34 };
  const svg = el("svg", { viewBox: `0 0 ${w} ${h}`, class: "hist", role: "img",
    "aria-label": `${title} histogram`, "data-testid": "histogram", "data-metric": title }, host);
  el("text", { x: m.l, y: 14, class: "axis" }, svg).textContent = `${title} (${unit}) · ${vals.length} requests`;
  if (!vals.length) {
    el("text", { x: w / 2, y: h / 2, class: "tick", "text-anchor": "middle" }, svg).textContent = "no per-request values stored";
    return;
  }
  const marks = markers.filter((k) => Number.isFinite(k.value));
  let lo = Math.min(...vals, ...marks.map((k) => k.value));
  let hi = Math.max(...vals, ...marks.map((k) => k.value));
  if (hi - lo < 1e-9) { const pad = Math.abs(lo) * 0.05 || 1; lo -= pad; hi += pad; }
  const k = Math.min(30, Math.max(4, Math.ceil(Math.sqrt(vals.length) * 1.5)));
  const bw = (hi - lo) / k;
  const counts = new Array(k).fill(0);
  for (const v of vals) counts[Math.min(k - 1, Math.floor((v - lo) / bw))] += 1;
  const top = Math.max(...counts);
  const [d0, d1] = [lo - (hi - lo) * 0.04, hi + (hi - lo) * 0.04]; // drawn domain: a margin
  const px = (x) => m.l + ((x - d0) / (d1 - d0)) * (w - m.l - m.r);
  const py = (c) => h - m.b - (c / top) * (h - m.t - m.b);
  for (const t of niceTicks(d0, d1, 4)) {
    el("line", { x1: px(t), x2: px(t), y1: h - m.b, y2: h - m.b + 4, class: "grid-tick" }, svg);
    el("text", { x: px(t), y: h - m.b + 16, class: "tick", "text-anchor": "middle" }, svg).textContent = t;
  }
  for (const t of niceTicks(0, top, Math.min(4, top)).filter((t) => Number.isInteger(t))) {
    el("line", { x1: m.l, x2: w - m.r, y1: py(t), y2: py(t), class: "grid" }, svg);
    el("text", { x: m.l - 5, y: py(t) + 4, class: "tick", "text-anchor": "end" }, svg).textContent = t;
  }
  el("text", { x: (w + m.l) / 2, y: h - 4, class: "tick", "text-anchor": "middle" }, svg).textContent = unit;
  counts.forEach((c, i) => {
    if (!c) return;
    const x0 = px(lo + i * bw), x1 = px(lo + (i + 1) * bw);
    const r = el("rect", { x: x0 + 0.5, y: py(c), width: Math.max(1, x1 - x0 - 1), height: h - m.b - py(c),
      class: "hist-bar", "data-testid": "hist-bar", "data-count": c }, svg);
    el("title", {}, r).textContent =
      `${(lo + i * bw).toFixed(2)}–${(lo + (i + 1) * bw).toFixed(2)} ${unit}: ${c} request${c > 1 ? "s" : ""}`;
  });
  el("line", { x1: m.l, x2: w - m.r, y1: h - m.b, y2: h - m.b, class: "hist-axis" }, svg);
  marks.forEach((mk, i) => {
    const x = px(mk.value);
    el("line", { x1: x, x2: x, y1: m.t, y2: h - m.b, class: `hist-marker q${i}`, "data-testid": "hist-marker" }, svg);
    const right = x > w - m.r - 24;
    el("text", { x: right ? x - 2 : x + 2, y: m.t + 9 + i * 10, class: `hist-marker-label q${i}`,
      "text-anchor": right ? "end" : "start" }, svg).textContent = mk.label;
  });
}
