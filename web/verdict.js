// The round-cost verdict table of the job page: per speculative trial and concurrency, its mean
// end-to-end time per output token against the baseline's, the one verdict
// (tuner/verdict.py), and the level from which it stops paying.

import { describe, fmt, h } from "./util.js";

// Round-cost verdict: per speculative trial, mean time per output token against the
// baseline's at each concurrency, and the level from which it stops paying.
export function verdictTable(jobId, rep) {
  const rows = rep.round_cost || [];
  if (!rows.length) return h("p", { class: "meta", text: "No speculative trial measured yet." });
  if (!rows.some((r) => r.verdicts.length)) {
    return h("p", { class: "meta", text: "No baseline measured at these levels: no verdict." });
  }
  const levels = rep.levels;
  const base = {};
  for (const r of rows) for (const v of r.verdicts) base[v.concurrency] = v.baseline_ms_per_token;
  const head = h("tr", {}, h("th", { text: "trial" }), h("th", { text: "configuration" }),
    ...levels.map((c) => h("th", { "data-concurrency": c },
      `concurrency ${c}`, h("br"), h("span", { class: "meta", text: `baseline ${fmt(base[c], 2)} ms/tok` }))),
    h("th", { text: "stops paying" }));
  const body = rows.map((r) => {
    const byC = Object.fromEntries(r.verdicts.map((v) => [v.concurrency, v]));
    const cells = levels.map((c) => {
      const v = byC[c];
      if (!v) return h("td", { text: "–", "data-concurrency": c });
      // The one verdict (tuner/verdict.py): the speedup's 95% interval above 1, below 1, or holding 1.
      const pct = Math.abs(v.margin_pct).toFixed(1);
      const word = v.state === "pays" ? `pays off by ${pct}%`
        : v.state === "does not pay" ? `does not pay by ${pct}%`
        : `tied within noise (${v.margin_pct >= 0 ? "+" : "-"}${pct}%)`;
      const cls = { "pays": "pays", "does not pay": "no-pay", "tied": "tied" }[v.state];
      return h("td", { class: cls, "data-concurrency": c, "data-pays": v.pays_off, "data-state": v.state,
        title: `speedup ${v.speedup.toFixed(2)}× [${v.speedup_ci95_low.toFixed(2)}–${v.speedup_ci95_high === null ? "∞" : v.speedup_ci95_high.toFixed(2)}], 95% ${v.interval_kind || "within one launch"}`,
        text: `${v.spec_ms_per_token.toFixed(2)} ms/tok, ${word}` });
    });
    const cross = r.crossover_concurrency;
    const where = !r.verdicts.length ? "–"
      : !r.verdicts.some((v) => v.pays_off) ? "never pays"
      : cross === null ? (r.verdicts.every((v) => v.pays_off) ? "pays at every level measured"
        : "pays at the highest level measured")
      : `stops paying at concurrency ${cross}`;
    return h("tr", { "data-trial": r.trial_number },
      h("td", {}, h("a", { href: `#/jobs/${jobId}/trials/${r.trial_number}`, text: `${r.trial_number}` })),
      h("td", { text: describe(r) }), ...cells, h("td", { class: "crossover", text: where }));
  });
  return h("div", { class: "scroll" },
    h("table", { class: "verdicts", "data-testid": "verdict-table" }, h("thead", {}, head), h("tbody", {}, body)));
}
