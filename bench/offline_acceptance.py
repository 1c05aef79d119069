"""Offline acceptance against the engine's counters, on a recorded surface.

    .venv/bin/python bench/offline_acceptance.py [--surface bench/surfaces/tiny-cpu.jsonl]
        [--write-surface]

A recorded surface: the baseline's greedy outputs are generated here with the target in
float32 (Hugging Face transformers; the engine ran bf16), for the surface's workload
prompts; every proposer of the surface served by that target is priced on them
(``tuner.offline``) and compared,
position by position, with the per-position acceptance the engine counted when the surface
was recorded (concurrency 1). ``--write-surface`` stores the offline table in the surface's
header (``offline_acceptance``), which the replay backend hands to the guided search in
place of computing it.

A SIMULATED surface (``"simulated": true``) has no models to run: its offline table is the
generator's acceptance (the mean per-position acceptance of each proposer's rows) plus an
error drawn per proposer and position from the offline-minus-engine errors measured on the
recorded surface (``--errors-from``, default tiny-cpu; its table must be written first),
seeded; the header's ``offline_acceptance.how`` says so. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.measure import load_all_prompts  # noqa: E402
from tuner.offline import OfflinePrices, TokenSequence, price_proposers  # noqa: E402
from tuner.search import family_key  # noqa: E402
from tuner.surface import read_surface  # noqa: E402


def greedy_sequences(target: Path, prompts: list[str], n_tokens: int) -> list[TokenSequence]:
    """The target's greedy continuations (float32), prompts tokenized as vLLM does."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(target))
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = tok(p, add_special_tokens=True)["input_ids"]
            x = torch.tensor([ids])
            gen = model.generate(
                x, max_new_tokens=n_tokens, min_new_tokens=n_tokens, do_sample=False
            )
            out.append(TokenSequence(tuple(ids), tuple(gen[0, len(ids) :].tolist())))
    return out


def sampled_sequences(
    target: Path, prompts: list[str], n_tokens: int, sampling: dict, seed: int
) -> list[TokenSequence]:
    """The target's sampled continuations (float32) under the workload's settings: draws of
    the distribution a lossless engine serves (``tuner.offline._sampled``), seeded."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(target))
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    torch.manual_seed(seed)
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = tok(p, add_special_tokens=True)["input_ids"]
            gen = model.generate(
                torch.tensor([ids]),
                max_new_tokens=n_tokens,
                min_new_tokens=n_tokens,
                do_sample=True,
                temperature=float(sampling["temperature"]),
                top_p=float(sampling.get("top_p") or 1.0),
                top_k=int(sampling.get("top_k") or 0),  # transformers' default would be 50
                min_p=sampling.get("min_p"),
            )
            out.append(TokenSequence(tuple(ids), tuple(gen[0, len(ids) :].tolist())))
    return out


REPO = Path(__file__).resolve().parents[1]


def _model_path(written: str, where: Path = REPO / "bench" / "surfaces") -> str:
    """A model path as the surface's space wrote it: relative to the space file, which lay
    beside the surface (``where``) or, for the first surfaces, in search_spaces/."""
    p = Path(written)
    if p.is_absolute():
        return str(p)
    near = (where / p).resolve()
    return str(near if near.exists() else (REPO / "search_spaces" / p).resolve())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--surface", type=Path, default=Path("bench/surfaces/tiny-cpu.jsonl"))
    ap.add_argument("--write-surface", action="store_true")
    ap.add_argument("--errors-from", type=Path, default=Path("bench/surfaces/tiny-cpu.jsonl"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    surface = read_surface(args.surface)
    space = surface.space
    wl = space.all_workloads[0]
    prompts = [p.prompt for p in load_all_prompts(space)[wl.name]][: wl.num_prompts]
    proposers: dict[str, dict] = {}
    measured: dict[str, dict[int, list[float]]] = {}
    level = (wl.name, min(space.concurrency))
    for pt in surface.points.values():
        c = pt.config
        if c.get("method") in (None, "none") or pt.state != "complete":
            continue
        fk = family_key(c)
        k = int(c["num_speculative_tokens"])
        if k >= int(proposers.get(fk, {}).get("num_speculative_tokens", 0)):
            proposers[fk] = dict(c)
        pp = (pt.measurements.get(level) or {}).get("per_position_acceptance")
        if pp:
            measured.setdefault(fk, {})[k] = [float(x) for x in pp]
    if surface.simulated:
        return _simulated(args, proposers, measured)
    top = max(int(c["num_speculative_tokens"]) for c in proposers.values())
    t0 = time.monotonic()
    here = args.surface.resolve().parent

    def resolve(written: str) -> str:
        return _model_path(written, here)

    target = Path(resolve(space.engine.model))
    sampling = None
    if wl.sampling.greedy:
        seqs = greedy_sequences(target, prompts, wl.max_tokens + top)
    else:
        sampling = wl.sampling.unseeded()
        seqs = sampled_sequences(target, prompts, wl.max_tokens + top, sampling, args.seed)
    gen_s = time.monotonic() - t0
    prices = price_proposers(
        proposers,
        seqs,
        wl.max_tokens,
        resolve=resolve,
        max_model_len=space.engine.max_model_len,
        target=space.engine.model,
        sampling=sampling,
    )
    worst: dict[str, float] = {}
    print(f"{'proposer':<58} {'k':>2}  offline / engine per position")
    for fk, depths in prices.by_proposer.items():
        method = proposers[fk]["method"]
        for k, a in sorted(depths.items()):
            eng = measured.get(fk, {}).get(k)
            if eng is None:
                continue
            errs = [o - e for o, e in zip(a.per_position_acceptance, eng, strict=False)]
            worst[method] = max(worst.get(method, 0.0), max(abs(e) for e in errs))
            cells = " ".join(
                f"{o:.3f}/{e:.3f}" for o, e in zip(a.per_position_acceptance, eng, strict=False)
            )
            print(f"{fk[:58]:<58} {k:>2}  {cells}")
    for fk, why in prices.unpriced.items():
        print(f"{fk[:58]:<58}     {why}")
    print(
        f"sequences: {prices.basis}, generated in {gen_s:.1f} s; priced in {prices.seconds:.2f} s"
    )
    if args.write_surface:
        how = (
            "bench/offline_acceptance.py: target greedy outputs in float32 (transformers)"
            if sampling is None
            else f"bench/offline_acceptance.py: target outputs sampled in float32 "
            f"(transformers, seed {args.seed}) under {sampling}; the target's probabilities "
            "of each round's guesses"
        )
        _write(args.surface, {**prices.to_json(), "how": how})
    print(
        json.dumps(
            {
                "surface": str(args.surface),
                "max_abs_error_by_method": {m: round(v, 4) for m, v in worst.items()},
                "priced_proposers": len(prices.by_proposer),
                "unpriced_proposers": len(prices.unpriced),
                "generate_s": round(gen_s, 2),
                "price_s": round(prices.seconds, 3),
            }
        )
    )
    return 0


def _write(surface: Path, table: dict) -> None:
    lines = surface.read_text().splitlines()
    header = json.loads(lines[0])
    header["offline_acceptance"] = table
    lines[0] = json.dumps(header)
    surface.write_text("\n".join(lines) + "\n")
    print(f"wrote offline_acceptance into {surface}")


def measured_errors(surface: Path) -> list[float]:
    """Offline minus engine per-position acceptance on a recorded surface whose header
    holds its offline table (every proposer, depth and position)."""
    s = read_surface(surface)
    table = OfflinePrices.from_json(s.header.get("offline_acceptance") or {})
    level = (s.space.all_workloads[0].name, min(s.space.concurrency))
    errs = []
    for pt in s.points.values():
        c = pt.config
        if c.get("method") in (None, "none") or pt.state != "complete":
            continue
        a = table.get(family_key(c), int(c["num_speculative_tokens"]))
        eng = (pt.measurements.get(level) or {}).get("per_position_acceptance")
        if a is not None and eng:
            errs += [o - e for o, e in zip(a.per_position_acceptance, eng, strict=False)]
    return errs


def _sim_sizes(surface: Path, proposers: dict) -> dict[str, float]:
    """Each simulated proposer model's weights over the target's, from its generator."""
    from bench.hpo._sim_specs import linear_surface, roofline_surface

    name = read_surface(surface).space.name
    sim = next(s for s, sp, _ in (roofline_surface(), linear_surface()) if sp["name"] == name)
    out = {}
    for fk, c in proposers.items():
        facts = sim.drafts.get(c.get("draft") or c.get("head") or c["method"])
        if facts and facts.get("weights_gb"):
            out[fk] = round(facts["weights_gb"] / sim.weights_gb, 4)
    return out


def _simulated(args: argparse.Namespace, proposers: dict, measured: dict) -> int:
    import numpy as np

    errs = measured_errors(args.errors_from)
    if not errs:
        raise SystemExit(f"{args.errors_from}: no offline table to take errors from")
    bias, sd = float(np.mean(errs)), float(np.std(errs, ddof=1))
    rng = np.random.default_rng(args.seed)
    by: dict[str, dict[str, dict]] = {}
    for fk in sorted(measured):
        shift = rng.normal(bias, sd, size=max(measured[fk]))  # one error per position
        by[fk] = {
            str(k): {
                "per_position_acceptance": [
                    round(float(min(1.0, max(0.0, a + shift[i]))), 4) for i, a in enumerate(pp)
                ]
            }
            for k, pp in sorted(measured[fk].items())
        }
    how = (
        f"SIMULATED: the generator's per-position acceptance plus an error per proposer and "
        f"position drawn from N({bias:+.4f}, {sd:.4f}), the offline-minus-engine errors "
        f"measured on {args.errors_from} ({len(errs)} positions); seed {args.seed}"
    )
    table = {
        "by_proposer": by,
        "unpriced": {},
        "size_ratio": _sim_sizes(args.surface, proposers),
        "basis": "simulated",
        "how": how,
    }
    print(how)
    if args.write_surface:
        _write(args.surface, table)
    print(
        json.dumps(
            {
                "surface": str(args.surface),
                "simulated": True,
                "priced_proposers": len(by),
                "error_bias": round(bias, 4),
                "error_sd": round(sd, 4),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
