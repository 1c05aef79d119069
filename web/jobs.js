// The jobs page: the submit form (preset or pasted YAML, validated as you type) and the list
// of jobs, refreshed every 2 s while the page is open.

import { api, ApiError, fieldErrors } from "./api.js";
import { app, h, handle, isCurrent, showBanner, stateBadge } from "./util.js";

export async function jobsPage(gen) {
  const list = h("tbody");
  const errors = h("ul", { class: "errors", "data-testid": "form-errors" });
  const presetSel = h("select", { id: "preset", name: "preset", "aria-label": "Preset" });
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
        h("thead", {}, h("tr", {}, ...["id", "name", "state", "progress", "created", "watched server"].map((t) => h("th", { scope: "col", text: t })),
          h("th", { scope: "col" }, h("span", { class: "sr-only", text: "open" })))),
        list)));

  try {
    presets = await api("/api/search-spaces");
    presetSel.replaceChildren(...presets.map((p) =>
      h("option", { value: p.name, text: `${p.name} (${p.trials ?? "?"} trials${p.error ? ", invalid" : ""})` })));
  } catch (err) { handle(err); }

  async function refresh() {
    try {
      const [jobs, watched] = await Promise.all([
        api("/api/jobs", { params: { limit: 50 } }), api("/api/watches")]);
      showBanner("");
      const byJob = {};
      for (const w of watched.watches) (byJob[w.job_id] ||= []).push(w);
      list.replaceChildren(...jobs.items.map((j) => h("tr", { "data-job": j.id },
        h("td", {}, h("a", { href: `#/jobs/${j.id}`, text: `#${j.id}` })),
        h("td", { text: j.name }), h("td", {}, stateBadge(j.state)),
        h("td", { text: `${j.trials_done}/${j.n_trials}` }),
        h("td", { text: new Date(j.created_at).toLocaleString() }),
        h("td", { "data-testid": "watch-verdict" }, ...watchCells(byJob[j.id] || [])),
        h("td", {}, h("a", { href: `#/jobs/${j.id}`, text: "open →" })))));
      if (!jobs.items.length) list.replaceChildren(h("tr", {}, h("td", { colspan: 7, text: "No jobs yet." })));
    } catch (err) { handle(err); }
  }
  await refresh();
  const timer = setInterval(() => (isCurrent(gen) ? refresh() : clearInterval(timer)), 2000);
}

// The latest verdict of each server watched against a job (POST /api/watches): measured
// acceptance, judged with the job's predictions; "no window yet" until one has closed.
function watchCells(watches) {
  if (!watches.length) return ["—"];
  return watches.map((w) => {
    const why = w.error || (w.last && w.last.reason) || "no window yet";
    return h("div", { title: why },
      h("span", { text: `${w.verdict || "no window yet"}` }),
      h("span", { class: "meta", text: ` · ${w.url}` }));
  });
}
