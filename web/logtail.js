// The running trial's engine log, live (GET /api/jobs/{id}/log, secrets redacted by the
// server): the panel asks again on every refresh of the job page while the job runs, and keeps
// the view at the bottom unless the reader has scrolled up.

import { api } from "./api.js";
import { h } from "./util.js";

export function logPanel(jobId) {
  const title = h("h2", { text: "Engine log (running trial)" });
  const meta = h("p", { class: "meta", "data-testid": "log-meta" });
  const pre = h("pre", { class: "log live", tabindex: 0, "data-testid": "live-log", "aria-label": "engine log tail" });
  const card = h("section", { class: "card", hidden: true, "data-testid": "log-panel" }, title, meta, pre);
  let busy = false;

  async function update(running) {
    if (!running) { card.hidden = true; return; }
    if (busy) return;
    busy = true;
    try {
      const r = await api(`/api/jobs/${jobId}/log`);
      if (!r.running) { card.hidden = true; return; }
      card.hidden = false;
      title.textContent = r.trial_number !== null ? `Engine log (trial ${r.trial_number}, running)` : "Engine log (running)";
      meta.textContent = r.file
        ? `${r.file}${r.truncated ? " · its last lines" : ""} · secrets redacted · refreshed every 2 s`
        : "The engine has not written its log yet.";
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      if (pre.textContent !== r.text) {
        pre.textContent = r.text;
        if (atBottom) pre.scrollTop = pre.scrollHeight;
      }
    } catch {
      card.hidden = true; // the log is a convenience: the page's own refresh reports errors
    } finally {
      busy = false;
    }
  }
  return { card, update };
}
