// Shared by every page: the element builder, number formatters, the error banner, the one
// polite live region (announce), the navigation generation, clipboard copy, the metric names,
// and the one table of methods (configuration labels).

import { ApiError, fieldErrors } from "./api.js";

export const app = document.getElementById("app");
const banner = document.getElementById("banner");
const liveRegion = document.getElementById("status");
export const ENDED = ["succeeded", "failed", "cancelled"];

// Bumps on navigation; a page's pollers and late answers stop once theirs is stale.
let generation = 0;
export const nextGeneration = () => ++generation;
export const isCurrent = (gen) => gen === generation;

export function h(tag, attrs = {}, ...children) {
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

export const fmt = (v, d = 1) => (v === null || v === undefined ? "–" : typeof v === "number" ? v.toFixed(d) : String(v));
export const pct = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);
export const int = (v) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"));
export const dur = (s) => (s === null || s === undefined ? "–" : s < 90 ? `${Math.round(s)} s` : `${Math.round(s / 60)} min`);

export function showBanner(msg) {
  banner.textContent = msg || "";
  banner.hidden = !msg;
}

// The page's one polite live region: a status change is said once, not every refresh.
export function announce(msg) {
  if (liveRegion.textContent !== msg) liveRegion.textContent = msg;
}

export function handle(err) {
  if (err instanceof ApiError && err.status === 401) {
    showBanner("This server needs an API token: paste it in the box at the top right.");
  } else {
    showBanner(fieldErrors(err).join("\n"));
  }
}

export function stateBadge(state) {
  return h("span", { class: `state ${state}`, "data-testid": "job-state", text: state });
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = h("textarea", { style: "position:fixed;opacity:0" });
    ta.value = text;
    document.body.append(ta); ta.select(); document.execCommand("copy"); ta.remove();
  }
}

// --------------------------------------------------------------------------- metrics

// Every metric an objective may name (tuner/space/_space.py METRIC_DIRECTIONS), with its
// better direction, and the measured quantities the pages show beside them.
export const METRIC_DIRECTIONS = {
  output_tok_per_s: "maximize", requests_per_s: "maximize", goodput_req_per_s: "maximize",
  p50_tpot_ms: "minimize", p90_tpot_ms: "minimize", p99_tpot_ms: "minimize",
  p50_ttft_ms: "minimize", p90_ttft_ms: "minimize", p99_ttft_ms: "minimize",
  p50_e2e_ms: "minimize", p90_e2e_ms: "minimize", p99_e2e_ms: "minimize", p99_itl_ms: "minimize",
};
const NAMED = {
  output_tok_per_s: "output tokens/s", requests_per_s: "requests/s", goodput_req_per_s: "goodput (requests/s)",
  acceptance_rate: "acceptance rate", mean_acceptance_length: "mean acceptance length",
};
export function metricLabel(m) {
  if (NAMED[m]) return NAMED[m];
  const q = String(m).match(/^(p\d+)_(tpot|ttft|e2e|itl)_ms$/);
  return q ? `${q[1]} ${q[2] === "e2e" ? "end-to-end" : q[2].toUpperCase()} (ms)` : m;
}

// The 95% interval over the repeats of a measurement's metric, or null (one run has none).
export function interval(m, name) {
  const st = m?.stats?.[name];
  return st && st.n > 1 && st.ci95_low != null && st.ci95_high != null ? [Math.max(0, st.ci95_low), st.ci95_high] : null;
}

// --------------------------------------------------------------------------- methods

const lastPart = (path) => String(path).split("/").pop();

// The one table of speculative methods in the UI: the parameters of its own that a
// configuration's label shows after "<method> k=<n>", in order (a missing one shows nothing).
// Then, for any method: its head where it names one (EAGLE, EAGLE-3), its target where it is
// served from another checkpoint than engine.model (MTP), and max_num_seqs.
const PARAM_TEXT = {
  lookup: (pr) => ` lookup=${pr.prompt_lookup_min}..${pr.prompt_lookup_max}`,
  draft: (pr) => (pr.draft ? ` draft=${lastPart(pr.draft)}` : ""),
  head: (pr) => (pr.head ? ` head=${lastPart(pr.head)}` : ""),
  // Suffix decoding's knobs, where the space searched them (else the engine's defaults).
  suffix: (pr) =>
    [
      ["max_tree_depth", "depth"],
      ["max_cached_requests", "cached"],
      ["max_spec_factor", "factor"],
      ["min_token_prob", "min_prob"],
    ]
      .filter(([k]) => pr[k] !== undefined && pr[k] !== null)
      .map(([k, short]) => ` ${short}=${pr[k]}`)
      .join(""),
  // SGLang's adaptive depth: the candidate steps, where the trial had it on.
  adaptive: (pr) => (pr.adaptive && pr.adaptive !== "off" ? ` adaptive=${pr.adaptive}` : ""),
};
const METHOD_PARAMS = {
  ngram: ["lookup"],
  draft_model: ["draft"],
  eagle: ["adaptive"],
  eagle3: ["adaptive"],
  mtp: [],
  suffix: ["suffix"],
  medusa: [],
  mlp_speculator: [],
  ngram_gpu: ["lookup"],
  dflash: [],
  dspark: [],
};

// A configuration (a trial, a Pareto point, a current trial) as one line of text; the
// baseline ("none") reads "baseline (no speculation)".
export function describe(p) {
  const pr = p.params || {};
  const on = pr.target ? ` on ${lastPart(pr.target)}` : "";
  if (p.method === "none") return `baseline (no speculation)${on}, seqs=${pr.max_num_seqs}`;
  const shown = [...(Object.hasOwn(METHOD_PARAMS, p.method) ? METHOD_PARAMS[p.method] : []), "head"];
  const params = shown.map((k) => PARAM_TEXT[k](pr)).join("");
  return `${p.method} k=${pr.num_speculative_tokens}${params}${on}, seqs=${pr.max_num_seqs}`;
}
