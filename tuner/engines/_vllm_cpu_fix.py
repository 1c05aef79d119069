"""vLLM 0.32's CPU build samples draft tokens with garbage temperature/top-p/top-k; a self-test
that finds this, and the vLLM plugin that fixes it in the engines SpecTune launches.

The defect: without Triton the CPU platform swaps the rejection sampler's ``expand_kernel`` for
``vllm.utils.cpu_triton_utils._expand_kernel_impl``, which hands the C++ op an int64 *copy* of
a float32/int32 output (``_ensure_int64``) and never copies it back, so the per-token
temperature, top-p and top-k stay uninitialised memory. Greedy batches are unaffected.

The fix is a ``vllm.general_plugins`` entry point (``register``). It acts only when SpecTune's
launcher set ``SPECTUNE_VLLM_CPU_EXPAND_FIX=1`` (a vLLM the user runs is never touched) and the
self-test finds the defect. vLLM loads general plugins in every process; in the engine core it
loads them just *before* ``register_triton_kernel_overrides`` (worker_base), so ``register``
both replaces the wrapper the platform is about to register and, if the platform already
registered it, re-registers the expand kernel itself: either order ends with the fixed one.

Only ``tuner.engines`` imports this module; it imports torch and vLLM only when called.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFECT",
    "EXPORT_NOTE",
    "FIX_ENV",
    "FIXED_NOTE",
    "cpu_sampling_defect",
    "fix_installed",
    "fix_switched_off",
    "find_defect",
    "fixed_expand",
    "register",
]

FIX_ENV = "SPECTUNE_VLLM_CPU_EXPAND_FIX"
_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"

DEFECT = (
    "vLLM's CPU build drops the rejection sampler's per-token temperature, top-p and top-k "
    "(its C++ expand_kernel wrapper writes them into an int64 copy that is never copied "
    "back), so draft tokens of sampled requests are verified with uninitialised values"
)
FIXED_NOTE = "SpecTune's launches fix it with their vLLM plugin (greedy is unaffected)"
EXPORT_NOTE = (  # the ``#`` line of a speculative CPU export: the user's server has it too
    f"# {FIX_ENV}=1: vLLM's CPU build samples draft positions with uninitialised "
    "temperature/top-p/top-k (sampled requests only); with spectune installed beside "
    "vLLM its plugin fixes that, and leaves a build without the defect alone\n"
)


def fixed_expand(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: int | None = None,  # noqa: N803 - the Triton kernel's parameter name
) -> None:
    """What the Triton ``expand_kernel`` does, in torch and in the input's dtype: request i's
    value (``replace_from`` becomes ``replace_to``) fills tokens cu[i-1]..cu[i]."""
    import torch

    n = input_val.shape[0]
    if n == 0:
        return
    cu = cu_num_tokens[:n].to(device=input_val.device, dtype=torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = input_val.masked_fill(input_val == replace_from, replace_to)
    expanded = torch.repeat_interleave(vals, counts)
    output[: expanded.shape[0]].copy_(expanded)


def _load_ops() -> None:
    """The CPU build's C++ ops (``torch.ops._C``), the library the CPU platform picks
    (``CpuPlatform.import_kernels``): the AVX2/AVX512 ones raise ImportError once loaded."""
    import platform

    import torch

    if hasattr(torch.ops._C, "expand_kernel_impl"):
        return
    name = "vllm._C"
    if platform.machine().lower() in ("x86_64", "amd64", "i686"):
        if not torch.cpu._is_avx512_supported():
            name = "vllm._C_AVX2"
        elif not torch.cpu._is_avx512_bf16_supported():
            name = "vllm._C_AVX512"
    try:
        __import__(name)
    except ImportError:
        if not hasattr(torch.ops._C, "expand_kernel_impl"):
            raise


def _effective_expand() -> Any:
    """The CPU expand implementation this process would run: the one registered with vLLM's
    kernel dispatcher if the platform registered one, else the platform's wrapper."""
    from vllm.utils import cpu_triton_utils as cpu_tl

    registry = getattr(sys.modules.get("vllm.triton_utils.dispatcher"), "_registry", {})
    if _KERNEL in registry:
        return registry[_KERNEL][1]
    return cpu_tl._expand_kernel_impl


def find_defect() -> str | None:
    """Behaviour, not version: expand float32 [0.8, 0] and int32 [7, 0] over 3 + 1 tokens
    (0 replaced by 1, as vLLM does for greedy temperatures) into sentinel-filled outputs with
    the CPU wrapper; the defect (one sentence) if either result is wrong, None if both are
    right or this vLLM has no CPU expand wrapper. Milliseconds once vLLM's ops load."""
    import torch

    try:
        _load_ops()
        impl = _effective_expand()
    except (ImportError, AttributeError):
        return None
    cu = torch.tensor([3, 4], dtype=torch.int32)
    for dtype, val in ((torch.float32, 0.8), (torch.int32, 7)):
        out = torch.full((4,), -1, dtype=dtype)
        try:
            impl(out, torch.tensor([val, 0], dtype=dtype), cu, 0, 1)
        except Exception as e:  # noqa: BLE001 - an op that fails is a defect too
            return f"{DEFECT} (the wrapper fails: {type(e).__name__})"
        want = torch.tensor([val, val, val, 1], dtype=dtype)
        if not torch.equal(out, want):
            return DEFECT
    return None


def fix_switched_off(env: Mapping[str, str]) -> bool:
    """The user asked SpecTune's launches to run the build as it is (``FIX_ENV=0``)."""
    return env.get(FIX_ENV) == "0"


def register() -> None:
    """The ``vllm.general_plugins`` entry point: install ``fixed_expand`` when SpecTune's
    launch asked for it and this build has the defect; otherwise do nothing."""
    if os.environ.get(FIX_ENV) != "1":
        return
    try:
        if find_defect() is None:
            return
        from vllm.utils import cpu_triton_utils as cpu_tl
    except ImportError:
        return
    # Before the platform's overrides: it registers whatever this attribute holds then.
    cpu_tl._expand_kernel_impl = fixed_expand
    # After them: replace the registered override (register_kernels rebinds every holder).
    dispatcher = sys.modules.get("vllm.triton_utils.dispatcher")
    if dispatcher is not None and _KERNEL in getattr(dispatcher, "_registry", {}):
        dispatcher.register_kernels({_KERNEL: fixed_expand})
    import logging

    logging.getLogger("vllm").info("SpecTune: fixed the CPU expand_kernel (%s)", FIX_ENV)


_PROBE = (
    "import json;from importlib.metadata import entry_points;"
    "from tuner.engines._vllm_cpu_fix import find_defect;"
    "eps = entry_points(group='vllm.general_plugins');"
    "print(json.dumps({'defect': find_defect(), "
    "'plugin': any(e.value == 'tuner.engines._vllm_cpu_fix:register' for e in eps)}))"
)


@functools.cache
def _probe(python: str | None, timeout: float) -> dict[str, Any]:
    """``find_defect`` and whether vLLM would load SpecTune's plugin, in a child process of
    ``python``, once per interpreter: importing torch and vLLM's ops takes seconds and would
    otherwise stay loaded in SpecTune's own process. {} when it cannot be checked."""
    try:
        done = subprocess.run(
            [python or sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    return {}


def cpu_sampling_defect(python: str | None = None, timeout: float = 120.0) -> str | None:
    """The defect sentence when the vLLM of ``python`` (this interpreter by default) has it,
    None when it does not or cannot be checked (no vLLM, no torch)."""
    return _probe(python, timeout).get("defect")


def fix_installed(python: str | None = None, timeout: float = 120.0) -> bool:
    """vLLM in ``python`` would load SpecTune's plugin (its ``vllm.general_plugins`` entry
    point is registered there): without it the switch does nothing, and the launches say so
    rather than claim a fix."""
    return bool(_probe(python, timeout).get("plugin"))
