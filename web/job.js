// The job page: progress and cancel, the Pareto chart (its axes the job's objectives) with
// its SLO and concurrency controls, why the winner won, the history of the first objective and
// the parameter importances the data supports, the round-cost verdict, the export panel, the
// running trial's live log, and the trials table (sort, compare, CSV). A guided job's
// predictions are drawn apart from its measurements; a simulated surface says so on top.

import { api, ApiError, fieldErrors } from "./api.js";
import { chartAxes, paretoChart } from "./chart.js";
import { exportPanel } from "./export.js";
import { logPanel } from "./logtail.js";
import { historyPlot, importancePlot } from "./plots.js";
import { downloadCsv, trialsCsv, trialsTable } from "./trials.js";
import { announce, app, describe, dur, ENDED, fmt, h, handle, isCurrent, metricLabel, showBanner, stateBadge } from "./util.js";
import { verdictTable } from "./verdict.js";

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

export async function jobPage(gen, jobId) {
  const head = h("div", { class: "jobhead" });
  const simBanner = h("p", { class: "simulated", "data-testid": "simulated-banner", hidden: true,
    text: "SIMULATED: no number on this page was measured" });
  const predLegend = h("span", { "data-testid": "predicted-legend", hidden: true },
    h("span", { class: "key predicted" }), "predicted (not measured) ");
  const chartHost = h("div", { class: "chart" });
  const summary = h("p", { class: "summary", "data-testid": "pareto-summary" });
  const whyBox = h("ul", { class: "why", "data-testid": "why-winner" });
  const winnerStatus = h("p", { class: "winner-status", "data-testid": "winner-status" });
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
  const historyHost = h("div", { class: "chart" });
  const objSel = h("select", { id: "history-objective" });
  const objLabel = h("label", { hidden: true }, "Objective ", objSel);
  const importanceBox = h("div", { "data-testid": "importance" }, h("p", { class: "meta", text: "Asking…" }));
  const log = logPanel(jobId);
  const compareBtn = h("button", { type: "button", id: "compare", disabled: true, text: "Compare selected (0)",
    onclick: () => { location.hash = `#/jobs/${jobId}/compare/${[...view.selected].sort((a, b) => a - b).join(",")}`; } });
  const csvBtn = h("button", { type: "button", id: "csv", disabled: true, text: "Download CSV",
    onclick: () => downloadCsv(`spectune-job-${jobId}-trials.csv`, trialsCsv(trials, job?.objectives)) });
  const view = { sortBy: 0, dir: 1, selected: new Set() };
  const UNSET = Symbol("unset");
  let job = null, lastDone = "", slo = null, winner = UNSET, trials = [], lastRep = null, axes = chartAxes([]);
  let predicted = [];
  const sloInput = () => (axes.sloMetric === "p99_ttft_ms" ? sloTtft : sloTpot);

  const chart = paretoChart(chartHost, {
    onSlo: (v, final) => { sloInput().value = v; slo = v; reloadPareto(final); },
    onOpen: (n) => { location.hash = `#/jobs/${jobId}/trials/${n}`; },
  });
  function onSelect() {
    compareBtn.disabled = view.selected.size < 2;
    compareBtn.textContent = `Compare selected (${view.selected.size})`;
  }
  // A measurement of a trial at a Pareto point's level and workload (for an objective the
  // Pareto answer does not carry).
  const lookup = (p) => trials.find((t) => t.number === p.trial_number)?.measurements
    ?.find((m) => m.concurrency === p.concurrency && m.workload === lastRep?.workload) || null;
  function drawHistory() {
    if (!job || !lastRep) return;
    const o = job.objectives.find((x) => x.metric === objSel.value) || job.objectives[0];
    if (!o) return;
    const feasible = new Map(lastRep.points.filter((p) => p.concurrency === job.objective_concurrency)
      .map((p) => [p.trial_number, p.feasible]));
    historyPlot(historyHost, trials, { metric: o.metric, direction: o.direction, feasible });
  }
  objSel.addEventListener("change", drawHistory);
  async function loadImportance() {
    try {
      importancePlot(importanceBox, await api(`/api/jobs/${jobId}/importance`));
    } catch (err) {
      importanceBox.replaceChildren(h("p", { class: "errors", text: fieldErrors(err).join("\n") }));
    }
  }

  app.replaceChildren(simBanner, head,
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
        h("i", { class: "key confirmed" }), " launched again to confirm it ",
        h("span", { "data-testid": "unconfirmed-legend" }, h("i", { class: "key unconfirmed", text: "?" }),
          " winner unconfirmed: fewer than two undisturbed launches, so another launch may rank it otherwise "), predLegend,
        h("span", { "data-testid": "other-level-legend" }, h("span", { class: "key other" }),
          "faded: the same trials at the other concurrency levels (pick one above) "),
        h("span", { class: "key whisker" }), "95% interval for one more launch (from the job's pooled launch-to-launch " +
          "spread; a point's tooltip says when the job launched nothing twice and it covers only one launch's " +
          "repeats) · drag the dashed SLO line or type a limit"),
      summary, winnerStatus, whyBox, alsoBox),
    h("section", { class: "card" }, h("h2", { text: "History" }),
      h("div", { class: "row controls" }, objLabel),
      historyHost,
      h("p", { class: "legend" },
        h("span", { class: "key feasible" }), "feasible ", h("span", { class: "key infeasible" }),
        "infeasible under the chart's SLO at the objectives' concurrency ", h("span", { class: "key unplotted" }),
        "not a point of the chart ", h("span", { class: "key best" }),
        "best feasible so far ", h("span", { class: "key failed", text: "×" }), " failed or pruned"),
      h("h3", { text: "What moved the first objective" }), importanceBox),
    h("section", { class: "card" }, h("h2", { text: "Round-cost verdict" }), verdictNote, verdictBox),
    h("section", { class: "card" }, h("h2", { text: "Export the winner" }), exportBox),
    log.card,
    h("section", { class: "card" }, h("h2", { text: "Trials" }),
      h("div", { class: "row" }, compareBtn, csvBtn,
        h("span", { class: "meta", text: "Tick two or more trials to compare them side by side." })),
      trialsBox));

  let pTimer = 0, seq = 0;
  function reloadPareto(now = true) {
    clearTimeout(pTimer);
    pTimer = setTimeout(loadPareto, now ? 0 : 120);
  }
  async function loadPareto() {
    const mine = ++seq;
    try {
      // The exports are asked with the parameters this answer was computed for: the SLO may
      // have moved since (a drag), and a winner under the old SLO is no winner under the new.
      const asked = { slo_p99_tpot_ms: sloTpot.value, slo_p99_ttft_ms: sloTtft.value,
        concurrency: levelSel.value, workload: wlSel.value };
      const rep = await api(`/api/jobs/${jobId}/pareto`, { params: asked });
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
      lastRep = rep;
      axes = chartAxes(rep.objectives);
      slo = axes.sloMetric ? rep.slo[axes.sloMetric] ?? null : null;
      chart.render(rep, slo, { rescale: false, axes, lookup, predicted });
      simBanner.hidden = !rep.replay_simulated;
      predLegend.hidden = !predicted.some((q) => q.workload === rep.workload);
      drawHistory();
      verdictNote.textContent = `Mean time per output token of each speculative configuration against the ` +
        `baseline's at the same concurrency (workload ${rep.workload}, ${trafficText(rep)}, found under ` +
        `${samplingText(rep.sampling)}): ` +
        `speculation pays when it is lower.`;
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
      winnerStatusText(winnerStatus, rep, w);
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
      if ((w?.trial_number ?? null) !== winner) { winner = w?.trial_number ?? null; loadExports(w, rep.winner_exports, asked); }
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) sloErr.textContent = fieldErrors(err).join("; ");
      else handle(err);
    }
  }
  // Where the workload's requests went and their prompt length, as the CLI report says it.
  function trafficText(rep) {
    const how = rep.endpoint === "chat" ? "chat, through the model's chat template" : "raw text";
    return rep.prompt_tokens_mean == null ? how : `${how}, ${Math.round(rep.prompt_tokens_mean)} prompt tokens a request`;
  }
  // The workload's sampling settings as the CLI report names them.
  function samplingText(s) {
    if (!s || !s.temperature) return "greedy decoding";
    const names = { temperature: "temperature", top_p: "top-p", top_k: "top-k", min_p: "min-p", seed: "seed" };
    return Object.keys(names).filter((k) => s[k] != null).map((k) => `${names[k]} ${s[k]}`).join(", ");
  }
  let exportSeq = 0;
  async function loadExports(w, available, params) {
    const mine = ++exportSeq;
    // A later winner's panel is being filled: this one is dropped, never drawn over it.
    const stale = () => mine !== exportSeq || !isCurrent(gen);
    // No list of formats: ask again on the next reload of the chart.
    if (!(await exportPanel(exportBox, jobId, w, params, available, stale)) && !stale()) winner = UNSET;
  }
  for (const e of [sloTpot, sloTtft]) e.addEventListener("input", () => {
    const v = Number(sloInput().value);
    chart.placeSlo(sloInput().value && v > 0 ? v : null);
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
    announce(`Job #${job.id} ${job.state}: ${job.trials_done} of ${job.n_trials} trials done` +
      (job.trials_failed ? `, ${job.trials_failed} failed` : ""));
    log.update(job.state === "running");
    if (!objSel.options.length && job.objectives.length) {
      objSel.replaceChildren(...job.objectives.map((o) => h("option", { value: o.metric, text: metricLabel(o.metric) })));
      objLabel.hidden = job.objectives.length < 2;
    }
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
      trials = page.items;
      csvBtn.disabled = !trials.length;
      trialsBox.replaceChildren(trialsTable(jobId, trials, view, onSelect));
      try {
        predicted = (await api(`/api/jobs/${jobId}/predictions`)).points;
      } catch {
        predicted = []; // e.g. a job stored by another version: its measurements still show
      }
      winner = UNSET;
      loadImportance();
      await loadPareto();
    }
    return !ENDED.includes(job.state);
  }
  // The next refresh is due 2 s after this one ended, never while one is in flight: a slow
  // server gets no pile of overlapping reloads drawing over each other.
  const tick = async () => {
    if (isCurrent(gen) && (await refresh())) setTimeout(tick, 2000);
  };
  if (await refresh()) setTimeout(tick, 2000);
}

// Whether the winner was launched at least twice, and what the job cannot tell apart from it.
function winnerStatusText(box, rep, w) {
  box.classList.toggle("unconfirmed", Boolean(w && !rep.winner_confirmed && !rep.replay_surface));
  const stop = rep.stop_reason ? ` Why the job stopped: ${rep.stop_reason}.` : "";
  if (!w || rep.replay_surface) { box.textContent = stop.trim(); return; }
  const same = (rep.equivalent_trials || []).map((n) => `trial ${n}`);
  box.textContent = (rep.winner_confirmed
    ? `Winner confirmed: ${w.launches} launches.`
    : `Winner unconfirmed: ${w.launches} undisturbed launch${w.launches === 1 ? "" : "es"}, fewer than two ` +
      "(confirmation off, its budget spent, or a launch failed or was disturbed).") +
    (same.length ? ` The job cannot tell it apart from ${same.join(", ")}.` : "") + stop;
}
