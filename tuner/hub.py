"""Models named by Hugging Face hub id beside local folders: which one a space's string is,
where its files are on this machine, and fetching them before an engine needs them.

Why one module: the engine gets a hub id exactly as a vLLM user writes it (``--model
org/name``) and loads it from the cache with HF_HUB_OFFLINE=1, while everything SpecTune
reads of a model itself (config.json, tokenizer.json, safetensors headers, the weights offline
pricing runs) goes through ``local_view``: no code joins a hub id to a path.

The rule (``resolve_model``): a string is a local path when it exists relative to the space's
folder or starts with ``/``, ``./``, ``../`` or ``~``; otherwise it is a hub id when
huggingface_hub's repo-id rules accept it (``name`` or ``org/name``); anything else is a path
(which pre-flight refuses when it is missing). Downloads are allowed unless HF_HUB_OFFLINE (or
TRANSFORMERS_OFFLINE) is set. The access token is huggingface_hub's business (HF_TOKEN or its
token file): SpecTune never reads, stores or logs it.
"""

from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_FILES",
    "HubError",
    "cache_dir",
    "downloads_allowed",
    "fetch_config_files",
    "fetch_model",
    "has_weights",
    "is_hub_id",
    "local_view",
    "looks_like_hub_id",
    "not_here_note",
    "remote_tensors",
    "resolve_model",
]

_PATH_PREFIXES = ("/", "./", "../", "~")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's truthy values

# The small files pre-flight reads (those a repository lacks are skipped).
CONFIG_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "model.safetensors.index.json",
)
# What an engine loads from a checkpoint: configs, weights, tokenizer and chat-template files.
_LOAD = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "tokenizer*"]
# PyTorch pickles only where the repository has no safetensors (an older EAGLE head).
_PICKLES = ["*.bin", "*.pth"]
# Meta's consolidated checkpoints for their own code: no engine here reads them.
_SKIP = ["original/*"]


class HubError(OSError):
    """A hub model whose files did not download or list; the message says why (never the
    token)."""


def _why(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]}" if first else type(e).__name__


def looks_like_hub_id(name: str) -> bool:
    """Whether huggingface_hub's repo-id rules accept ``name`` (``name`` or ``org/name``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def resolve_model(name: str, base_dir: Path) -> str:
    """A model string of a space as the engine gets it: an absolute path for a local
    checkpoint (relative paths against the space's folder), the hub id as written
    otherwise. A string that is neither stays a path, refused later by pre-flight."""
    p = Path(name).expanduser()
    local = p if p.is_absolute() else (base_dir / p).resolve()  # as SearchSpace.resolve
    if name.startswith(_PATH_PREFIXES) or local.exists() or not looks_like_hub_id(name):
        return str(local)
    return name


def is_hub_id(model: str) -> bool:
    """Whether a model string as ``resolve_model`` left it names a hub model (a resolved
    path is absolute). Never read against the working folder: the engine runs in a folder of
    its own, so vLLM cannot take the id for a folder there either."""
    return bool(model) and not model.startswith(_PATH_PREFIXES) and looks_like_hub_id(model)


def downloads_allowed(env: dict[str, str] | None = None) -> bool:
    """False when HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is truthy (huggingface_hub's
    rule), read afresh on every call."""
    src = os.environ if env is None else env
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return not any((src.get(k) or "").strip().upper() in _TRUE for k in keys)


def cache_dir() -> Path:
    """The hub cache huggingface_hub would use, from the environment as it is now (its own
    constant is read once at import)."""
    env = os.environ
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(hub)))


def has_weights(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint's weights: every shard its safetensors index
    names, else any safetensors file, else a PyTorch pickle."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (OSError, ValueError, AttributeError):
            return False
        return bool(shards) and all((folder / s).is_file() for s in shards)
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))


def local_view(model: str, *, weights: bool = False) -> Path | None:
    """The folder a model's files are read from: the folder itself for a path, the cached
    snapshot for a hub id (no network); None when it is not on this machine (no
    config.json, or with ``weights`` no weights)."""
    if not is_hub_id(model):
        p = Path(model).expanduser()
        return p if p.is_dir() else None
    from huggingface_hub import snapshot_download

    try:
        snap = Path(snapshot_download(model, local_files_only=True, cache_dir=cache_dir()))
    except Exception:  # LocalEntryNotFoundError, a broken cache entry: not here
        return None
    if not (snap / "config.json").is_file() or (weights and not has_weights(snap)):
        return None
    return snap


def not_here_note(field: str, model: str, *, will_download: bool) -> str:
    """The note for a hub model whose files are not on this machine: checked when they are
    (at launch offline, after the job's download otherwise), never refused for it."""
    if will_download:
        return (
            f"{field}: {model} is not in the local Hugging Face cache: the job downloads it "
            "before its first launch; checked then"
        )
    return (
        f"{field}: {model} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: "
        "checked at launch"
    )


def fetch_config_files(model: str) -> Path:
    """Download the small files pre-flight reads (``CONFIG_FILES``; config.json must exist)
    into the cache; returns the snapshot folder. HubError when they do not download."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    folder: Path | None = None
    for name in CONFIG_FILES:
        try:
            got = hf_hub_download(model, name, cache_dir=cache_dir())
        except EntryNotFoundError:
            if name == "config.json":
                raise HubError(f"{model} has no config.json") from None
            continue
        except Exception as e:
            raise HubError(f"{model} did not download ({_why(e)})") from None
        folder = folder or Path(got).parent
    assert folder is not None
    return folder


def _patterns(model: str) -> tuple[list[str], list[str]]:
    """(allow, ignore) for ``snapshot_download``: what an engine loads; pickles only when the
    repository has no safetensors."""
    from huggingface_hub import HfApi

    try:
        files = HfApi().list_repo_files(model)
    except Exception as e:
        raise HubError(f"{model}: its files did not list ({_why(e)})") from None
    tensors = any(fnmatch.fnmatch(f, "*.safetensors") for f in files)
    return (_LOAD if tensors else _LOAD + _PICKLES), _SKIP


def fetch_model(model: str) -> Path:
    """Download what an engine loads of hub model ``model`` into the cache (files already
    there are kept); returns the snapshot folder. HubError when it does not download."""
    from huggingface_hub import snapshot_download

    allow, ignore = _patterns(model)
    try:
        got = snapshot_download(
            model, cache_dir=cache_dir(), allow_patterns=allow, ignore_patterns=ignore
        )
    except Exception as e:
        raise HubError(f"{model} did not download ({_why(e)})") from None
    return Path(got)


def remote_tensors(model: str) -> dict[str, tuple[list[int], str, int]]:
    """Tensor name -> (shape, dtype, bytes) from the hub's safetensors headers (ranges of
    the files, not the weights); empty for a repository without safetensors."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import NotASafetensorsRepoError

    try:
        meta: Any = HfApi().get_safetensors_metadata(model)
    except NotASafetensorsRepoError:
        return {}
    except Exception as e:
        raise HubError(f"{model}: safetensors headers did not read ({_why(e)})") from None
    out: dict[str, tuple[list[int], str, int]] = {}
    for f in meta.files_metadata.values():
        for name, t in f.tensors.items():
            out[name] = (list(t.shape), str(t.dtype), int(t.data_offsets[1] - t.data_offsets[0]))
    return out
