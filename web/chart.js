// The Pareto chart as inline SVG: output tok/s (y) against p99 TPOT (x), one point per
// (configuration, concurrency). Feasible points are filled, infeasible ones hollow; the
// baseline is a square, the winner has a ring, a point confirmed by a second launch has a
// check mark; whiskers are the 95% intervals over the repeats (clipped at the plot's edge,
// where they have no cap); the SLO is a vertical line you can drag.

import { describe } from "./util.js";

const NS = "http://www.w3.org/2000/svg";
const W = 720, H = 380, M = { l: 64, r: 24, t: 16, b: 48 };

function el(name, attrs = {}, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function ticks(max, n = 5) {
  const raw = max / n;
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = 0; v <= max + 1e-9; v += step) out.push(+v.toPrecision(6));
  return out;
}

// Draws into `host` (a div). `onSlo(value, final)` is called while the SLO line is dragged.
export function paretoChart(host, { onSlo }) {
  host.replaceChildren();
  const svg = el("svg", {
    viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Pareto chart", "data-testid": "pareto-chart",
  }, host);
  const tip = document.createElement("div");
  tip.className = "tip";
  tip.hidden = true;
  host.appendChild(tip);
  let xmax = 1, sloValue = null, dragging = false;
  const px = (x) => M.l + (x / xmax) * (W - M.l - M.r);
  const inv = (sx) => ((sx - M.l) / (W - M.l - M.r)) * xmax;
  const gAxes = el("g", {}, svg), gFront = el("g", {}, svg), gCi = el("g", {}, svg);
  const gPts = el("g", {}, svg);
  const gSlo = el("g", { class: "slo", "data-testid": "slo-line" }, svg);
  const sloLine = el("line", { y1: M.t, y2: H - M.b }, gSlo);
  const sloHit = el("rect", { y: M.t, width: 16, height: H - M.t - M.b, class: "slo-hit" }, gSlo);
  const sloLabel = el("text", { y: M.t + 12 }, gSlo);

  function placeSlo(v) {
    sloValue = v;
    if (v === null || v === undefined) { gSlo.setAttribute("visibility", "hidden"); return; }
    gSlo.setAttribute("visibility", "visible");
    const x = Math.min(px(v), W - M.r);
    sloLine.setAttribute("x1", x); sloLine.setAttribute("x2", x);
    sloHit.setAttribute("x", x - 8);
    sloLabel.setAttribute("x", x + 4);
    sloLabel.textContent = `SLO p99 TPOT ${(+v).toPrecision(3)} ms${px(v) > W - M.r ? " →" : ""}`;
  }

  function toSvgX(evt) {
    const pt = svg.createSVGPoint();
    pt.x = evt.clientX; pt.y = evt.clientY;
    return pt.matrixTransform(svg.getScreenCTM().inverse()).x;
  }
  gSlo.addEventListener("pointerdown", (e) => {
    dragging = true; gSlo.setPointerCapture(e.pointerId); e.preventDefault();
  });
  gSlo.addEventListener("pointermove", (e) => {
    if (!dragging) return;
    const v = Math.max(xmax / 1000, Math.min(inv(toSvgX(e)), xmax));
    placeSlo(+v.toPrecision(3));
    onSlo(sloValue, false);
  });
  const end = (e) => {
    if (!dragging) return;
    dragging = false; gSlo.releasePointerCapture(e.pointerId);
    onSlo(sloValue, true);
  };
  gSlo.addEventListener("pointerup", end);
  gSlo.addEventListener("pointercancel", end);

  function render(data, slo, { rescale = true } = {}) {
    const pts = data.points.filter((p) => p.p99_tpot_ms !== null);
    const ymax = Math.max(1, ...pts.map((p) => p.output_tok_per_s)) * 1.12;
    if (rescale || !dragging) xmax = Math.max(1e-6, ...pts.map((p) => p.p99_tpot_ms)) * 1.3;
    const py = (y) => H - M.b - (y / ymax) * (H - M.t - M.b);
    gAxes.replaceChildren(); gFront.replaceChildren(); gCi.replaceChildren(); gPts.replaceChildren();
    for (const t of ticks(xmax)) {
      el("line", { x1: px(t), x2: px(t), y1: M.t, y2: H - M.b, class: "grid" }, gAxes);
      el("text", { x: px(t), y: H - M.b + 16, class: "tick", "text-anchor": "middle" }, gAxes).textContent = t;
    }
    for (const t of ticks(ymax)) {
      el("line", { x1: M.l, x2: W - M.r, y1: py(t), y2: py(t), class: "grid" }, gAxes);
      el("text", { x: M.l - 6, y: py(t) + 4, class: "tick", "text-anchor": "end" }, gAxes).textContent = t;
    }
    el("text", { x: (W + M.l) / 2, y: H - 8, class: "axis", "text-anchor": "middle" }, gAxes)
      .textContent = "p99 TPOT (ms) — lower is better";
    el("text", { x: 14, y: H / 2, class: "axis", "text-anchor": "middle", transform: `rotate(-90 14 ${H / 2})` }, gAxes)
      .textContent = "output tokens/s";
    const front = pts.filter((p) => p.on_front && p.concurrency === data.concurrency)
      .sort((a, b) => a.p99_tpot_ms - b.p99_tpot_ms);
    if (front.length > 1) {
      el("polyline", { class: "front", points: front.map((p) => `${px(p.p99_tpot_ms)},${py(p.output_tok_per_s)}`).join(" ") }, gFront);
    }
    const box = { x0: M.l, x1: W - M.r, y0: M.t, y1: H - M.b };
    for (const p of pts) {
      const x = px(p.p99_tpot_ms), y = py(p.output_tok_per_s);
      whiskers(gCi, p, x, y, px, py, box, p.concurrency === data.concurrency ? "sel" : "other");
    }
    for (const p of pts) {
      const x = px(p.p99_tpot_ms), y = py(p.output_tok_per_s);
      const cls = ["pt", p.feasible ? "feasible" : "infeasible", p.concurrency === data.concurrency ? "sel" : "other"];
      const common = {
        class: cls.join(" "), "data-trial": p.trial_number, "data-concurrency": p.concurrency,
        "data-feasible": p.feasible, "data-testid": "pareto-point", tabindex: 0,
      };
      const shape = p.is_baseline
        ? el("rect", { ...common, x: x - 6, y: y - 6, width: 12, height: 12 }, gPts)
        : el("circle", { ...common, cx: x, cy: y, r: 6 }, gPts);
      if (p.is_winner) el("circle", { cx: x, cy: y, r: 11, class: "winner-ring" }, gPts);
      if (p.confirmed) {
        el("text", { x: x + 7, y: y - 7, class: `confirmed-mark ${cls[2]}`, "data-testid": "confirmed-mark",
          "data-trial": p.trial_number, "data-concurrency": p.concurrency }, gPts).textContent = "✓";
      }
      const show = () => {
        tip.textContent = tipText(p); tip.hidden = false;
        tip.style.left = `${(x / W) * 100}%`; tip.style.top = `${(y / H) * 100}%`;
      };
      shape.addEventListener("mouseenter", show);
      shape.addEventListener("focus", show);
      shape.addEventListener("mouseleave", () => { tip.hidden = true; });
      shape.addEventListener("blur", () => { tip.hidden = true; });
    }
    if (!dragging) placeSlo(slo);
  }
  return { render, placeSlo };
}

const hasCi = (p, name) => p[`${name}_ci95_low`] != null && p[`${name}_ci95_high`] != null;

// 95% interval whiskers of one point: horizontal for p99 TPOT, vertical for tok/s.
function whiskers(g, p, x, y, px, py, box, sel) {
  const cap = 4;
  const seg = (x1, y1, x2, y2, axis, capLo, capHi) => {
    const w = el("g", { class: `ci ${sel}`, "data-testid": "ci-whisker", "data-trial": p.trial_number,
      "data-concurrency": p.concurrency, "data-axis": axis }, g);
    el("line", { x1, y1, x2, y2 }, w);
    if (axis === "x") {
      if (capLo) el("line", { x1, y1: y1 - cap, x2: x1, y2: y1 + cap }, w);
      if (capHi) el("line", { x1: x2, y1: y2 - cap, x2, y2: y2 + cap }, w);
    } else {
      if (capLo) el("line", { x1: x1 - cap, y1, x2: x1 + cap, y2: y1 }, w);
      if (capHi) el("line", { x1: x2 - cap, y1: y2, x2: x2 + cap, y2 }, w);
    }
  };
  if (hasCi(p, "p99_tpot_ms")) {
    const a = px(p.p99_tpot_ms_ci95_low), b = px(p.p99_tpot_ms_ci95_high);
    const a2 = Math.max(box.x0, a), b2 = Math.min(box.x1, b);
    if (b2 > a2) seg(a2, y, b2, y, "x", a === a2, b === b2);
  }
  if (hasCi(p, "output_tok_per_s")) {
    const lo = py(p.output_tok_per_s_ci95_low), hi = py(p.output_tok_per_s_ci95_high); // svg y: lo below
    const lo2 = Math.min(box.y1, lo), hi2 = Math.max(box.y0, hi);
    if (lo2 > hi2) seg(x, lo2, x, hi2, "y", lo === lo2, hi === hi2);
  }
}

function tipText(p) {
  const ci = (name, d, unit) => hasCi(p, name)
    ? ` (95% interval ${p[`${name}_ci95_low`].toFixed(d)}–${p[`${name}_ci95_high`].toFixed(d)}${unit})` : "";
  const lines = [
    `trial ${p.trial_number} · ${describe(p)} · concurrency ${p.concurrency}`,
    `${p.output_tok_per_s.toFixed(1)} tok/s${ci("output_tok_per_s", 1, "")}` +
      (p.speedup ? ` · ${p.speedup.toFixed(2)}× baseline` : ""),
    `p99 TPOT ${p.p99_tpot_ms.toFixed(2)} ms${ci("p99_tpot_ms", 2, " ms")}`,
  ];
  const facts = [];
  if (p.repeats) facts.push(`median of ${p.repeats} repeat${p.repeats > 1 ? "s" : ""}`);
  if (p.confirmed) facts.push(`✓ confirmed by a second launch` +
    (p.search_output_tok_per_s != null ? ` (search: ${p.search_output_tok_per_s.toFixed(1)} tok/s)` : ""));
  if (facts.length) lines.push(facts.join(" · "));
  const mem = [];
  if (p.lossless_match_rate != null) mem.push(`greedy match ${(p.lossless_match_rate * 100).toFixed(1)}%`);
  if (p.kv_cache_tokens != null) mem.push(`KV ${p.kv_cache_tokens.toLocaleString("en-US")} tokens`);
  if (p.peak_rss_mb != null) mem.push(`peak RSS ${p.peak_rss_mb.toFixed(0)} MB`);
  if (mem.length) lines.push(mem.join(" · "));
  lines.push(p.feasible ? "feasible" : `infeasible: ${p.violations.join("; ")}`);
  return lines.join("\n");
}

// Small horizontal bars (per-position acceptance, latency percentiles).
export function bars(host, rows, { unit = "", max } = {}) {
  host.replaceChildren();
  const top = max ?? Math.max(1e-9, ...rows.map((r) => r.value ?? 0));
  const rowH = 22, w = 520, lab = 140;
  const svg = el("svg", { viewBox: `0 0 ${w} ${rows.length * rowH + 4}`, class: "bars" }, host);
  rows.forEach((r, i) => {
    const y = i * rowH + 2;
    el("text", { x: 0, y: y + 15, class: "tick" }, svg).textContent = r.label;
    const bw = r.value == null ? 0 : ((w - lab - 90) * r.value) / top;
    el("rect", { x: lab, y, width: Math.max(0, bw), height: rowH - 6, class: "bar" }, svg);
    el("text", { x: lab + bw + 6, y: y + 15, class: "tick" }, svg).textContent =
      r.value == null ? "n/a" : `${unit === "%" ? (r.value * 100).toFixed(1) : r.value.toFixed(2)}${unit === "%" ? "%" : ` ${unit}`}`;
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
