"""The CPU build's expand defect: the self-test, the plugin's fixed expand, and the switch
SpecTune's launcher sets. Needs vLLM's CPU ops (seconds to load), never an engine."""

from __future__ import annotations

import shlex
import sys
import types

import pytest

from tuner.engines import EngineConfig
from tuner.engines._vllm import build_env, export_cli
from tuner.engines._vllm_cpu_fix import (
    _KERNEL,
    DEFECT,
    FIX_ENV,
    find_defect,
    fixed_expand,
    register,
)

torch = pytest.importorskip("torch")


def _cpu_tl():
    pytest.importorskip("vllm")
    try:
        from vllm.utils import cpu_triton_utils
    except ImportError:
        pytest.skip("no CPU vLLM build")
    return cpu_triton_utils


@pytest.fixture
def cpu_tl(monkeypatch):
    """The CPU wrappers, restored after the test (``register`` replaces one)."""
    mod = _cpu_tl()
    monkeypatch.setattr(mod, "_expand_kernel_impl", mod._expand_kernel_impl)
    monkeypatch.delitem(sys.modules, "vllm.triton_utils.dispatcher", raising=False)
    return mod


def _reference(x, counts, replace_from, replace_to):
    out = []
    for v, n in zip(x.tolist(), counts, strict=True):
        out += [replace_to if v == replace_from else v] * n
    return torch.tensor(out, dtype=x.dtype)


def test_the_installed_build_has_the_defect_and_the_plugin_fixes_it(cpu_tl, monkeypatch):
    if "expand_kernel_impl" not in cpu_tl._expand_kernel_impl.__code__.co_names:
        pytest.skip("this vLLM's CPU expand wrapper is not the 0.32 one")
    assert find_defect() == DEFECT
    monkeypatch.setenv(FIX_ENV, "1")
    register()
    assert cpu_tl._expand_kernel_impl is fixed_expand
    assert find_defect() is None


def test_the_plugin_replaces_an_override_already_registered(cpu_tl, monkeypatch):
    """Platform overrides first, plugin second: the registered kernel is replaced."""
    calls = []
    fake = types.ModuleType("vllm.triton_utils.dispatcher")
    fake._registry = {_KERNEL: (None, cpu_tl._expand_kernel_impl)}
    fake.register_kernels = lambda m: (
        calls.append(m),
        fake._registry.update({k: (None, v) for k, v in m.items()}),
    )
    monkeypatch.setitem(sys.modules, "vllm.triton_utils.dispatcher", fake)
    monkeypatch.setenv(FIX_ENV, "1")
    register()
    assert calls == [{_KERNEL: fixed_expand}]
    assert find_defect() is None


def test_the_plugin_does_nothing_without_spectunes_switch(cpu_tl, monkeypatch):
    monkeypatch.delenv(FIX_ENV, raising=False)
    before = cpu_tl._expand_kernel_impl
    register()
    assert cpu_tl._expand_kernel_impl is before
    monkeypatch.setenv(FIX_ENV, "0")
    register()
    assert cpu_tl._expand_kernel_impl is before


@pytest.mark.parametrize(
    "dtype, values, rule",
    [
        (torch.float32, [0.8, 0.0, 1.5, 0.3, 0.0], (0.0, 1.0)),  # temperature
        (torch.float32, [0.95, 1.0, 0.5, 0.7, 0.9], (1.0, 0.25)),  # top_p
        (torch.int32, [50, 0, 7, 1, 0], (0, 32000)),  # top_k: 0 means "no top-k"
    ],
)
def test_fixed_expand_matches_the_reference(dtype, values, rule):
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        x = torch.tensor(values, dtype=dtype)
        counts = torch.randint(0, 6, (len(values),), generator=gen).tolist()
        cu = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)
        out = torch.empty(sum(counts), dtype=dtype)
        fixed_expand(out, x, cu, *rule)
        assert torch.equal(out, _reference(x, counts, *rule))


def test_cpu_launches_ask_for_the_fix_and_a_speculative_cpu_export_says_why(tmp_path):
    cpu = EngineConfig(model="/m", device="cpu")
    assert build_env(cpu, tmp_path, base={})[FIX_ENV] == "1"
    gpu = EngineConfig(model="/m", device="cuda")
    assert FIX_ENV not in build_env(gpu, tmp_path, base={FIX_ENV: "1"})
    assert FIX_ENV not in export_cli(cpu, base={})  # no speculation: nothing to fix
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    line = export_cli(EngineConfig(model="/m", device="cpu", speculative_config=spec), base={})
    note, command = line.splitlines()[-2:]
    assert note.startswith(f"# {FIX_ENV}=1: ") and "uninitialised" in note
    words = shlex.split(command)
    assert f"{FIX_ENV}=1" in words[: words.index("vllm")]  # an env word before the command
    gpu_spec = EngineConfig(model="/m", device="cuda", speculative_config=spec)
    assert FIX_ENV not in export_cli(gpu_spec, base={})


def test_the_build_note_names_the_defect_and_the_fix(monkeypatch):
    from tuner.engines import VLLMServer, _vllm

    monkeypatch.setattr(_vllm, "cpu_sampling_defect", lambda: DEFECT)
    monkeypatch.setattr(_vllm, "fix_installed", lambda: True)
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    note = VLLMServer.build_note(EngineConfig(model="/m", speculative_config=spec))
    assert note is not None and note.startswith(DEFECT) and "fix it with their" in note
    # Installed without its entry point (an editable install made before the plugin was):
    # the switch would do nothing, and the note says so instead of claiming a fix.
    monkeypatch.setattr(_vllm, "fix_installed", lambda: False)
    note = VLLMServer.build_note(EngineConfig(model="/m", speculative_config=spec))
    assert note is not None and "not installed where the engine runs" in note
    assert VLLMServer.build_note(EngineConfig(model="/m")) is None  # no speculation
    cuda = EngineConfig(model="/m", device="cuda", speculative_config=spec)
    assert VLLMServer.build_note(cuda) is None
    monkeypatch.setattr(_vllm, "cpu_sampling_defect", lambda: None)
    assert VLLMServer.build_note(EngineConfig(model="/m", speculative_config=spec)) is None


def test_the_self_test_in_a_child_process_finds_this_build_affected():
    """What pre-flight and plan run: ``find_defect`` in the engine's interpreter."""
    cpu_tl = _cpu_tl()
    if "expand_kernel_impl" not in cpu_tl._expand_kernel_impl.__code__.co_names:
        pytest.skip("this vLLM's CPU expand wrapper is not the 0.32 one")
    from tuner.engines._vllm_cpu_fix import cpu_sampling_defect, fix_installed

    assert cpu_sampling_defect() == DEFECT
    assert fix_installed()  # make installs the package with its vllm.general_plugins entry


def _accepted_per_position(cpu_tl, expand, fill: float, B: int = 200, k: int = 4) -> list[int]:
    """The sampler's CPU path without importing vLLM's sampler module (that import takes most
    of a minute): temperatures expanded as ``apply_sampling_constraints`` does, the target
    softmax, then the CPU rejection kernel. ``fill``: what the uninitialised buffer holds."""
    torch.manual_seed(0)
    vocab, draft_id = 32, 5
    cu = torch.arange(1, B + 1, dtype=torch.int32) * k
    temperature = torch.full((B * k,), fill, dtype=torch.float32)
    expand(temperature, torch.full((B,), 0.8), cu, 0, 1)
    logits = torch.zeros(B * k, vocab)
    logits[:, draft_id] = 8.0  # softmax(logits / 0.8) puts 0.9986 on the draft token
    probs = torch.softmax(logits / temperature.unsqueeze(-1), dim=-1)
    out = torch.full((B, k + 1), -1, dtype=torch.int32)
    cpu_tl._rejection_random_sample_kernel_impl(
        out,
        cu,
        torch.full((B * k,), draft_id, dtype=torch.int64),
        None,
        probs,
        torch.full((B, 1), 7, dtype=torch.int64),
        torch.full((B * k,), 9, dtype=torch.int64),
        torch.rand(B * k, dtype=torch.float64),
        torch.zeros(B, dtype=torch.bool),
        k,
        vocab,
        NO_DRAFT_PROBS=True,
    )
    ok = torch.ones(B, dtype=torch.bool)
    counts = []
    for j in range(k):
        ok &= out[:, j] == draft_id
        counts.append(int(ok.sum()))
    return counts


def test_acceptance_under_sampling_before_and_after_the_fix(cpu_tl):
    """k=4, T=0.8, p(draft)=0.9986: about 199 of 200 accepted at each position once fixed;
    with the broken expand the buffer keeps whatever it held (here a ~4.6e-41 denormal, as
    seen on this build, or 65309): almost nothing is accepted."""
    if "expand_kernel_impl" not in cpu_tl._expand_kernel_impl.__code__.co_names:
        pytest.skip("this vLLM's CPU expand wrapper is not the 0.32 one")
    fixed = _accepted_per_position(cpu_tl, fixed_expand, float("nan"))
    assert all(n >= 195 for n in fixed), fixed
    for garbage in (4.58e-41, 65309.06):
        broken = _accepted_per_position(cpu_tl, cpu_tl._expand_kernel_impl, garbage)
        assert broken[0] < 50 and broken[-1] == 0, broken


def test_the_user_may_keep_the_fix_off_and_the_note_says_so(tmp_path, monkeypatch):
    from tuner.engines import VLLMServer, _vllm

    cpu = EngineConfig(model="/m", device="cpu")
    assert FIX_ENV not in build_env(cpu, tmp_path, base={FIX_ENV: "0"})
    monkeypatch.setattr(_vllm, "cpu_sampling_defect", lambda: DEFECT)
    monkeypatch.setenv(FIX_ENV, "0")
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    note = VLLMServer.build_note(EngineConfig(model="/m", speculative_config=spec))
    assert note is not None and note.startswith(DEFECT) and f"{FIX_ENV}=0 keeps" in note
