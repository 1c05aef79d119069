// The trial page: the configuration, and per measurement the per-position acceptance and
// the latency distributions (histograms of the per-request values where kept).

import { api } from "./api.js";
import { bars, histogram } from "./plots.js";
import { app, describe, fmt, h, handle, int, isCurrent, pct } from "./util.js";

export async function trialPage(gen, jobId, number) {
  let t;
  try {
    t = await api(`/api/jobs/${jobId}/trials/${number}`);
  } catch (err) {
    handle(err);
    return;
  }
  if (!isCurrent(gen)) return;
  const sections = [];
  const several = new Set(t.measurements.map((m) => m.workload)).size > 1;
  for (const m of t.measurements) {
    const acc = h("div"), lat = h("div", { class: "hists" });
    if (m.per_position_acceptance?.length) {
      bars(acc, m.per_position_acceptance.map((v, i) => ({ label: `draft position ${i + 1}`, value: v })), { unit: "%", max: 1 });
    } else acc.append(h("p", { class: "meta", text: "No speculation at this trial: no acceptance to show." }));
    if (t.offline_per_position_acceptance?.length) {
      acc.append(h("p", { class: "meta", "data-testid": "offline-acceptance", text:
        `Predicted before the launch from the baseline's outputs (offline, not measured): ${
          t.offline_per_position_acceptance.map((v, i) => `position ${i + 1} ${pct(v)}`).join(", ")}` }));
    }
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
      h("pre", { class: "params", tabindex: 0, text: JSON.stringify(t.params, null, 2) }),
      t.state === "complete" ? h("p", { class: "meta", "data-testid": "trial-memory", text: memory.join(" · ") }) : null,
      t.fail_reason ? h("p", { class: "errors", text: `failed: ${t.fail_reason}` }) : null,
      t.reused_from !== null ? h("p", { class: "meta", text: `Same engine configuration as trial ${t.reused_from}: its measurement is reused.` }) : null),
    ...sections,
    t.fail_detail || t.log_tail
      ? h("section", { class: "card" }, h("h2", { text: "Engine log (tail)" }), h("pre", { class: "log", tabindex: 0, text: t.fail_detail || t.log_tail }))
      : "");
}
