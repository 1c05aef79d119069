"""What the routes do, apart from HTTP: submit with idempotency, progress, Pareto, export.

Kept out of the route modules so the rules (nothing stored half-way, one job per key) read in
one place and the routes stay thin.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
import yaml
from fastapi import HTTPException, status
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import selectinload

from tuner.api._errors import field_error, space_error
from tuner.api.schemas import (
    SUPPORTED_EXPORTS,
    CurrentTrial,
    ExportPublic,
    HostedReference,
    JobCreate,
    JobList,
    JobPublic,
    ParetoPoint,
    ParetoPublic,
    RoundCostTrial,
    RoundCostVerdict,
    SearchSpacePreset,
    TrialDetail,
    TrialPage,
    TrialPublic,
)
from tuner.api.settings import ServiceSettings
from tuner.space import SearchSpace, SpaceError, parse_space
from tuner.storage import JobModel, StorageError, session_scope, utcnow
from tuner.study import JobNotFound, create_job, load_all_prompts, space_of_job, study_name_for
from tuner.workloads import WorkloadError

if TYPE_CHECKING:
    from tuner.pareto import Point, Report

__all__ = [
    "ReportQuery",
    "export_winner",
    "get_job",
    "job_public",
    "list_jobs",
    "list_presets",
    "pareto",
    "resolve_space",
    "submit",
    "trial_detail",
    "trials_page",
]

LOG_TAIL_CHARS = 4000


# --------------------------------------------------------------------------- presets


def list_presets(folder: Path) -> list[SearchSpacePreset]:
    out = []
    for path in sorted(folder.glob("*.yaml")):
        text = path.read_text()
        try:
            space = parse_space(yaml.safe_load(text), base_dir=folder, source=path.name)
            trials, methods, slo, error = (
                space.trials,
                space.methods.enabled(),
                space.slo.limits(),
                None,
            )
        except (SpaceError, yaml.YAMLError) as e:
            trials, methods, slo, error = None, [], {}, str(e)
        out.append(
            SearchSpacePreset(
                name=path.stem,
                file=path.name,
                yaml=text,
                trials=trials,
                methods=methods,
                slo=slo,
                error=error,
            )
        )
    return out


# --------------------------------------------------------------------------- submit


def _source_data(settings: ServiceSettings, body: JobCreate) -> tuple[str, Any, str]:
    """(field name, parsed mapping, YAML text to keep with the job)."""
    if body.preset is not None:
        names = {p.stem: p for p in settings.search_spaces_dir.glob("*.yaml")}
        path = names.get(body.preset)
        if path is None:
            raise field_error(
                ("body", "preset"),
                f"unknown preset {body.preset!r}; choose from {', '.join(sorted(names))}",
            )
        text = path.read_text()
        return "preset", yaml.safe_load(text), text
    if body.search_space_yaml is not None:
        try:
            data = yaml.safe_load(body.search_space_yaml)
        except yaml.YAMLError as e:
            raise field_error(
                ("body", "search_space_yaml"), f"not valid YAML: {e}", "yaml_error"
            ) from None
        return "search_space_yaml", data, body.search_space_yaml
    assert body.search_space is not None
    return "search_space", body.search_space, yaml.safe_dump(body.search_space, sort_keys=False)


def resolve_space(settings: ServiceSettings, body: JobCreate) -> tuple[SearchSpace, str]:
    """The validated space with the request's overrides; a 422 naming fields otherwise."""
    where, data, text = _source_data(settings, body)
    if isinstance(data, dict):
        data = dict(data)
        if body.trials is not None:
            data["trials"] = body.trials
        if body.slo is not None:
            old = data.get("slo")
            data["slo"] = {**(old if isinstance(old, dict) else {}), **body.slo.limits()}
    try:
        space = parse_space(data, base_dir=settings.search_spaces_dir.resolve(), source=where)
    except SpaceError as e:
        raise space_error(e, ("body", where)) from None
    try:
        load_all_prompts(space)  # a workload file that cannot be read is bad input, too
    except WorkloadError as e:
        raise field_error(("body", where, "workload"), str(e)) from None
    return space, text


def _request_sha256(body: JobCreate) -> str:
    canon = json.dumps(
        body.model_dump(mode="json", exclude={"idempotency_key"}), sort_keys=True
    ).encode()
    return hashlib.sha256(canon).hexdigest()


def _by_key(url: str, key: str) -> tuple[int, str | None] | None:
    with session_scope(url) as s:
        row = s.execute(
            select(JobModel.job_id, JobModel.request_sha256).where(JobModel.idempotency_key == key)
        ).first()
    return None if row is None else (row[0], row[1])


def _replay(url: str, key: str, digest: str) -> int | None:
    """The job an earlier request with this key made, or 409 if that body differed."""
    found = _by_key(url, key)
    if found is None:
        return None
    job_id, old = found
    if old != digest:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"idempotency_key: already used by job {job_id} with a different request body",
        )
    return job_id


def _discard(url: str, job_id: int) -> None:
    """Remove a job this request created but must not keep (lost an idempotency race)."""
    try:
        optuna.delete_study(study_name=study_name_for(job_id), storage=url)
    except KeyError:
        pass
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is not None:
            s.delete(job)


def submit(settings: ServiceSettings, body: JobCreate) -> tuple[int, bool]:
    """Store a queued job for the worker; (job id, created). A repeat of an idempotent
    request returns the first job and ``created`` False."""
    url = settings.database_url
    digest = _request_sha256(body)
    key = body.idempotency_key
    if key is not None and (job_id := _replay(url, key, digest)) is not None:
        return job_id, False
    space, text = resolve_space(settings, body)
    job_id = create_job(url, space, space_yaml=text, n_trials=body.trials)
    # create_job leaves the row invisible to workers (for_worker False) until this commit,
    # so no worker can claim a job whose Optuna study does not exist yet.
    try:
        with session_scope(url) as s:
            job = s.get(JobModel, job_id)
            assert job is not None
            job.for_worker = True
            job.idempotency_key = key
            job.request_sha256 = digest
    except StorageError as e:
        _discard(url, job_id)
        if key is not None and isinstance(e.__cause__, IntegrityError):
            # A concurrent request with the same key committed first.
            if (other := _replay(url, key, digest)) is not None:
                return other, False
        raise
    return job_id, True


# --------------------------------------------------------------------------- jobs


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else max(0.0, (b - a).total_seconds())


def _utc(dt: datetime | None) -> datetime | None:
    """Stored naive in UTC; answered with the zone so clients need not guess."""
    return None if dt is None else dt.replace(tzinfo=UTC)


def job_public(job: JobModel) -> JobPublic:
    """The job with its progress (the trials relationship must be loaded)."""
    try:
        space: SearchSpace | None = space_of_job(job)
    except SpaceError:
        space = None
    finished = [t for t in job.trials if t.state in ("complete", "fail", "pruned")]
    running = [t for t in job.trials if t.state == "running"]
    cur = running[-1] if running and job.state == "running" else None
    durations = [d for t in finished if (d := _seconds(t.started_at, t.finished_at)) is not None]
    eta = None
    if job.state in ("queued", "running") and durations:
        remaining = max(0, job.n_trials - len(finished))
        eta = sum(durations) / len(durations) * remaining
        if cur is not None:
            eta = max(0.0, eta - (_seconds(cur.started_at, utcnow()) or 0.0))
    return JobPublic(
        id=job.job_id,
        name=job.name,
        state=job.state,  # type: ignore[arg-type]
        n_trials=job.n_trials,
        trials_done=len(finished),
        trials_failed=sum(1 for t in finished if t.state == "fail"),
        current_trial=None
        if cur is None
        else CurrentTrial(
            number=cur.number,
            method=cur.method,
            params=cur.params,
            started_at=_utc(cur.started_at),
        ),
        eta_s=None if eta is None else round(eta, 1),
        cancel_requested=bool(job.cancel_requested),
        error=job.error,
        created_at=_utc(job.created_at),
        started_at=_utc(job.started_at),
        finished_at=_utc(job.finished_at),
        engine_launches=job.engine_launches or 0,
        engine_startup_s=round(job.engine_startup_s or 0.0, 2),
        workload=space.primary_workload if space else "",
        workloads=[w.name for w in space.all_workloads] if space else [],
        concurrency=list(space.concurrency) if space else [],
        objective_concurrency=space.primary_concurrency if space else 0,
        slo=space.slo.limits() if space else {},
        objectives=[
            {"metric": o.metric, "direction": o.resolved_direction} for o in space.objectives
        ]
        if space
        else [],
    )


def get_job(url: str, job_id: int) -> JobPublic:
    with session_scope(url) as s:
        job = s.get(JobModel, job_id, options=[selectinload(JobModel.trials)])
        if job is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} not found")
        return job_public(job)


def list_jobs(url: str, offset: int, limit: int, state: str | None) -> JobList:
    with session_scope(url) as s:
        q = select(JobModel)
        count = select(func.count(JobModel.job_id))
        if state is not None:
            q, count = q.where(JobModel.state == state), count.where(JobModel.state == state)
        total = s.scalar(count) or 0
        rows = s.scalars(
            q.options(selectinload(JobModel.trials))
            .order_by(JobModel.job_id.desc())
            .offset(offset)
            .limit(limit)
        ).all()
        items = [job_public(j) for j in rows]
    return JobList(items=items, total=total, offset=offset, limit=limit)


# --------------------------------------------------------------------------- trials

_TRIAL_KEYS = {
    "number",
    "state",
    "method",
    "params",
    "fail_reason",
    "fail_detail",
    "log_path",
    "startup_s",
    "reused_from",
    "constraints",
    "concurrency",
    "measurements",
    "lossless_match_rate",
    "kv_cache_tokens",
    "peak_rss_mb",
}


def _records(url: str, job_id: int) -> list[dict[str, Any]]:
    from tuner.study import trial_records

    try:
        return trial_records(url, job_id)
    except JobNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} not found") from None


def _trial(rec: dict[str, Any]) -> dict[str, Any]:
    return {
        "number": rec["number"],
        "state": rec["state"],
        "method": rec["method"],
        "params": rec["params"],
        "fail_reason": rec["fail_reason"],
        "fail_detail": rec["fail_detail"],
        "startup_s": rec["startup_s"],
        "reused_from": rec["reused_from"],
        "concurrency": rec["concurrency"],
        "lossless_match_rate": rec.get("lossless_match_rate"),
        "kv_cache_tokens": rec.get("kv_cache_tokens"),
        "peak_rss_mb": rec.get("peak_rss_mb"),
        "metrics": {k: v for k, v in rec.items() if k not in _TRIAL_KEYS},
        "measurements": rec["measurements"],
    }


def trials_page(url: str, job_id: int, offset: int, limit: int) -> TrialPage:
    recs = _records(url, job_id)
    items = [TrialPublic(**_trial(r)) for r in recs[offset : offset + limit]]
    return TrialPage(items=items, total=len(recs), offset=offset, limit=limit)


def _log_tail(path: str | None, work_dir: Path) -> str | None:
    """Only logs under the service's own work folder are read (never an arbitrary path)."""
    if not path:
        return None
    p = Path(path).resolve()
    if not p.is_relative_to(work_dir.resolve()) or not p.is_file():
        return None
    with p.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - LOG_TAIL_CHARS))
        return f.read().decode(errors="replace")


def trial_detail(url: str, job_id: int, number: int, work_dir: Path) -> TrialDetail:
    rec = next((r for r in _records(url, job_id) if r["number"] == number), None)
    if rec is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} has no trial {number}")
    return TrialDetail(**_trial(rec), log_tail=_log_tail(rec.get("log_path"), work_dir))


# --------------------------------------------------------------------------- pareto


class ReportQuery:
    """Which slice of the results: workload, concurrency level, SLO overrides."""

    def __init__(
        self,
        workload: str | None,
        concurrency: int | None,
        slo: dict[str, float],
        target: str | None = None,
    ) -> None:
        self.workload, self.concurrency, self.slo = workload, concurrency, slo
        self.target = target


def _report(url: str, job_id: int, q: ReportQuery, **kw: Any) -> Report:
    from tuner.pareto import job_report

    try:
        return job_report(url, job_id, target=q.target, **kw)
    except ValueError as e:
        raise field_error(("query", "target"), str(e)) from None


def _space(url: str, job_id: int) -> SearchSpace:
    with session_scope(url) as s:
        job = s.get(JobModel, job_id)
        if job is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} not found")
        return space_of_job(job)


def _resolve_query(space: SearchSpace, q: ReportQuery) -> tuple[str, int, dict[str, float]]:
    names = [w.name for w in space.all_workloads]
    wl = q.workload or space.primary_workload
    if wl not in names:
        raise field_error(
            ("query", "workload"),
            f"this job measured workload {', '.join(map(repr, names))}, not {wl!r}",
        )
    conc = q.concurrency or space.primary_concurrency
    if conc not in space.concurrency:
        raise field_error(
            ("query", "concurrency"),
            f"this job measured concurrency {space.concurrency}, not {conc}",
        )
    return wl, conc, {**space.slo.limits(), **q.slo}


def _ci95(m: dict[str, Any], name: str) -> tuple[float | None, float | None]:
    """The 95% interval over repeats, when there were several (one run has none). It is a
    t-interval of the mean, so with 2-3 repeats its low end can fall below 0 for a quantity
    that cannot: that end is answered as 0."""
    st = (m.get("stats") or {}).get(name)
    if not st or (st.get("n") or 0) < 2 or st.get("ci95_low") is None:
        return None, None
    return max(0.0, st["ci95_low"]), st.get("ci95_high")


def _pareto_point(p: Point, rep: Report, level: int, conc: int, front: set[int]) -> ParetoPoint:
    m = p.metrics
    tps_lo, tps_hi = _ci95(m, "output_tok_per_s")
    tpot_lo, tpot_hi = _ci95(m, "p99_tpot_ms")
    search = m.get("search") or {}
    return ParetoPoint(
        trial_number=p.trial_number,
        method=p.method,
        params=p.params,
        concurrency=level,
        output_tok_per_s=m["output_tok_per_s"],
        p99_tpot_ms=m.get("p99_tpot_ms"),
        p99_ttft_ms=m.get("p99_ttft_ms"),
        p99_e2e_ms=m.get("p99_e2e_ms"),
        acceptance_rate=m.get("acceptance_rate"),
        mean_acceptance_length=m.get("mean_acceptance_length"),
        feasible=p.feasible,
        violations=list(p.violations),
        on_front=p.trial_number in front,
        is_baseline=p.method == "none",
        is_winner=level == conc
        and rep.winner is not None
        and p.trial_number == rep.winner.trial_number,
        speedup=rep.speedup(p),
        output_tok_per_s_ci95_low=tps_lo,
        output_tok_per_s_ci95_high=tps_hi,
        p99_tpot_ms_ci95_low=tpot_lo,
        p99_tpot_ms_ci95_high=tpot_hi,
        repeats=m.get("repeats"),
        confirmed=bool(m.get("confirmed")),
        search_output_tok_per_s=search.get("output_tok_per_s") if m.get("confirmed") else None,
        noisy=bool(m.get("noisy")),
        relative_mad=m.get("relative_mad"),
        lossless_match_rate=p.lossless_match_rate,
        kv_cache_tokens=p.kv_cache_tokens,
        peak_rss_mb=p.peak_rss_mb,
    )


def _round_cost(
    rep: Report, configs: dict[int, tuple[str, dict[str, Any]]]
) -> list[RoundCostTrial]:
    out = []
    for number, vs in sorted(rep.verdicts.items()):
        method, params = configs.get(number, ("?", {}))
        out.append(
            RoundCostTrial(
                trial_number=number,
                method=method,
                params=params,
                verdicts=[
                    RoundCostVerdict(
                        concurrency=v.concurrency,
                        spec_ms_per_token=v.spec_ms_per_token,
                        baseline_ms_per_token=v.baseline_ms_per_token,
                        pays_off=v.pays_off,
                        margin_pct=v.margin_pct,
                    )
                    for v in vs
                ],
                crossover_concurrency=rep.crossover.get(number),
            )
        )
    return out


def pareto(url: str, job_id: int, q: ReportQuery) -> ParetoPublic:
    from tuner.explain import explain

    space = _space(url, job_id)
    wl, conc, slo = _resolve_query(space, q)
    points: list[ParetoPoint] = []
    configs: dict[int, tuple[str, dict[str, Any]]] = {}
    main: Report | None = None
    for level in space.concurrency:
        rep = _report(url, job_id, q, workload=wl, concurrency=level, slo=slo)
        front = {p.trial_number for p in rep.front}
        if level == conc:
            main = rep
        for p in (*rep.points, *rep.pruned):
            configs.setdefault(p.trial_number, (p.method, p.params))
            points.append(_pareto_point(p, rep, level, conc, front))
    assert main is not None  # conc is one of the space's levels (_resolve_query)
    return ParetoPublic(
        job_id=job_id,
        workload=wl,
        concurrency=conc,
        levels=list(space.concurrency),
        slo=slo,
        objectives=[
            {"metric": o.metric, "direction": o.resolved_direction} for o in space.objectives
        ],
        points=points,
        baseline_trial=main.baseline.trial_number if main.baseline else None,
        winner_trial=main.winner.trial_number if main.winner else None,
        round_cost=_round_cost(main, configs),
        why=explain(main),
        replay_surface=main.replay_surface,
        target=main.target,
        other_targets=list(main.other_targets),
        references=[_reference(r, main) for r in main.references],
    )


def _reference(r: Any, rep: Report) -> HostedReference:
    m = r.metrics or {}
    base = rep.baseline.metrics.get("output_tok_per_s") if rep.baseline else None
    tps = m.get("output_tok_per_s")
    return HostedReference(
        name=r.name, base_url=r.base_url, model=r.model, output_tok_per_s=tps,
        p99_tpot_ms=m.get("p99_tpot_ms"), p99_ttft_ms=m.get("p99_ttft_ms"),
        speedup_vs_baseline=(tps / base) if tps and base else None,
        feasible=r.feasible, violations=list(r.violations), error=r.error,
    )  # fmt: skip


def export_winner(url: str, job_id: int, fmt: str, q: ReportQuery) -> ExportPublic:
    from tuner.export import ExportError, export_point

    if fmt not in SUPPORTED_EXPORTS:
        raise field_error(
            ("query", "format"),
            f"format {fmt!r} is not supported yet; supported: {', '.join(SUPPORTED_EXPORTS)}",
            "not_supported",
        )
    space = _space(url, job_id)
    wl, conc, slo = _resolve_query(space, q)
    rep = _report(url, job_id, q, workload=wl, concurrency=conc, slo=slo)
    if rep.replay_surface is not None:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job_id} replayed the recorded surface {rep.replay_surface} to benchmark the "
            "search; nothing was measured in it: nothing to export",
        )
    if rep.winner is None:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job_id} has no feasible configuration at concurrency {conc} on workload "
            f"{wl} under SLO {slo or 'none'}: nothing to export",
        )
    try:
        text = export_point(rep.winner, fmt, rep)
    except ExportError as e:
        raise HTTPException(status.HTTP_409_CONFLICT, str(e)) from None
    return ExportPublic(
        format=fmt,  # type: ignore[arg-type]
        text=text,
        trial_number=rep.winner.trial_number,
        concurrency=conc,
        slo=slo,
    )
