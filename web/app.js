// SpecTune web UI: a hash router over three pages (jobs + submit, job, trial).
// Plain ES modules, no build step, no network access beyond this server.

import { api, ApiError, fieldErrors, setToken, token } from "./api.js";
import { bars, describe, histogram, paretoChart } from "./chart.js";

const app = document.getElementById("app");
const banner = document.getElementById("banner");
const ENDED = ["succeeded", "failed", "cancelled"];
const FORMATS = [
  { id: "vllm-json", label: "vLLM --speculative-config (JSON)" },
  { id: "vllm-cli", label: "vLLM command line" },
  { id: "sglang", label: "SGLang launch_server" },
  { id: "trtllm-yaml", label: "TensorRT-LLM YAML (--config)" },
];
let generation = 0; // bumps on navigation; stale pollers stop

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}

const fmt = (v, d = 1) => (v === null || v === undefined ? "–" : typeof v === "number" ? v.toFixed(d) : String(v));
const pct = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);
const int = (v) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"));
const dur = (s) => (s === null || s === undefined ? "–" : s < 90 ? `${Math.round(s)} s` : `${Math.round(s / 60)} min`);

function showBanner(msg) {
  banner.textContent = msg || "";
  banner.hidden = !msg;
}

function handle(err) {
  if (err instanceof ApiError && err.status === 401) {
    showBanner("This server needs an API token: paste it in the box at the top right.");
  } else {
    showBanner(fieldErrors(err).join("\n"));
  }
}

function stateBadge(state) {
  return h("span", { class: `state ${state}`, "data-testid": "job-state", text: state });
}

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

// --------------------------------------------------------------------------- jobs page

async function jobsPage(gen) {
  const list = h("tbody");
  const errors = h("ul", { class: "errors", "data-testid": "form-errors" });
  const presetSel = h("select", { id: "preset", name: "preset" });
  const yaml = h("textarea", { id: "yaml", rows: 16, spellcheck: "false", hidden: true,
    placeholder: "name: my-space\nengine: {model: ../models/tiny/target}\n…" });
  const trials = h("input", { id: "trials", type: "number", min: 1, max: 10000, placeholder: "from the space" });
  const sloTpot = h("input", { id: "slo-tpot-new", type: "number", min: 0, step: "any", placeholder: "from the space" });
  const sloTtft = h("input", { id: "slo-ttft-new", type: "number", min: 0, step: "any", placeholder: "from the space" });
  const srcPreset = h("input", { type: "radio", name: "src", value: "preset", checked: true });
  const srcYaml = h("input", { type: "radio", name: "src", value: "yaml" });
  const submit = h("button", { type: "submit", id: "submit", text: "Start tuning job" });
  let presets = [];

  function body() {
    const b = {};
    if (srcYaml.checked) b.search_space_yaml = yaml.value;
    else b.preset = presetSel.value;
    if (trials.value) b.trials = Number(trials.value);
    const slo = {};
    if (sloTpot.value) slo.p99_tpot_ms = Number(sloTpot.value);
    if (sloTtft.value) slo.p99_ttft_ms = Number(sloTtft.value);
    if (Object.keys(slo).length) b.slo = slo;
    return b;
  }
  function showErrors(lines) {
    errors.replaceChildren(...lines.map((l) => h("li", { text: l })));
  }
  let vTimer = 0, vSeq = 0;
  function validateSoon() {
    clearTimeout(vTimer);
    vTimer = setTimeout(async () => {
      const mine = ++vSeq; // answers can arrive out of order: only the latest counts
      try {
        const v = await api("/api/search-spaces/validate", { method: "POST", body: body() });
        if (mine !== vSeq) return;
        showErrors([]);
        submit.textContent = `Start tuning job (${v.n_trials} trials)`;
      } catch (err) {
        if (mine !== vSeq) return;
        if (err instanceof ApiError && err.status === 422) showErrors(fieldErrors(err));
        else handle(err);
      }
    }, 300);
  }
  for (const e of [presetSel, yaml, trials, sloTpot, sloTtft]) e.addEventListener("input", validateSoon);
  for (const r of [srcPreset, srcYaml]) {
    r.addEventListener("change", () => {
      yaml.hidden = !srcYaml.checked;
      presetSel.disabled = srcYaml.checked;
      if (srcYaml.checked && !yaml.value) yaml.value = presets.find((p) => p.name === presetSel.value)?.yaml || "";
      validateSoon();
    });
  }
  const form = h("form", { id: "submit-form", onsubmit: async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    try {
      const job = await api("/api/jobs", { method: "POST", body: body() });
      location.hash = `#/jobs/${job.id}`;
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) showErrors(fieldErrors(err));
      else handle(err);
    } finally {
      submit.disabled = false;
    }
  } },
    h("h2", { text: "New tuning job" }),
    h("div", { class: "row" },
      h("label", {}, srcPreset, " Preset "), presetSel,
      h("label", {}, srcYaml, " Paste YAML")),
    yaml,
    h("div", { class: "row" },
      h("label", {}, "Trial budget ", trials),
      h("label", {}, "SLO p99 TPOT (ms) ", sloTpot),
      h("label", {}, "SLO p99 TTFT (ms) ", sloTtft)),
    errors, submit);

  app.replaceChildren(
    h("section", { class: "card" }, form),
    h("section", { class: "card" }, h("h2", { text: "Jobs" }),
      h("table", { class: "jobs", "data-testid": "jobs-table" },
        h("thead", {}, h("tr", {}, ...["id", "name", "state", "progress", "created", ""].map((t) => h("th", { text: t })))),
        list)));

  try {
    presets = await api("/api/search-spaces");
    presetSel.replaceChildren(...presets.map((p) =>
      h("option", { value: p.name, text: `${p.name} (${p.trials ?? "?"} trials${p.error ? ", invalid" : ""})` })));
  } catch (err) { handle(err); }

  async function refresh() {
    try {
      const jobs = await api("/api/jobs", { params: { limit: 50 } });
      showBanner("");
      list.replaceChildren(...jobs.items.map((j) => h("tr", { "data-job": j.id },
        h("td", {}, h("a", { href: `#/jobs/${j.id}`, text: `#${j.id}` })),
        h("td", { text: j.name }), h("td", {}, stateBadge(j.state)),
        h("td", { text: `${j.trials_done}/${j.n_trials}` }),
        h("td", { text: new Date(j.created_at).toLocaleString() }),
        h("td", {}, h("a", { href: `#/jobs/${j.id}`, text: "open →" })))));
      if (!jobs.items.length) list.replaceChildren(h("tr", {}, h("td", { colspan: 6, text: "No jobs yet." })));
    } catch (err) { handle(err); }
  }
  await refresh();
  const timer = setInterval(() => (gen === generation ? refresh() : clearInterval(timer)), 2000);
}

// --------------------------------------------------------------------------- job page

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
      const word = v.pays_off ? "pays off" : "does not pay";
      return h("td", { class: v.pays_off ? "pays" : "no-pay", "data-concurrency": c, "data-pays": v.pays_off,
        text: `${v.spec_ms_per_token.toFixed(2)} ms/tok, ${word} by ${Math.abs(v.margin_pct).toFixed(1)}%` });
    });
    const first = r.verdicts[0];
    const cross = r.crossover_concurrency;
    const where = !r.verdicts.length ? "–"
      : cross === null ? "pays at every level measured"
      : cross === first.concurrency ? `does not pay from concurrency ${cross} (the lowest measured)`
      : `stops paying at concurrency ${cross}`;
    return h("tr", { "data-trial": r.trial_number },
      h("td", {}, h("a", { href: `#/jobs/${jobId}/trials/${r.trial_number}`, text: `${r.trial_number}` })),
      h("td", { text: describe(r) }), ...cells, h("td", { class: "crossover", text: where }));
  });
  return h("div", { class: "scroll" },
    h("table", { class: "verdicts", "data-testid": "verdict-table" }, h("thead", {}, head), h("tbody", {}, body)));
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = h("textarea", { style: "position:fixed;opacity:0" });
    ta.value = text;
    document.body.append(ta); ta.select(); document.execCommand("copy"); ta.remove();
  }
}

async function jobPage(gen, jobId) {
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
      if (mine !== seq || gen !== generation) return;
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
      if ((w?.trial_number ?? null) !== winner) { winner = w?.trial_number ?? null; loadExports(rep, w); }
    } catch (err) {
      if (err instanceof ApiError && err.status === 422) sloErr.textContent = fieldErrors(err).join("; ");
      else handle(err);
    }
  }
  async function loadExports(rep, w) {
    const params = { slo_p99_tpot_ms: sloTpot.value, slo_p99_ttft_ms: sloTtft.value, concurrency: levelSel.value,
      workload: wlSel.value };
    const blocks = [];
    for (const f of FORMATS) {
      const pre = h("pre", { class: "export", "data-format": f.id });
      const btn = h("button", { type: "button", class: "copy", "data-format": f.id, text: "Copy", disabled: true });
      blocks.push(h("div", { class: "export-block" }, h("h3", { text: f.label }), pre, btn));
      if (f.unsupported) { pre.textContent = "not supported yet"; continue; }
      if (!w) { pre.textContent = "nothing feasible under this SLO: nothing to export"; continue; }
      try {
        const out = await api(`/api/jobs/${jobId}/export`, { params: { format: f.id, ...params } });
        pre.textContent = out.text;
        btn.disabled = false;
        btn.addEventListener("click", async () => {
          await copyText(out.text);
          btn.textContent = "Copied";
          setTimeout(() => { btn.textContent = "Copy"; }, 1500);
        });
      } catch (err) { pre.textContent = fieldErrors(err).join("\n"); }
    }
    exportBox.replaceChildren(...blocks);
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
    if (gen !== generation) return false;
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
      if (gen !== generation || !(await refresh())) clearInterval(timer);
    }, 2000);
  }
}

// --------------------------------------------------------------------------- trial page

async function trialPage(gen, jobId, number) {
  let t;
  try {
    t = await api(`/api/jobs/${jobId}/trials/${number}`);
  } catch (err) {
    handle(err);
    return;
  }
  if (gen !== generation) return;
  const sections = [];
  const several = new Set(t.measurements.map((m) => m.workload)).size > 1;
  for (const m of t.measurements) {
    const acc = h("div"), lat = h("div", { class: "hists" });
    if (m.per_position_acceptance?.length) {
      bars(acc, m.per_position_acceptance.map((v, i) => ({ label: `draft position ${i + 1}`, value: v })), { unit: "%", max: 1 });
    } else acc.append(h("p", { class: "meta", text: "No speculation at this trial: no acceptance to show." }));
    const perRequest = ["ttft", "tpot", "e2e"].some((k) => m[`${k}_ms_values`]?.length);
    if (perRequest) {
      for (const [k, title] of [["ttft", "TTFT"], ["tpot", "TPOT"], ["e2e", "end-to-end"]]) {
        const box = h("div");
        histogram(box, m[`${k}_ms_values`] || [], { title, unit: "ms",
          markers: ["p50", "p90", "p99"].map((q) => ({ label: q, value: m[`${q}_${k}_ms`] })) });
        lat.append(box);
      }
    } else {
      // measured before per-request values were kept: the percentiles only
      const rows = [];
      for (const k of ["ttft", "tpot", "itl", "e2e"]) {
        for (const q of ["p50", "p90", "p99"]) rows.push({ label: `${q} ${k.toUpperCase()}`, value: m[`${q}_${k}_ms`] });
      }
      bars(lat, rows, { unit: "ms" });
    }
    const ci = (name, d) => {
      const st = m.stats?.[name];
      return st && st.n > 1 ? ` (95% interval ${Math.max(0, st.ci95_low).toFixed(d)}–${st.ci95_high.toFixed(d)})` : "";
    };
    const facts = [
      m.repeats ? `median of ${m.repeats} repeat${m.repeats > 1 ? "s" : ""}` +
        (m.relative_mad != null ? `, relative MAD ${pct(m.relative_mad)}` : "") : null,
      `${fmt(m.output_tok_per_s)} tok/s${ci("output_tok_per_s", 1)}`,
      `p99 TPOT ${fmt(m.p99_tpot_ms, 2)} ms${ci("p99_tpot_ms", 2)}`,
      `ITL p50 ${fmt(m.p50_itl_ms, 2)} / p99 ${fmt(m.p99_itl_ms, 2)} ms`,
      m.mean_queue_ms != null ? `mean queue ${fmt(m.mean_queue_ms, 2)} ms` : null,
      m.confirmed && m.search ? `search measured ${fmt(m.search.output_tok_per_s)} tok/s` : null,
    ].filter(Boolean);
    sections.push(h("section", { class: "card", "data-concurrency": m.concurrency, "data-workload": m.workload },
      h("h2", {}, `Concurrency ${m.concurrency}${several ? ` · ${m.workload}` : ""} · ${fmt(m.output_tok_per_s)} tok/s · ` +
        `${m.num_ok}/${m.num_requests} requests ok`,
        m.confirmed ? h("span", { class: "badge", title: "re-measured on a second engine launch", text: "✓ confirmed" }) : null,
        m.noisy ? h("span", { class: "badge noisy", text: "noisy" }) : null),
      h("p", { class: "meta", "data-testid": "measurement-facts", text: facts.join(" · ") }),
      h("h3", { text: `Per-position acceptance (rate ${pct(m.acceptance_rate)}, mean length ${fmt(m.mean_acceptance_length, 2)})` }), acc,
      h("h3", { text: "Latency distribution (ms)" }),
      perRequest ? h("p", { class: "meta", text:
        `Per-request values of one of the ${m.repeats || 1} repeat${m.repeats > 1 ? "s" : ""}; ` +
        "dashed lines: p50, p90, p99 (median over the repeats)." }) : null,
      lat));
  }
  const memory = [
    t.method !== "none" ? `greedy output match with the baseline ${pct(t.lossless_match_rate)}` : null,
    t.kv_cache_tokens != null ? `KV cache ${int(t.kv_cache_tokens)} tokens` : "KV cache size not reported",
    `peak RSS ${int(t.peak_rss_mb)} MB`,
  ].filter(Boolean);
  app.replaceChildren(
    h("section", { class: "card" },
      h("p", {}, h("a", { href: `#/jobs/${jobId}`, text: `← job #${jobId}` })),
      h("h1", { text: `Trial ${t.number} · ${describe(t)} · ${t.state}` }),
      h("pre", { class: "params", text: JSON.stringify(t.params, null, 2) }),
      t.state === "complete" ? h("p", { class: "meta", "data-testid": "trial-memory", text: memory.join(" · ") }) : null,
      t.fail_reason ? h("p", { class: "errors", text: `failed: ${t.fail_reason}` }) : null,
      t.reused_from !== null ? h("p", { class: "meta", text: `Same engine configuration as trial ${t.reused_from}: its measurement is reused.` }) : null),
    ...sections,
    t.fail_detail || t.log_tail
      ? h("section", { class: "card" }, h("h2", { text: "Engine log (tail)" }), h("pre", { class: "log", text: t.fail_detail || t.log_tail }))
      : "");
}

// --------------------------------------------------------------------------- router

function route() {
  const gen = ++generation;
  showBanner("");
  const path = location.hash.replace(/^#/, "") || "/";
  let m;
  if ((m = path.match(/^\/jobs\/(\d+)\/trials\/(\d+)$/))) return trialPage(gen, +m[1], +m[2]);
  if ((m = path.match(/^\/jobs\/(\d+)$/))) return jobPage(gen, +m[1]);
  return jobsPage(gen);
}

const tokenInput = document.getElementById("token");
tokenInput.value = token();
tokenInput.addEventListener("change", () => { setToken(tokenInput.value.trim()); route(); });
window.addEventListener("hashchange", route);
route();
