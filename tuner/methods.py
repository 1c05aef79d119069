"""The one table of speculative methods: which parameters each has, how they are named.

Every place that used to walk ``if method == "ngram" … elif "draft_model" …`` reads this
table instead: sampling, start points, the grid, a stored trial's parameters back into the
space, the speculative config an engine is launched with, and the text a person reads. How
each *engine* spells a method (SGLang's algorithm names, TensorRT-LLM's decoding types) lives
in ``tuner.engines``; this table only knows SpecTune's names, which are vLLM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tuner.engines import ADAPTIVE_STEPS
from tuner.space import METHOD_NAMES

__all__ = [
    "ADAPTIVE_OFF",
    "METHODS",
    "SUFFIX_KNOBS",
    "Method",
    "Param",
    "method_of",
    "params_text",
]

# Order of the keys in a speculative config (what the vLLM JSON export prints).
SPEC_ORDER = (
    "model",
    "num_speculative_tokens",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "draft_sample_method",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    ADAPTIVE_STEPS,
)

ADAPTIVE_OFF = "off"  # the ``adaptive`` axis's choice that leaves the config unchanged

# Suffix decoding's knobs: (param key, speculative-config key, short name in a label).
SUFFIX_KNOBS = (
    ("max_tree_depth", "suffix_decoding_max_tree_depth", "depth"),
    ("max_cached_requests", "suffix_decoding_max_cached_requests", "cached"),
    ("max_spec_factor", "suffix_decoding_max_spec_factor", "factor"),
    ("min_token_prob", "suffix_decoding_min_token_prob", "min_prob"),
)


@dataclass(frozen=True)
class Param:
    """One parameter of a method.

    ``key``: its name in a trial's params (Optuna's name is ``method.key``); ``source``: the
    attribute of the method's spec holding its choices (an ``IntRange`` or a list);
    ``spec_key``: its key in the speculative config, or None; ``path``: a checkpoint folder,
    resolved against the space's folder in the config and shown by its last part;
    ``start``: which choice a start point takes when it does not say; ``optional``: an axis
    the space may leave out (its source None), and then absent from params and config alike,
    so trials of spaces without it keep the params they always had."""

    key: str
    source: str
    spec_key: str | None
    path: bool = False
    start: Literal["min", "max", "first"] = "first"
    optional: bool = False
    short: str | None = None  # shown as ``short=value`` in a configuration's text when set

    def searched(self, spec: Any) -> bool:
        return not self.optional or getattr(spec, self.source) is not None

    def choices(self, spec: Any) -> list[Any]:
        v = getattr(spec, self.source)
        return v.values() if hasattr(v, "values") else list(v)

    def default(self, spec: Any) -> Any:
        v = getattr(spec, self.source)
        if self.start == "first":
            return v[0]
        return v.min if self.start == "min" else v.max


_DEPTH = Param("num_speculative_tokens", "num_speculative_tokens", "num_speculative_tokens")
_DRAFTING = Param(
    "draft_sample_method", "draft_sample_method", "draft_sample_method", optional=True
)
_ADAPTIVE = Param("adaptive", "adaptive_choices", ADAPTIVE_STEPS, optional=True)


# Methods that look up n-grams of the tokens seen (vLLM's CPU lookup, or its GPU kernels).
_LOOKUPS = ("ngram", "ngram_gpu")
_LOOKUP_PARAMS = (
    _DEPTH,
    Param("prompt_lookup_min", "prompt_lookup_min", "prompt_lookup_min", start="min"),
    Param("prompt_lookup_max", "prompt_lookup_max", "prompt_lookup_max", start="max"),
)


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    params: tuple[Param, ...]
    # Drafts by lookup in the tokens seen, no model: a step costs the verify alone.
    model_free: bool = False

    def optuna_name(self, p: Param) -> str:
        return f"{self.name}.{p.key}"

    def active(self, spec: Any) -> tuple[Param, ...]:
        """The parameters ``spec`` (the method's part of a space) searches."""
        return tuple(p for p in self.params if p.searched(spec))

    def fix(self, params: dict[str, Any]) -> dict[str, Any]:
        """The configuration the engine would really run (vLLM clamps n-gram's max lookup
        up to its min, so a max below the min is that same engine)."""
        if self.name in _LOOKUPS:
            lo, hi = params["prompt_lookup_min"], params["prompt_lookup_max"]
            return {**params, "prompt_lookup_max": max(lo, hi)}
        return params

    def speculative_config(self, params: dict[str, Any], resolve: Any) -> dict[str, Any]:
        spec: dict[str, Any] = {"method": self.name}
        by_spec = {p.spec_key: p for p in self.params if p.spec_key}
        for key in SPEC_ORDER:
            p = by_spec.get(key)
            if p is not None and p.key in params:
                v = params[p.key]
                if key == ADAPTIVE_STEPS:
                    if v != ADAPTIVE_OFF:  # off: the config every engine takes, unchanged
                        spec[key] = [int(x) for x in str(v).split(",")]
                    continue
                spec[key] = resolve(v) if p.path else v
        return spec

    def text(self, params: dict[str, Any]) -> str:
        out = f"{self.name} k={params['num_speculative_tokens']}"
        if self.name in _LOOKUPS:
            out += f" lookup={params['prompt_lookup_min']}..{params['prompt_lookup_max']}"
        for p in self.params:
            if p.path:
                out += f" {p.key}={Path(params[p.key]).name}"
        for p in self.params:
            if p.short is not None and params.get(p.key) is not None:
                out += f" {p.short}={params[p.key]:g}"
        if params.get("draft_sample_method"):
            out += f" drafting={params['draft_sample_method']}"
        if params.get("adaptive") not in (None, ADAPTIVE_OFF):
            out += f" adaptive={params['adaptive']}"
        return out


METHODS: dict[str, Method] = {
    "ngram": Method("ngram", "n-gram prompt lookup", _LOOKUP_PARAMS, model_free=True),
    "draft_model": Method(
        "draft_model",
        "draft model",
        (_DEPTH, Param("draft", "drafts", "model", path=True), _DRAFTING),
    ),
    "eagle": Method(
        "eagle",
        "EAGLE head",
        (_DEPTH, Param("head", "heads", "model", path=True), _DRAFTING, _ADAPTIVE),
    ),
    "eagle3": Method(
        "eagle3",
        "EAGLE-3 head",
        (_DEPTH, Param("head", "heads", "model", path=True), _DRAFTING, _ADAPTIVE),
    ),
    "mtp": Method("mtp", "MTP layers", (_DEPTH,)),
    "suffix": Method(
        "suffix",
        "suffix decoding",
        (
            _DEPTH,
            *(Param(key, key, spec, optional=True, short=sh) for key, spec, sh in SUFFIX_KNOBS),
        ),
        model_free=True,
    ),
    "medusa": Method(
        "medusa", "Medusa heads", (_DEPTH, Param("head", "heads", "model", path=True))
    ),
    "mlp_speculator": Method(
        "mlp_speculator", "MLP speculator", (_DEPTH, Param("head", "heads", "model", path=True))
    ),
    "ngram_gpu": Method("ngram_gpu", "n-gram lookup on the GPU", _LOOKUP_PARAMS, model_free=True),
    "dflash": Method(
        "dflash", "DFlash draft", (_DEPTH, Param("head", "heads", "model", path=True))
    ),
    "dspark": Method(
        "dspark", "DSpark draft", (_DEPTH, Param("head", "heads", "model", path=True))
    ),
}
assert tuple(METHODS) == METHOD_NAMES, "the table and the space's method names must agree"


def method_of(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}") from None


def params_text(params: dict[str, Any]) -> str:
    """A trial's configuration as a person reads it: ``ngram k=3 lookup=1..4``."""
    m = params["method"]
    on = f" on {Path(params['target']).name}" if params.get("target") else ""
    if m == "none":
        return "baseline (no speculation)" + on
    return method_of(m).text(params) + on
