"""Pre-flight checks: refuse a doomed candidate in milliseconds instead of an engine launch.

Each check reads only small files (``config.json``, ``tokenizer.json``, safetensors headers),
where ``tuner.hub`` finds them: a local folder, or a hub model's cached snapshot, else (when
downloads are allowed and the caller lets it) those small files fetched into the cache. A hub
model whose files are not on this machine is never refused for it: the checks that need it
are skipped with a note ("checked at launch"), and so is the memory check without its weights.
- a model path is a local folder;
- a draft model shares the target's vocabulary size and token ids;
- an EAGLE / EAGLE-3 head fits its target: hidden size, vocabulary, and the shape of its
  ``fc`` layer (2x hidden for EAGLE, 3x for EAGLE-3);
- MTP is asked only of a checkpoint with MTP layers, at a depth it has layers for;
- a memory lower bound (weights of target and draft + KV cache for ``max_model_len`` tokens
  at ``max_num_seqs`` sequences) fits the memory the engine is given.
Every refusal names the field of the search space it comes from.
"""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tuner._stacked_heads import HEAD_PROBLEMS
from tuner.engines import EngineConfig
from tuner.hardware import nvidia_smi
from tuner.hub import (
    HubError,
    downloads_allowed,
    fetch_config_files,
    has_weights,
    is_hub_id,
    local_view,
    not_here_note,
    remote_tensors,
)

__all__ = [
    "MemoryEstimate",
    "PreflightError",
    "device_memory_bytes",
    "estimate_memory",
    "preflight",
]

_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1}


class PreflightError(ValueError):
    """A candidate refused before any engine time is spent; the message names the field."""


@functools.lru_cache(maxsize=16)
def _parsed(path: Path, _mtime_ns: int, _size: int) -> Any:
    """One parse per file version: a grid reads the same tokenizer.json (9 MB for Llama 3)
    once per configuration."""
    return json.loads(path.read_text())


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        st = path.stat()
        data = _parsed(path, st.st_mtime_ns, st.st_size)
    except FileNotFoundError:
        raise PreflightError(f"{what}: {path} not found") from None
    except (OSError, json.JSONDecodeError) as e:
        raise PreflightError(f"{what}: cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise PreflightError(f"{what}: {path} is not a JSON object")
    return data


def _locate(model: str, field: str, fetch: bool, notes: list[str]) -> Path | None:
    """The folder pre-flight reads ``model`` from. A path that is no folder is refused; a hub
    model not on this machine has its small files fetched when ``fetch`` and downloads are
    allowed, else None with a note (checked later, never refused for it)."""
    if not is_hub_id(model):
        if not Path(model).is_dir():
            raise PreflightError(f"{field}: {model} is not a local model folder")
        return Path(model)
    view = local_view(model)
    if view is not None:
        return view
    allowed = downloads_allowed()
    if fetch and allowed:
        try:
            return fetch_config_files(model)
        except HubError as e:
            raise PreflightError(f"{field}: {e}") from None
    notes.append(not_here_note(field, model, will_download=allowed))
    return None


def _online(model: str, fetch: bool) -> bool:
    """Whether what a hub model's folder lacks (weights: their headers) may be read remotely."""
    return fetch and is_hub_id(model) and downloads_allowed()


def _vocab(model_dir: Path, cfg: dict[str, Any], what: str) -> tuple[int, dict | None]:
    size = cfg.get("vocab_size")
    if not isinstance(size, int):
        raise PreflightError(f"{what}: {model_dir}/config.json has no vocab_size")
    tok = model_dir / "tokenizer.json"
    vocab = _read_json(tok, what).get("model", {}).get("vocab") if tok.exists() else None
    return size, vocab


def safetensors_shapes(model_dir: Path) -> dict[str, tuple[list[int], str]]:
    """Tensor name -> (shape, dtype) from every safetensors header (no weights read)."""
    out: dict[str, tuple[list[int], str]] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with f.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                continue
            (n,) = struct.unpack("<Q", raw)
            if n > 100_000_000:
                continue
            try:
                header = json.loads(fh.read(n))
            except json.JSONDecodeError:
                continue
        for name, meta in header.items():
            if name != "__metadata__" and isinstance(meta, dict):
                out[name] = (list(meta.get("shape", [])), str(meta.get("dtype", "")))
    return out


def _weights_bytes(model: str, folder: Path, online: bool) -> int | None:
    """Bytes of a model's weights: a folder's safetensors files; a hub model's cached
    safetensors (its pickles when it has none), else the hub's safetensors headers when
    ``online``; None: unknown (a hub model whose weights are not in the cache)."""
    if not is_hub_id(model):
        return sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    if has_weights(folder):
        files = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
        return sum(f.stat().st_size for f in files)
    if online:
        try:
            return sum(b for _, _, b in remote_tensors(model).values()) or None
        except HubError:
            return None
    return None


def _kv_bytes_per_token(cfg: dict[str, Any], dtype: str | None, layers: int | None = None) -> int:
    """2 (K and V) x layers x KV heads x head dim x bytes per element."""
    n_layers = layers if layers is not None else cfg.get("num_hidden_layers")
    heads = cfg.get("num_attention_heads")
    kv_heads = cfg.get("num_key_value_heads") or heads
    hidden = cfg.get("hidden_size")
    head_dim = cfg.get("head_dim") or (hidden // heads if hidden and heads else None)
    if not all(isinstance(x, int) and x > 0 for x in (n_layers, kv_heads, head_dim)):
        return 0
    name = (dtype or cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16").lower()
    return 2 * n_layers * kv_heads * head_dim * _DTYPE_BYTES.get(name, 2)


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_cache_bytes: int
    budget_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.total_bytes <= self.budget_bytes


def device_memory_bytes(device: str) -> int | None:
    """Memory the fraction applies to: on CPU vLLM takes it from the first NUMA node (the
    whole machine when there is none); on a GPU, the device's total. None: unknown."""
    if device == "cpu":
        node = Path("/sys/devices/system/node/node0/meminfo")
        try:
            for line in node.read_text().splitlines():
                if "MemTotal:" in line:
                    return int(line.split()[-2]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        try:
            return int(psutil.virtual_memory().total)
        except Exception:
            return None
    total = nvidia_smi("memory.total")  # MiB
    try:
        return int(float(total[0]) * 2**20) if total else None
    except ValueError:
        return None


def estimate_memory(
    cfg: EngineConfig, memory_bytes: int | None, *, fetch: bool = False
) -> MemoryEstimate | None:
    """A lower bound: weights plus a full KV cache for every sequence at max_model_len.
    None when a hub model's weights are not on this machine (nor, with ``fetch``, their
    headers on the hub): unknown, never guessed."""
    target = local_view(cfg.model)
    if target is None:
        return None
    tcfg = _read_json(target / "config.json", "engine.model")
    weights = _weights_bytes(cfg.model, target, _online(cfg.model, fetch))
    per_token = _kv_bytes_per_token(tcfg, cfg.dtype)
    spec = cfg.speculative_config or {}
    method = spec.get("method")
    if method in ("draft_model", "eagle", "eagle3") and spec.get("model"):
        d = local_view(str(spec["model"]))
        if d is not None:
            more = _weights_bytes(str(spec["model"]), d, _online(str(spec["model"]), fetch))
            weights = None if more is None or weights is None else weights + more
            dcfg = _read_json(d / "config.json", "draft")
            layers = 1 if method in ("eagle", "eagle3") else None
            per_token += _kv_bytes_per_token(dcfg, cfg.dtype, layers)
        elif is_hub_id(str(spec["model"])):
            weights = None
    elif method == "mtp":
        per_token += _kv_bytes_per_token(tcfg, cfg.dtype, _mtp_layers(tcfg) or 0)
    if weights is None:
        return None
    kv = per_token * cfg.max_model_len * cfg.max_num_seqs
    if cfg.device == "cpu" and cfg.cpu_kvcache_gib is not None:
        # The KV cache is set exactly; the fraction does not bound it.
        return MemoryEstimate(weights, kv, cfg.cpu_kvcache_gib * 2**30 + weights)
    budget = int(memory_bytes * cfg.memory_fraction) if memory_bytes else None
    return MemoryEstimate(weights, kv, budget)


def _mtp_layers(cfg: dict[str, Any]) -> int:
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers"):
        v = cfg.get(key)
        if isinstance(v, int):
            return v
    return 0


def _check_draft(
    target: Path | None,
    tcfg: dict[str, Any] | None,
    spec: dict[str, Any],
    fetch: bool,
    notes: list[str],
) -> None:
    field = "methods.draft_model.drafts"
    draft = _locate(str(spec["model"]), field, fetch, notes)
    if target is None or tcfg is None or draft is None:
        return  # a hub model not on this machine: noted, checked at launch
    t_size, t_vocab = _vocab(target, tcfg, "engine.model")
    d_size, d_vocab = _vocab(draft, _read_json(draft / "config.json", field), field)
    if d_size != t_size:
        raise PreflightError(
            f"{field}: draft vocab_size {d_size} != target {t_size}; "
            "draft and target must share a vocabulary"
        )
    if t_vocab is not None and d_vocab is not None and t_vocab != d_vocab:
        raise PreflightError(
            f"{field}: draft and target tokenizers map tokens to different ids; "
            "draft and target must share a tokenizer"
        )


def _head_shapes(model: str, head: Path, fetch: bool) -> dict[str, tuple[list[int], str]]:
    """The head's tensor shapes: its local safetensors headers, else the hub's."""
    shapes = safetensors_shapes(head)
    if not shapes and _online(model, fetch):
        try:
            shapes = {k: (v[0], v[1]) for k, v in remote_tensors(model).items()}
        except HubError:
            return {}  # the shape check is skipped; the engine's load checks it
    return shapes


def _check_eagle(
    tcfg: dict[str, Any] | None, spec: dict[str, Any], fetch: bool, notes: list[str]
) -> None:
    method = spec["method"]
    field = f"methods.{method}.heads"
    model = str(spec.get("model") or "")
    head = _locate(model, field, fetch, notes)
    if head is None or tcfg is None:
        return  # a hub model not on this machine: noted, checked at launch
    hcfg = _read_json(head / "config.json", field)
    t_hidden = tcfg.get("hidden_size")
    archs = " ".join(hcfg.get("architectures") or [])
    if method == "eagle3" and "Eagle3" not in archs:
        raise PreflightError(
            f"{field}: {model} is not an EAGLE-3 head (architectures: {archs or 'none'})"
        )
    want_hidden = hcfg.get("target_hidden_size") or hcfg.get("hidden_size")
    if t_hidden is not None and want_hidden != t_hidden:
        raise PreflightError(
            f"{field}: head expects target hidden size {want_hidden}, the target has "
            f"{t_hidden}; an EAGLE head belongs to one target"
        )
    t_vocab = tcfg.get("vocab_size")
    h_vocab = hcfg.get("draft_vocab_size") if method == "eagle3" else hcfg.get("vocab_size")
    if method == "eagle3" and isinstance(h_vocab, int) and t_vocab and h_vocab > t_vocab:
        raise PreflightError(f"{field}: draft_vocab_size {h_vocab} exceeds target {t_vocab}")
    if method == "eagle" and isinstance(h_vocab, int) and t_vocab and h_vocab != t_vocab:
        raise PreflightError(f"{field}: head vocab_size {h_vocab} != target {t_vocab}")
    shapes = _head_shapes(model, head, fetch)
    fc = next((v for k, v in shapes.items() if k.endswith("fc.weight")), None)
    h_hidden = hcfg.get("hidden_size")
    if fc is not None and isinstance(h_hidden, int) and isinstance(t_hidden, int):
        inputs = 3 if method == "eagle3" else 2
        want = [h_hidden, inputs * t_hidden]
        if fc[0] != want:
            raise PreflightError(
                f"{field}: fc.weight has shape {fc[0]}, expected {want} ({inputs} x the "
                f"target hidden size {t_hidden}); the head was trained for another target"
            )


def _check_mtp(tcfg: dict[str, Any], spec: dict[str, Any]) -> None:
    n = _mtp_layers(tcfg)
    if n <= 0:
        raise PreflightError(
            "methods.mtp: the target checkpoint has no MTP layers (num_nextn_predict_layers); "
            "MTP needs a checkpoint trained with them"
        )
    k = int(spec.get("num_speculative_tokens", 1))
    if k > n:
        raise PreflightError(
            f"methods.mtp.num_speculative_tokens: {k} exceeds the checkpoint's {n} MTP layers"
        )


def preflight(
    cfg: EngineConfig,
    *,
    memory_bytes: int | None = -1,
    notes: list[str] | None = None,
    fetch: bool = True,
) -> MemoryEstimate | None:
    """Raise PreflightError for a candidate that cannot work; returns the memory estimate.

    ``memory_bytes``: what the memory fraction applies to; -1 detects it, None skips the
    memory check. ``notes`` gets what was not checked and why (a hub model not on this
    machine). ``fetch``: a hub model's small files (and headers) may be downloaded when
    downloads are allowed; ``spectune plan`` passes False and downloads nothing.
    """
    notes = [] if notes is None else notes
    target = _locate(cfg.model, "engine.model", fetch, notes)
    tcfg = _read_json(target / "config.json", "engine.model") if target is not None else None
    if target is not None and tcfg is not None:
        _vocab(target, tcfg, "engine.model")
    if cfg.chat_template and not Path(cfg.chat_template).is_file():
        raise PreflightError(f"engine.chat_template: {cfg.chat_template} is not a file")
    spec = cfg.speculative_config or {}
    method = spec.get("method")
    if method == "draft_model":
        _check_draft(target, tcfg, spec, fetch, notes)
    elif method in ("eagle", "eagle3"):
        _check_eagle(tcfg, spec, fetch, notes)
    elif method == "mtp" and tcfg is not None:
        _check_mtp(tcfg, spec)
    elif method in HEAD_PROBLEMS and tcfg is not None:
        field = f"methods.{method}.heads"
        if (head := _locate(str(spec.get("model") or ""), field, fetch, notes)) is not None:
            why = HEAD_PROBLEMS[method](tcfg, _read_json(head / "config.json", field), spec)
            if why is not None:
                raise PreflightError(why)
    if memory_bytes == -1:
        memory_bytes = device_memory_bytes(cfg.device)
    if memory_bytes is None:
        return None
    est = estimate_memory(cfg, memory_bytes, fetch=fetch)
    if est is None:
        models = [cfg.model, str(spec.get("model") or "")]
        missing = [m for m in models if is_hub_id(m) and local_view(m, weights=True) is None]
        notes.append(
            f"memory_fraction: not checked: the weights of {', '.join(missing)} are not in "
            "the local Hugging Face cache (their size is unknown until they are)"
        )
        return None
    gib = 2**30
    if not est.fits and cfg.device == "cpu" and cfg.cpu_kvcache_gib is not None:
        raise PreflightError(
            f"engine.cpu_kvcache_gib: {cfg.cpu_kvcache_gib} GiB is below the "
            f"{est.kv_cache_bytes / gib:.2f} GiB of KV cache {cfg.max_num_seqs} sequences x "
            f"{cfg.max_model_len} tokens need"
        )
    if not est.fits:
        raise PreflightError(
            f"memory_fraction: {cfg.memory_fraction} of {memory_bytes / gib:.2f} GiB is "
            f"{(est.budget_bytes or 0) / gib:.2f} GiB, below the {est.total_bytes / gib:.2f} GiB "
            f"this candidate needs at least (weights {est.weights_bytes / gib:.2f} GiB + KV cache "
            f"{est.kv_cache_bytes / gib:.2f} GiB for {cfg.max_num_seqs} sequences x "
            f"{cfg.max_model_len} tokens)"
        )
    return est
