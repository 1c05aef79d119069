// The job page's trials table (sortable by any column from the keyboard: a button in each
// header, aria-sort on the sorted one), its "compare" selection and its CSV download.

import { predictedText, predictedTitle, proposedTitle } from "./predicted.js";
import { describe, fmt, h, int, pct } from "./util.js";

const note = (t) => t.fail_reason
  ? h("details", {}, h("summary", { text: t.fail_reason }), h("pre", { class: "log", tabindex: 0, text: t.fail_detail || "" }))
  : [t.reused_from !== null ? `reused trial ${t.reused_from}` : null,
    t.metrics.confirmed ? h("span", { class: "badge", title: "re-measured on a second engine launch", text: "✓ confirmed" }) : null,
    t.metrics.noisy ? h("span", { class: "badge noisy", text: `noisy (MAD ${pct(t.metrics.relative_mad)})` }) : null];

// `view` keeps the sort and the selection across the table's redraws: {sortBy, dir, selected}.
export function trialsTable(jobId, trials, view, onSelect) {
  const cols = [
    ["#", (t) => t.number, (t) => [
      h("input", { type: "checkbox", class: "pick", "data-trial": t.number, "aria-label": `compare trial ${t.number}`,
        checked: view.selected.has(t.number), onchange: (e) => {
          if (e.target.checked) view.selected.add(t.number); else view.selected.delete(t.number);
          onSelect();
        } }), " ",
      h("a", { href: `#/jobs/${jobId}/trials/${t.number}`, text: `${t.number}` })]],
    ["state", (t) => t.state],
    ["configuration", (t) => describe(t)],
    ["tok/s", (t) => t.metrics.output_tok_per_s, (t) => fmt(t.metrics.output_tok_per_s)],
    ["p99 TPOT ms", (t) => t.metrics.p99_tpot_ms, (t) => fmt(t.metrics.p99_tpot_ms, 2)],
    ["p99 TTFT ms", (t) => t.metrics.p99_ttft_ms, (t) => fmt(t.metrics.p99_ttft_ms, 1)],
    ["acceptance", (t) => t.metrics.acceptance_rate, (t) => pct(t.metrics.acceptance_rate)],
    ["mean acc. len", (t) => t.metrics.mean_acceptance_length, (t) => fmt(t.metrics.mean_acceptance_length, 2)],
    // Priced before the launch on the baseline's outputs: a prediction, not a measurement.
    ["offline acc. (predicted)", (t) => t.offline_acceptance_rate ?? null, (t) => h("span", {
      "data-testid": "offline-cell", text: pct(t.offline_acceptance_rate),
      title: t.offline_acceptance_rate == null ? (t.search?.offline?.unpriced || "")
        : `predicted before the launch (${t.search?.offline?.basis || "baseline outputs"}); measured ${pct(t.metrics.acceptance_rate)}` })],
    ["greedy match", (t) => t.lossless_match_rate, (t) => t.method === "none" && t.state === "complete"
      ? "reference" : pct(t.lossless_match_rate)],
    ["KV tokens", (t) => t.kv_cache_tokens, (t) => int(t.kv_cache_tokens)],
    ["peak RSS MB", (t) => t.peak_rss_mb, (t) => int(t.peak_rss_mb)],
    // How the search proposed it; its prediction (made before the launch, never a measurement).
    ["proposed by", (t) => t.search?.by ?? null, (t) => h("span", { "data-testid": "proposed-by",
      title: proposedTitle(t), text: t.search?.by ?? "-" })],
    ["predicted", (t) => t.search?.predicted?.value ?? null, (t) => h("span", { "data-testid": "predicted-cell",
      title: predictedTitle(t), text: predictedText(t) })],
    ["note", (t) => t.fail_reason || "", note],
  ];
  const tbody = h("tbody");
  const head = h("tr");
  function draw() {
    const { sortBy, dir } = view;
    const rows = [...trials].sort((a, b) => {
      const x = cols[sortBy][1](a), y = cols[sortBy][1](b);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * dir;
    });
    tbody.replaceChildren(...rows.map((t) => h("tr", { class: t.state, "data-trial": t.number },
      ...cols.map((c) => h("td", {}, (c[2] || c[1])(t) ?? "")))));
    head.replaceChildren(...cols.map((c, i) => h("th", {
      scope: "col", "aria-sort": i === sortBy ? (dir > 0 ? "ascending" : "descending") : null,
    }, h("button", { type: "button", class: "sort", "data-col": c[0], onclick: () => {
      view.dir = i === view.sortBy ? -view.dir : 1; view.sortBy = i; draw();
      head.querySelector(`button[data-col="${c[0]}"]`).focus();
    } }, c[0], h("span", { "aria-hidden": "true", text: i === sortBy ? (dir > 0 ? " ▲" : " ▼") : "" })))));
  }
  draw();
  return h("div", { class: "scroll" },
    h("table", { class: "trials", "data-testid": "trials-table" }, h("thead", {}, head), tbody));
}

// --------------------------------------------------------------------------- CSV

// The measured quantities a row carries (at the job's objective concurrency), besides the
// job's own objectives; each with its 95% interval where the trial had several repeats.
const CSV_METRICS = ["output_tok_per_s", "p99_tpot_ms", "p99_ttft_ms", "p99_e2e_ms", "requests_per_s",
  "acceptance_rate", "mean_acceptance_length"];

function cell(v) {
  if (v === null || v === undefined) return "";
  let s = typeof v === "object" ? JSON.stringify(v) : String(v);
  if (typeof v === "string" && /^[=+\-@\t\r]/.test(s)) s = `'${s}`; // no formula in a spreadsheet
  return /[",\n\r]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

// Every trial as one CSV row: its configuration (one column per parameter), state and metrics.
export function trialsCsv(trials, objectives = []) {
  const params = [...new Set(trials.flatMap((t) => Object.keys(t.params || {})))].sort();
  const metrics = [...new Set([...objectives.map((o) => o.metric), ...CSV_METRICS])];
  const header = ["trial", "state", "method", "configuration", ...params.map((p) => `param.${p}`),
    "workload", "concurrency", "repeats",
    ...metrics.flatMap((m) => [m, `${m}_ci95_low`, `${m}_ci95_high`]),
    "confirmed", "noisy", "lossless_match_rate", "kv_cache_tokens", "peak_rss_mb", "startup_s",
    "reused_from", "fail_reason"];
  const rows = [...trials].sort((a, b) => a.number - b.number).map((t) => {
    const m = t.metrics || {};
    const measured = t.state === "complete";
    return [t.number, t.state, t.method, describe(t), ...params.map((p) => t.params?.[p]),
      measured ? m.workload : null, t.concurrency, m.repeats,
      ...metrics.flatMap((k) => {
        const st = m.stats?.[k];
        const ci = st && st.n > 1 ? [Math.max(0, st.ci95_low), st.ci95_high] : [null, null];
        return [m[k], ...ci];
      }),
      m.confirmed ?? null, m.noisy ?? null, t.lossless_match_rate, t.kv_cache_tokens, t.peak_rss_mb,
      t.startup_s, t.reused_from, t.fail_reason];
  });
  return [header, ...rows].map((r) => r.map(cell).join(",")).join("\r\n") + "\r\n";
}

export function downloadCsv(name, text) {
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv;charset=utf-8" }));
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
