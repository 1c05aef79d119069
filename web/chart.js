// The Pareto chart as inline SVG: the job's objectives on its axes (chartAxes: the first two,
// a maximised one up the y axis and a minimised one along x; the default objectives give
// output tok/s against p99 TPOT), one point per (configuration, concurrency). Feasible points
// are filled, infeasible ones hollow; the baseline is a square, the winner has a ring, a point
// launched again to confirm it has a check mark, an unconfirmed winner a question mark;
// whiskers are the 95% intervals (between launches: the job's pooled spread; within one
// launch only when the job launched nothing twice) (clipped at the plot's edge, where they have no cap); when the x axis is a latency
// with an SLO (p99 TPOT or TTFT) the SLO is a vertical line you can drag. A point is a link to
// its trial (Enter or click). Predictions of a guided job (never measurements) are hollow
// markers with a dashed outline (predicted.js), drawn under the measured points.

import { drawPredicted, placeable, predVal } from "./predicted.js";
import { describe, metricLabel, METRIC_DIRECTIONS } from "./util.js";

const NS = "http://www.w3.org/2000/svg";
const W = 720, H = 380, M = { l: 64, r: 24, t: 16, b: 48 };
const SLO_METRICS = ["p99_tpot_ms", "p99_ttft_ms"];

export function el(name, attrs = {}, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

export function ticks(max, n = 5) {
  const raw = max / n;
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let v = 0; v <= max + 1e-9; v += step) out.push(+v.toPrecision(6));
  return out;
}

// The two axes from the job's objectives ([{metric, direction}]): the first two, padded with
// the defaults; a maximised one goes up y and a minimised one along x, else y is the first.
export function chartAxes(objectives) {
  const objs = (objectives || []).map((o) => ({ metric: o.metric, direction: o.direction || METRIC_DIRECTIONS[o.metric] }));
  for (const m of ["output_tok_per_s", "p99_tpot_ms"]) {
    if (objs.length < 2 && !objs.some((o) => o.metric === m)) objs.push({ metric: m, direction: METRIC_DIRECTIONS[m], extra: true });
  }
  const [a, b] = objs;
  const [y, x] = a.direction === "minimize" && b.direction === "maximize" ? [b, a] : [a, b];
  return { x, y, sloMetric: SLO_METRICS.includes(x.metric) ? x.metric : null };
}

const better = (ax) => (ax.direction === "maximize" ? "higher is better" : "lower is better");
const axisText = (ax) => `${metricLabel(ax.metric)} — ${ax.extra ? "not an objective" : better(ax)}`;

// Draws into `host` (a div). `onSlo(value, final)` is called while the SLO line is dragged;
// `onOpen(trialNumber)` when a point is activated.
export function paretoChart(host, { onSlo, onOpen }) {
  host.replaceChildren();
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "group", "data-testid": "pareto-chart" }, host);
  const tip = document.createElement("div");
  tip.className = "tip";
  tip.hidden = true;
  host.appendChild(tip);
  let xmax = 1, sloValue = null, dragging = false, axes = chartAxes([]);
  const px = (x) => M.l + (x / xmax) * (W - M.l - M.r);
  const inv = (sx) => ((sx - M.l) / (W - M.l - M.r)) * xmax;
  const gAxes = el("g", {}, svg), gFront = el("g", {}, svg), gCi = el("g", {}, svg);
  const gPred = el("g", { "data-testid": "predicted-points" }, svg), gPts = el("g", {}, svg);
  const gSlo = el("g", { class: "slo", "data-testid": "slo-line" }, svg);
  const sloLine = el("line", { y1: M.t, y2: H - M.b }, gSlo);
  const sloHit = el("rect", { y: M.t, width: 16, height: H - M.t - M.b, class: "slo-hit" }, gSlo);
  const sloLabel = el("text", { y: M.t + 12 }, gSlo);

  function placeSlo(v) {
    sloValue = v;
    if (v === null || v === undefined || !axes.sloMetric) { gSlo.setAttribute("visibility", "hidden"); return; }
    gSlo.setAttribute("visibility", "visible");
    const x = Math.min(px(v), W - M.r);
    sloLine.setAttribute("x1", x); sloLine.setAttribute("x2", x);
    sloHit.setAttribute("x", x - 8);
    const left = x > W - M.r - 150; // the label reads leftwards near the right edge
    sloLabel.setAttribute("x", left ? x - 4 : x + 4);
    sloLabel.setAttribute("text-anchor", left ? "end" : "start");
    sloLabel.textContent = `SLO ${metricLabel(axes.sloMetric).replace(" (ms)", "")} ${+(+v).toPrecision(3)} ms${px(v) > W - M.r ? " →" : ""}`;
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

  // `opts.axes` (chartAxes), `opts.lookup(point)`: the trial's measurement at the point's
  // level, for an objective the Pareto answer does not carry (requests/s, p50 TTFT, …);
  // `opts.predicted`: the job's predictions (GET /api/jobs/{id}/predictions points).
  function render(data, slo, { rescale = true, axes: ax, lookup = () => null, predicted = [] } = {}) {
    if (ax) axes = ax;
    const val = (p, m) => {
      const v = p[m] !== undefined ? p[m] : lookup(p)?.[m];
      return Number.isFinite(v) ? v : null;
    };
    const ci = (p, m) => {
      if (p[`${m}_ci95_low`] != null && p[`${m}_ci95_high`] != null) return [p[`${m}_ci95_low`], p[`${m}_ci95_high`]];
      const st = lookup(p)?.stats?.[m];
      return st && st.n > 1 && st.ci95_low != null && st.ci95_high != null ? [Math.max(0, st.ci95_low), st.ci95_high] : null;
    };
    const X = axes.x.metric, Y = axes.y.metric;
    const pts = data.points.filter((p) => val(p, X) !== null && val(p, Y) !== null);
    const preds = placeable(predicted, data, axes);
    svg.setAttribute("aria-label", `Pareto chart: ${metricLabel(Y)} against ${metricLabel(X)}, ${pts.length} ` +
      `measured points` + (preds.length ? ` and ${preds.length} predicted (not measured)` : ""));
    const ymax = Math.max(1e-6, ...pts.map((p) => val(p, Y)), ...preds.map((q) => predVal(q, Y))) * 1.12;
    if (rescale || !dragging) xmax = Math.max(1e-6, ...pts.map((p) => val(p, X)), ...preds.map((q) => predVal(q, X))) * 1.3;
    const py = (y) => H - M.b - (y / ymax) * (H - M.t - M.b);
    gAxes.replaceChildren(); gFront.replaceChildren(); gCi.replaceChildren(); gPred.replaceChildren(); gPts.replaceChildren();
    for (const t of ticks(xmax)) {
      el("line", { x1: px(t), x2: px(t), y1: M.t, y2: H - M.b, class: "grid" }, gAxes);
      el("text", { x: px(t), y: H - M.b + 16, class: "tick", "text-anchor": "middle" }, gAxes).textContent = t;
    }
    for (const t of ticks(ymax)) {
      el("line", { x1: M.l, x2: W - M.r, y1: py(t), y2: py(t), class: "grid" }, gAxes);
      el("text", { x: M.l - 6, y: py(t) + 4, class: "tick", "text-anchor": "end" }, gAxes).textContent = t;
    }
    el("text", { x: (W + M.l) / 2, y: H - 8, class: "axis", "text-anchor": "middle", "data-testid": "x-axis", "data-metric": X }, gAxes)
      .textContent = axisText(axes.x);
    el("text", { x: 14, y: H / 2, class: "axis", "text-anchor": "middle", transform: `rotate(-90 14 ${H / 2})`,
      "data-testid": "y-axis", "data-metric": Y }, gAxes).textContent = axisText(axes.y);
    // The front is over the job's objectives: a line through it only where those are these two.
    const front = pts.filter((p) => p.on_front && p.concurrency === data.concurrency).sort((a, b) => val(a, X) - val(b, X));
    if (front.length > 1 && (data.objectives || []).length === 2 && !axes.x.extra && !axes.y.extra) {
      el("polyline", { class: "front", points: front.map((p) => `${px(val(p, X))},${py(val(p, Y))}`).join(" ") }, gFront);
    }
    const box = { x0: M.l, x1: W - M.r, y0: M.t, y1: H - M.b };
    for (const p of pts) {
      whiskers(gCi, p, px(val(p, X)), py(val(p, Y)), ci(p, X), ci(p, Y), px, py, box,
        p.concurrency === data.concurrency ? "sel" : "other");
    }
    const showAt = (x, y, text) => {
      tip.textContent = text; tip.hidden = false;
      tip.style.left = `${(x / W) * 100}%`; tip.style.top = `${(y / H) * 100}%`;
    };
    drawPredicted(gPred, preds, { el, px, py, axes, data, show: showAt, hide: () => { tip.hidden = true; } });
    for (const p of pts) {
      const x = px(val(p, X)), y = py(val(p, Y));
      const cls = ["pt", p.feasible ? "feasible" : "infeasible", p.concurrency === data.concurrency ? "sel" : "other"];
      const text = tipText(p, axes, val, ci);
      const common = {
        class: cls.join(" "), "data-trial": p.trial_number, "data-concurrency": p.concurrency,
        "data-feasible": p.feasible, "data-testid": "pareto-point", tabindex: 0, role: "link",
        "aria-label": text.split("\n").join("; "), "data-x": val(p, X), "data-y": val(p, Y),
      };
      const shape = p.is_baseline
        ? el("rect", { ...common, x: x - 6, y: y - 6, width: 12, height: 12 }, gPts)
        : el("circle", { ...common, cx: x, cy: y, r: 6 }, gPts);
      if (p.is_winner) el("circle", { cx: x, cy: y, r: 11, class: "winner-ring" }, gPts);
      if (p.is_winner && !data.winner_confirmed && !data.replay_surface) {
        el("text", { x: x + 7, y: y + 16, class: "unconfirmed-mark", "data-testid": "unconfirmed-mark",
          "data-trial": p.trial_number, "aria-hidden": "true" }, gPts).textContent = "?";
      }
      if (p.confirmed) {
        el("text", { x: x + 7, y: y - 7, class: `confirmed-mark ${cls[2]}`, "data-testid": "confirmed-mark",
          "data-trial": p.trial_number, "data-concurrency": p.concurrency, "aria-hidden": "true" }, gPts).textContent = "✓";
      }
      const show = () => showAt(x, y, text);
      shape.addEventListener("mouseenter", show);
      shape.addEventListener("focus", show);
      shape.addEventListener("mouseleave", () => { tip.hidden = true; });
      shape.addEventListener("blur", () => { tip.hidden = true; });
      if (onOpen) {
        shape.addEventListener("click", () => onOpen(p.trial_number));
        shape.addEventListener("keydown", (e) => { if (e.key === "Enter") onOpen(p.trial_number); });
      }
    }
    if (!dragging) placeSlo(slo);
  }
  return { render, placeSlo };
}

// 95% interval whiskers of one point ([lo, hi] per axis or null): horizontal for x, vertical for y.
function whiskers(g, p, x, y, cx, cy, px, py, box, sel) {
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
  if (cx) {
    const a = px(cx[0]), b = px(cx[1]);
    const a2 = Math.max(box.x0, a), b2 = Math.min(box.x1, b);
    if (b2 > a2) seg(a2, y, b2, y, "x", a === a2, b === b2);
  }
  if (cy) {
    const lo = py(cy[0]), hi = py(cy[1]); // svg y: lo below
    const lo2 = Math.min(box.y1, lo), hi2 = Math.max(box.y0, hi);
    if (lo2 > hi2) seg(x, lo2, x, hi2, "y", lo === lo2, hi === hi2);
  }
}

function tipText(p, axes, val, ci) {
  const num = (m) => {
    const v = val(p, m);
    if (v === null) return null;
    const d = m.endsWith("_ms") ? 2 : 1, c = ci(p, m), unit = m.endsWith("_ms") ? " ms" : "";
    const name = m === "output_tok_per_s" ? "tok/s" : metricLabel(m).replace(" (ms)", "");
    const value = m === "output_tok_per_s" ? `${v.toFixed(d)} tok/s` : `${name} ${v.toFixed(d)}${unit}`;
    return value + (c ? ` (95% interval ${c[0].toFixed(d)}–${c[1].toFixed(d)}${unit})` : "");
  };
  const shown = [...new Set(["output_tok_per_s", "p99_tpot_ms", axes.y.metric, axes.x.metric])];
  const lines = [`trial ${p.trial_number} · ${describe(p)} · concurrency ${p.concurrency}`];
  for (const m of shown) {
    const t = num(m);
    if (t) lines.push(m === "output_tok_per_s" && p.speedup ? `${t} · ${p.speedup.toFixed(2)}× baseline` : t);
  }
  const facts = [];
  if (p.launches) facts.push(`${p.launches} launch${p.launches > 1 ? "es" : ""}`);
  if (p.interval_kind) facts.push(p.interval_kind === "between launches"
    ? "interval: where one more launch lands" : "interval: within one launch only (nothing was launched twice)");
  if (p.repeats) facts.push(`median of ${p.repeats} repeat${p.repeats > 1 ? "s" : ""} in its latest launch`);
  if (p.is_winner && p.launches < 2) facts.push("? winner unconfirmed (fewer than two undisturbed launches)");
  if (p.confirmed) facts.push(`✓ launched again to confirm it` +
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
