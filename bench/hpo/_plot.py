"""The anytime plot: median regret of each strategy's recommendation against launches.

Why a plot: one number (launches to success) hides whether a search is good early and then
stalls, or slow and then exact; the curve shows both."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def anytime_plot(
    curves: dict[str, list[list[float]]], analytic: list[float] | None, title: str, out: Path
) -> Path:
    """``curves[name][seed][n-1]``: regret after n launches. Median line, 25-75 % band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for name, runs in curves.items():
        a = np.asarray(runs, float)
        x = np.arange(1, a.shape[1] + 1)
        med = np.median(a, axis=0)
        ax.plot(x, med, label=name, lw=2 if name == "spectune" else 1.2)
        ax.fill_between(x, np.percentile(a, 25, axis=0), np.percentile(a, 75, axis=0), alpha=0.12)
    if analytic is not None:
        x = np.arange(1, len(analytic) + 1)
        ax.plot(x, analytic, "k--", lw=1, label="random (analytic, noise-free oracle)")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_xlabel("engine launches")
    ax.set_ylabel("relative regret of the recommendation (true value)")
    ax.axhline(0.03, color="grey", lw=0.6, ls=":")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
