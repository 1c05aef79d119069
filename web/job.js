// The job page: progress and cancel, the Pareto chart with its SLO and concurrency controls,
// why the winner won, the round-cost verdict, the export panel and the sortable trials table.

import { api, ApiError, fieldErrors } from "./api.js";
import { paretoChart } from "./chart.js";
import { exportPanel } from "./export.js";
import { app, describe, dur, ENDED, fmt, h, handle, int, isCurrent, pct, showBanner, stateBadge } from "./util.js";

function progress(job) {
  const frac = job.n_trials ? job.trials_done / job.n_trials : 0;
  const cur = job.current_trial;
  return h("div", { class: "progress" },
    h("div", { class: "bar" }, h("span", { style: `width:${(frac * 100).toFixed(0)}%` })),
    h("span", { "data-testid": "progress-text", text:
      `${job.trials_done} / ${job.n_trials} trials` +
      (job.trials_failed ? ` (${job.trials_failed} failed)` : "") +
      (cur ? ` · trial ${cur.number}: ${describe(cur)}` : "") +
      (job.eta_s !== null ? ` · ETA ${dur(job.eta_s)}` : "") +
      (job.cancel_requested && !ENDED.includes(job.state) ? " · cancelling…" : "") }));
}

function trialsTable(jobId, trials) {
  const cols = [
    ["#", (t) => t.number, (t) => h("a", { href: `#/jobs/${jobId}/trials/${t.number}`, text: `${t.number}` })],
    ["state", (t) => t.state],
    ["configuration", (t) => describe(t)],
    ["tok/s", (t) => t.metrics.output_tok_per_s, (t) => fmt(t.metrics.output_tok_per_s)],
    ["p99 TPOT ms", (t) => t.metrics.p99_tpot_ms, (t) => fmt(t.metrics.p99_tpot_ms, 2)],
    ["p99 TTFT ms", (t) => t.metrics.p99_ttft_ms, (t) => fmt(t.metrics.p99_ttft_ms, 1)],
    ["acceptance", (t) => t.metrics.acceptance_rate, (t) => pct(t.metrics.acceptance_rate)],
    ["mean acc. len", (t) => t.metrics.mean_acceptance_length, (t) => fmt(t.metrics.mean_acceptance_length, 2)],
    ["greedy match", (t) => t.lossless_match_rate, (t) => t.method === "none" && t.state === "complete"
      ? "reference" : pct(t.lossless_match_rate)],
    ["KV tokens", (t) => t.kv_cache_tokens, (t) => int(t.kv_cache_tokens)],
    ["peak RSS MB", (t) => t.peak_rss_mb, (t) => int(t.peak_rss_mb)],
    ["note", (t) => t.fail_reason || "", (t) => t.fail_reason
      ? h("details", {}, h("summary", { text: t.fail_reason }), h("pre", { class: "log", text: t.fail_detail || "" }))
      : [t.reused_from !== null ? `reused trial ${t.reused_from}` : null,
        t.metrics.confirmed ? h("span", { class: "badge", title: "re-measured on a second engine launch", text: "✓ confirmed" }) : null,
        t.metrics.noisy ? h("span", { class: "badge noisy", text: `noisy (MAD ${pct(t.metrics.relative_mad)})` }) : null]],
  ];
  let sortBy = 0, dir = 1;
  const tbody = h("tbody");
  const head = h("tr");
  function draw() {
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
      class: "sortable", "aria-sort": i === sortBy ? (dir > 0 ? "ascending" : "descending") : "none",
      onclick: () => { dir = i === sortBy ? -dir : 1; sortBy = i; draw(); },
    }, c[0], i === sortBy ? (dir > 0 ? " ▲" : " ▼") : "")));
  }
  draw();
  return h("div", { class: "scroll" },
    h("table", { class: "trials", "data-testid": "trials-table" }, h("thead", {}, head), tbody));
}

// Round-cost verdict: per speculative trial, mean time per output token against the
// baseline's at each concurrency, and the level from which it stops paying.
function verdictTable(jobId, rep) {
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
        title: `speedup ${v.speedup.toFixed(2)}× [${v.speedup_ci95_low.toFixed(2)}–${v.speedup_ci95_high === null ? "∞" : v.speedup_ci95_high.toFixed(2)}]`,
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

export async function jobPage(gen, jobId) {
  const head = h("div", { class: "jobhead" });
  const chartHost = h("div", { class: "chart" });
  const summary = h("p", { class: "summary", "data-testid": "pareto-summary" });
  const whyBox = h("ul", { class: "why", "data-testid": "why-winner" });
  // Other targets (an MTP checkpoint, reported against its own baseline) and hosted endpoints.
  const alsoBox = h("ul", { class: "why", "data-testid": "also-measured" });
  const levelSel = h("select", { id: "concurrency" });
  const wlSel = h("select", { id: "workload" });
  const wlLabel = h("label", { hidden: true }, "Workload ", wlSel);
  const verdictBox = h("div", { "data-testid": "verdict-panel" });
  const verdictNote = h("p", { class: "meta" });
  const sloTpot = h("input", { id: "slo-tpot", type: "number", min: 0, step: "any", "aria-label": "SLO p99 TPOT (ms)" });
  const sloTtft = h("input", { id: "slo-ttft", type: "number", min: 0, step: "any", placeholder: "none", "aria-label": "SLO p99 TTFT (ms)" });
  const sloErr = h("span", { class: "errors inline", "data-testid": "slo-error" });
  const exportBox = h("div", { class: "exports", "data-testid": "export-panel" });
  const trialsBox = h("div");
  const UNSET = Symbol("unset");
  let job = null, lastDone = "", slo = null, winner = UNSET;

  const chart = paretoChart(chartHost, {
    onSlo: (v, final) => { sloTpot.value = v; slo = v; reloadPareto(final); },
  });

  app.replaceChildren(head,
    h("section", { class: "card" }, h("h2", { text: "Pareto front" }),
      h("div", { class: "row controls" },
        h("label", {}, "SLO p99 TPOT (ms) ", sloTpot),
        h("label", {}, "SLO p99 TTFT (ms) ", sloTtft),
        h("label", {}, "Concurrency ", levelSel), wlLabel, sloErr),
      chartHost,
      h("p", { class: "legend" },
        h("span", { class: "key feasible" }), "feasible ",
        h("span", { class: "key infeasible" }), "infeasible ",
        h("span", { class: "key baseline" }), "baseline ",
        h("span", { class: "key winner" }), "winner ",
        h("i", { class: "key confirmed" }), " confirmed by a second launch ",
        h("span", { class: "key whisker" }), "95% interval over the repeats · drag the dashed SLO line or type a limit"),
      summary, whyBox, alsoBox),
    h("section", { class: "card" }, h("h2", { text: "Round-cost verdict" }), verdictNote, verdictBox),
    h("section", { class: "card" }, h("h2", { text: "Export the winner" }), exportBox),
    h("section", { class: "card" }, h("h2", { text: "Trials" }), trialsBox));

  let pTimer = 0, seq = 0;
  function reloadPareto(now = true) {
    clearTimeout(pTimer);
    pTimer = setTimeout(loadPareto, now ? 0 : 120);
  }
  async function loadPareto() {
    const mine = ++seq;
    try {
      const rep = await api(`/api/jobs/${jobId}/pareto`, { params: {
        slo_p99_tpot_ms: sloTpot.value, slo_p99_ttft_ms: sloTtft.value, concurrency: levelSel.value,
        workload: wlSel.value } });
      if (mine !== seq || !isCurrent(gen)) return;
      sloErr.textContent = "";
      if (!levelSel.options.length) {
        levelSel.replaceChildren(...rep.levels.map((l) => h("option", { value: l, text: l })));
        levelSel.value = rep.concurrency;
      }
      if (!wlSel.options.length && job?.workloads?.length > 1) {
        wlSel.replaceChildren(...job.workloads.map((w) => h("option", { value: w, text: w })));
        wlSel.value = rep.workload;
        wlLabel.hidden = false;
      }
      if (!sloTpot.value && rep.slo.p99_tpot_ms) sloTpot.value = rep.slo.p99_tpot_ms;
      if (!sloTtft.value && rep.slo.p99_ttft_ms) sloTtft.value = rep.slo.p99_ttft_ms;
      slo = rep.slo.p99_tpot_ms ?? null;
      chart.render(rep, slo, { rescale: false });
      verdictNote.textContent = `Mean time per output token of each speculative configuration against the ` +
        `baseline's at the same concurrency (workload ${rep.workload}): speculation pays when it is lower.`;
      verdictBox.replaceChildren(verdictTable(jobId, rep));
      const sel = rep.points.filter((p) => p.concurrency === rep.concurrency);
      const nFeas = sel.filter((p) => p.feasible).length;
      const w = sel.find((p) => p.is_winner);
      summary.textContent = sel.length
        ? `${nFeas} of ${sel.length} configurations feasible at concurrency ${rep.concurrency}` +
          (w ? ` · winner: trial ${w.trial_number}, ${describe(w)}, ${w.output_tok_per_s.toFixed(1)} tok/s` +
            (w.speedup ? ` (${w.speedup.toFixed(2)}× the baseline)` : "")
             : " · nothing is feasible under this SLO")
        : "No measured trials yet.";
      whyBox.replaceChildren(...(rep.why || []).map((t) => h("li", { text: t })));
      const also = (rep.other_targets || []).map((t) =>
        `Also measured: target ${t}, served by some methods instead of ${rep.target}; compared only ` +
        `with its own baseline (API: /pareto?target=…), never with this chart's.`);
      for (const r of rep.references || []) {
        also.push(`Hosted endpoint ${r.name} (${r.model} at ${r.base_url}): ` + (r.output_tok_per_s == null
          ? `not measured: ${r.error || r.violations.join("; ")}`
          : `${r.output_tok_per_s.toFixed(1)} tok/s, p99 TPOT ${r.p99_tpot_ms?.toFixed(2)} ms` +
            (r.speedup_vs_baseline ? ` (${r.speedup_vs_baseline.toFixed(2)}× the baseline)` : "") +
            ` · same workload and load generator; a reference, never a candidate`));
      }
      alsoBox.replaceChildren(...also.map((t) => h("li", { text: t })));
      if (rep.replay_surface) summary.textContent = `REPLAY of the recorded surface ${rep.replay_surface}: ` +
        "no number here was measured by this job (search benchmarking only). " + summary.textContent;
      if ((w?.trial_number ?? null) !== winner) { winner = w?.trial_number ?? null; loadExports(w, rep.winner_exports); }
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) sloErr.textContent = fieldErrors(err).join("; ");
      else handle(err);
    }
  }
  async function loadExports(w, available) {
    const params = { slo_p99_tpot_ms: sloTpot.value, slo_p99_ttft_ms: sloTtft.value, concurrency: levelSel.value,
      workload: wlSel.value };
    // No list of formats: ask again on the next reload of the chart.
    if (!(await exportPanel(exportBox, jobId, w, params, available))) winner = UNSET;
  }
  for (const e of [sloTpot, sloTtft]) e.addEventListener("input", () => {
    const v = Number(sloTpot.value);
    chart.placeSlo(sloTpot.value && v > 0 ? v : null);
    reloadPareto(false);
  });
  levelSel.addEventListener("change", () => reloadPareto());
  wlSel.addEventListener("change", () => { winner = UNSET; reloadPareto(); });

  async function refresh() {
    try {
      job = await api(`/api/jobs/${jobId}`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        app.replaceChildren(h("p", { class: "card", text: `Job ${jobId} not found.` }));
        return false;
      }
      handle(err);
      return true;
    }
    if (!isCurrent(gen)) return false;
    showBanner("");
    const cancel = h("button", { type: "button", id: "cancel", text: "Cancel job",
      disabled: ENDED.includes(job.state) || job.cancel_requested,
      onclick: async () => {
        try { await api(`/api/jobs/${jobId}/cancel`, { method: "POST" }); refresh(); } catch (err) { handle(err); }
      } });
    head.replaceChildren(h("section", { class: "card" },
      h("h1", {}, `Job #${job.id} · ${job.name} `, stateBadge(job.state)),
      progress(job),
      h("p", { class: "meta", text:
        `workload ${job.workload} · concurrency ${job.concurrency.join(", ")} · objectives ` +
        job.objectives.map((o) => `${o.direction} ${o.metric}`).join(", ") +
        ` · engine launches ${job.engine_launches} (${fmt(job.engine_startup_s)} s start-up)` }),
      job.error && job.state !== "cancelled" ? h("pre", { class: "log", text: job.error }) : null,
      ENDED.includes(job.state) ? null : cancel));
    // The confirmation launches after the last trial change the numbers too: reload on the
    // job's end as well as on each finished trial.
    const done = `${job.trials_done}|${job.state}`;
    if (done !== lastDone) {
      lastDone = done;
      const page = await api(`/api/jobs/${jobId}/trials`, { params: { limit: 1000 } });
      trialsBox.replaceChildren(trialsTable(jobId, page.items));
      winner = UNSET;
      await loadPareto();
    }
    return !ENDED.includes(job.state);
  }
  if (await refresh()) {
    const timer = setInterval(async () => {
      if (!isCurrent(gen) || !(await refresh())) clearInterval(timer);
    }, 2000);
  }
}
