// The Pareto chart as inline SVG: output tok/s (y) against p99 TPOT (x), one point per
// (configuration, concurrency). Feasible points are filled, infeasible ones hollow; the
// baseline is a square, the winner has a ring; the SLO is a vertical line you can drag.

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

export function describe(p) {
  const pr = p.params || {};
  if (p.method === "none") return `baseline (no speculation), seqs=${pr.max_num_seqs}`;
  let s = `${p.method} k=${pr.num_speculative_tokens}`;
  if (p.method === "ngram") s += ` lookup=${pr.prompt_lookup_min}..${pr.prompt_lookup_max}`;
  if (p.method === "draft_model" && pr.draft) s += ` draft=${String(pr.draft).split("/").pop()}`;
  return `${s}, seqs=${pr.max_num_seqs}`;
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
  const gAxes = el("g", {}, svg), gFront = el("g", {}, svg), gPts = el("g", {}, svg);
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
    gAxes.replaceChildren(); gFront.replaceChildren(); gPts.replaceChildren();
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
      const text = `trial ${p.trial_number} · ${describe(p)} · concurrency ${p.concurrency}\n` +
        `${p.output_tok_per_s.toFixed(1)} tok/s · p99 TPOT ${p.p99_tpot_ms.toFixed(2)} ms` +
        (p.speedup ? ` · ${p.speedup.toFixed(2)}× baseline` : "") +
        (p.feasible ? "\nfeasible" : `\ninfeasible: ${p.violations.join("; ")}`);
      const show = () => {
        tip.textContent = text; tip.hidden = false;
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
