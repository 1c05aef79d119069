// The comparison page (#/jobs/N/compare/a,b,…): two or more trials side by side, their
// parameters and, at every concurrency level of the job's objective workload, their measured
// metrics with the 95% interval over the repeats (where there were several).

import { api } from "./api.js";
import { app, describe, fmt, h, handle, int, interval, isCurrent, metricLabel, pct } from "./util.js";

const SHOWN = ["output_tok_per_s", "p99_tpot_ms", "p99_ttft_ms", "p99_e2e_ms", "requests_per_s"];

function valueWithCi(m, name) {
  const v = m?.[name];
  if (v === null || v === undefined) return "–";
  const d = name.endsWith("_ms") ? 2 : 1;
  const ci = interval(m, name);
  return ci ? `${v.toFixed(d)} [${ci[0].toFixed(d)}–${ci[1].toFixed(d)}]` : `${v.toFixed(d)} (one run)`;
}

export async function comparePage(gen, jobId, numbers) {
  let job, page;
  try {
    [job, page] = await Promise.all([api(`/api/jobs/${jobId}`), api(`/api/jobs/${jobId}/trials`, { params: { limit: 1000 } })]);
  } catch (err) {
    handle(err);
    return;
  }
  if (!isCurrent(gen)) return;
  const byNumber = new Map(page.items.map((t) => [t.number, t]));
  const picked = numbers.filter((n) => byNumber.has(n)).map((n) => byNumber.get(n));
  const missing = numbers.filter((n) => !byNumber.has(n));
  const back = h("p", {}, h("a", { href: `#/jobs/${jobId}`, text: `← job #${jobId}` }));
  if (picked.length < 2) {
    app.replaceChildren(h("section", { class: "card" }, back,
      h("p", { text: "Pick two or more trials of this job to compare (the checkboxes of its trials table)." })));
    return;
  }
  const metrics = [...new Set([...job.objectives.map((o) => o.metric), ...SHOWN])];
  const levels = job.concurrency.length ? job.concurrency : [...new Set(picked.map((t) => t.concurrency))];
  const at = (t, c) => (t.measurements || []).find((m) => m.concurrency === c && m.workload === job.workload) ||
    (c === t.concurrency && t.state === "complete" ? t.metrics : null);
  const params = [...new Set(picked.flatMap((t) => Object.keys(t.params || {})))].sort();
  const rows = [];
  const section = (text) => rows.push(h("tr", { class: "group" },
    h("th", { scope: "colgroup", colspan: picked.length + 1, text })));
  const row = (label, f, attrs = {}) => {
    const vals = picked.map((t) => String(f(t) ?? "–"));
    const same = vals.every((v) => v === vals[0]);
    rows.push(h("tr", { ...attrs, class: same ? "same" : "differs" }, h("th", { scope: "row", text: label }),
      ...vals.map((v) => h("td", { text: v }))));
  };
  section("Configuration");
  row("state", (t) => t.state);
  for (const p of params) row(p, (t) => (t.params?.[p] === undefined ? "–" : JSON.stringify(t.params[p])), { "data-param": p });
  for (const c of levels) {
    section(`Measured at concurrency ${c} (${job.workload})${c === job.objective_concurrency ? " · the objectives' level" : ""}`);
    for (const name of metrics) {
      row(metricLabel(name), (t) => valueWithCi(at(t, c), name), { "data-metric": name, "data-concurrency": c });
    }
    row("acceptance rate", (t) => pct(at(t, c)?.acceptance_rate), { "data-concurrency": c });
    row("mean acceptance length", (t) => fmt(at(t, c)?.mean_acceptance_length, 2), { "data-concurrency": c });
    row("repeats", (t) => at(t, c)?.repeats ?? "–", { "data-concurrency": c });
  }
  section("Memory and fidelity");
  row("greedy output match", (t) => (t.method === "none" ? "reference" : pct(t.lossless_match_rate)));
  row("KV cache tokens", (t) => int(t.kv_cache_tokens));
  row("peak RSS MB", (t) => int(t.peak_rss_mb));
  row("note", (t) => t.fail_reason || (t.reused_from !== null ? `reused trial ${t.reused_from}` : ""));
  app.replaceChildren(h("section", { class: "card" }, back,
    h("h1", { text: `Compare trials ${picked.map((t) => t.number).join(", ")} · job #${jobId}` }),
    h("p", { class: "meta", text: "Medians over the repeats; [low–high] is the 95% interval over them. " +
      "Rows whose values differ are marked." + (missing.length ? ` No trial ${missing.join(", ")} in this job.` : "") }),
    h("div", { class: "scroll" }, h("table", { class: "compare", "data-testid": "compare-table" },
      h("thead", {}, h("tr", {}, h("td"), ...picked.map((t) => h("th", { scope: "col", "data-trial": t.number },
        h("a", { href: `#/jobs/${jobId}/trials/${t.number}`, text: `trial ${t.number}` }), h("br"),
        h("span", { class: "meta", text: describe(t) }))))),
      h("tbody", {}, rows)))));
}
