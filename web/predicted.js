// Predictions of a guided job's depth model (GET /api/jobs/{id}/predictions), never
// measurements: drawn on the Pareto chart as hollow markers with a dashed outline, apart from
// the measured points, and a trial's own prediction in the trials table.

import { describe, metricLabel } from "./util.js";

// A predicted metric of a point, or null.
export const predVal = (q, m) => (Number.isFinite(q.metrics?.[m]) ? q.metrics[m] : null);

const num = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3));
const band = (rel) => `±${(100 * rel).toFixed(0)}%`;

function predTip(q, axes) {
  const shown = [...new Set(["output_tok_per_s", "p99_tpot_ms", axes.y.metric, axes.x.metric])];
  const lines = [`predicted (not measured) · ${describe(q)} · concurrency ${q.concurrency}`];
  for (const m of shown) {
    const v = predVal(q, m);
    if (v !== null) lines.push(`${metricLabel(m)} ${num(v)} ${band(q.rel_sigma)}`);
  }
  if (q.basis?.length) lines.push(`from measured trials ${q.basis.join(", ")}`);
  for (const n of q.notes || []) lines.push(n);
  return lines.join("\n");
}

// Draws `preds` (placeable ones) into `g`; `show(x, y, text)` and `hide()` drive the tip.
export function drawPredicted(g, preds, { el, px, py, axes, data, show, hide }) {
  const X = axes.x.metric, Y = axes.y.metric;
  for (const q of preds) {
    const x = px(predVal(q, X)), y = py(predVal(q, Y));
    const text = predTip(q, axes);
    const c = el("circle", {
      class: `pt-pred ${q.concurrency === data.concurrency ? "sel" : "other"}`, cx: x, cy: y, r: 6,
      role: "img", "aria-label": text.split("\n").join("; "), "data-testid": "predicted-point",
      "data-concurrency": q.concurrency, "data-x": predVal(q, X), "data-y": predVal(q, Y),
    }, g);
    el("title", {}, c).textContent = text;
    c.addEventListener("mouseenter", () => show(x, y, text));
    c.addEventListener("mouseleave", hide);
  }
}

// The points of `predicted` the chart can place: the chart's workload, both axes predicted.
export function placeable(predicted, data, axes) {
  return (predicted || []).filter((q) => q.workload === data.workload &&
    predVal(q, axes.x.metric) !== null && predVal(q, axes.y.metric) !== null);
}

// A trial's prediction, made before its launch: "308 ±5% (err −0.5%)", or "-".
export function predictedText(t) {
  const p = t.search?.predicted;
  if (!p || !Number.isFinite(p.value)) return "-";
  const e = t.prediction_error_pct;
  const err = Number.isFinite(e) ? ` (err ${e < 0 ? "−" : "+"}${Math.abs(e).toFixed(1)}%)` : "";
  return `${num(p.value)} ${band(p.rel_sigma || 0)}${err}`;
}

export function predictedTitle(t) {
  const p = t.search?.predicted;
  return p ? `predicted ${metricLabel(p.objective)} at ${p.level} before the launch, not measured` +
    (p.basis?.length ? `; from trials ${p.basis.join(", ")}` : "") : null;
}

// Why the search proposed a trial, and its class note (what was proposed instead).
export function proposedTitle(t) {
  const s = t.search;
  if (!s) return null;
  const parts = [s.why, ...(s.class?.why || [])].filter(Boolean);
  return parts.length ? parts.join("\n") : null;
}
