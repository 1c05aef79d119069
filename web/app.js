// SpecTune web UI: a hash router over four pages (jobs + submit, job, trial, comparison of
// trials), and the token box. Plain ES modules, no build step, no network access beyond this
// server. One module per page: jobs.js, job.js (its parts in chart.js, plots.js, verdict.js,
// export.js, logtail.js, trials.js), trial.js, compare.js; what they share is in util.js.

import { setToken, token } from "./api.js";
import { comparePage } from "./compare.js";
import { jobPage } from "./job.js";
import { jobsPage } from "./jobs.js";
import { trialPage } from "./trial.js";
import { nextGeneration, showBanner } from "./util.js";

function route() {
  const gen = nextGeneration();
  showBanner("");
  const path = location.hash.replace(/^#/, "") || "/";
  let m;
  if ((m = path.match(/^\/jobs\/(\d+)\/trials\/(\d+)$/))) return trialPage(gen, +m[1], +m[2]);
  if ((m = path.match(/^\/jobs\/(\d+)\/compare\/([\d,]+)$/))) {
    return comparePage(gen, +m[1], m[2].split(",").filter(Boolean).map(Number));
  }
  if ((m = path.match(/^\/jobs\/(\d+)$/))) return jobPage(gen, +m[1]);
  return jobsPage(gen);
}

const tokenInput = document.getElementById("token");
tokenInput.value = token();
tokenInput.addEventListener("change", () => { setToken(tokenInput.value.trim()); route(); });
window.addEventListener("hashchange", route);
route();
