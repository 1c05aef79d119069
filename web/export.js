// The export panel: one block per export format the API lists (GET /api/export-formats,
// asked once per page load), each with the winner's text in that format and a Copy button.
// A format the winner has no form in (the Pareto answer's winner_exports says which, and why)
// shows that reason and is never asked for.

import { api, fieldErrors } from "./api.js";
import { copyText, h } from "./util.js";

let formats = null; // the promise of the list; dropped on failure, so the next panel asks again

// [{name, label, engine, description}, …] in the API's order.
export function exportFormats() {
  if (!formats) {
    formats = api("/api/export-formats").then((r) => r.formats);
    formats.catch(() => { formats = null; });
  }
  return formats;
}

// Fills `box` with the exports of `winner` (a Pareto point, or null when nothing is feasible)
// for `params` (the SLO, concurrency and workload the chart shows); `available` is the Pareto
// answer's winner_exports; `stale()` true when a newer panel replaced this one (nothing is
// drawn then). False when the list of formats could not be had (its error is shown in the box).
export async function exportPanel(box, jobId, winner, params, available = [], stale = () => false) {
  const refused = new Map(available.filter((e) => !e.available).map((e) => [e.name, e.reason]));
  let list;
  try {
    list = await exportFormats();
  } catch (err) {
    if (!stale()) box.replaceChildren(h("p", { class: "errors", text: fieldErrors(err).join("\n") }));
    return false;
  }
  const blocks = [];
  for (const f of list) {
    const pre = h("pre", { class: "export", "data-format": f.name });
    const btn = h("button", { type: "button", class: "copy", "data-format": f.name, text: "Copy", disabled: true });
    blocks.push(h("div", { class: "export-block" }, h("h3", { text: f.label }), pre, btn));
    if (!winner) { pre.textContent = "nothing feasible under this SLO: nothing to export"; continue; }
    if (refused.has(f.name)) { pre.textContent = refused.get(f.name); continue; }
    if (stale()) return true;
    try {
      const out = await api(`/api/jobs/${jobId}/export`, { params: { format: f.name, ...params } });
      pre.textContent = out.text;
      btn.disabled = false;
      btn.addEventListener("click", async () => {
        await copyText(out.text);
        btn.textContent = "Copied";
        setTimeout(() => { btn.textContent = "Copy"; }, 1500);
      });
    } catch (err) { pre.textContent = fieldErrors(err).join("\n"); }
  }
  if (!stale()) box.replaceChildren(...blocks);
  return true;
}
