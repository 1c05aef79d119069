"""An offline Hugging Face hub cache built from the repository's tiny models, laid out as
huggingface_hub writes it, so hub ids resolve with no network: ``HF_HUB_CACHE=DIR
HF_HUB_OFFLINE=1`` and ``snapshot_download("spectune/tiny-target", local_files_only=True)``
or ``AutoConfig.from_pretrained("spectune/tiny-target")`` find it.

Layout: ``DIR/models--ORG--NAME/blobs/<hash>`` (the files' bytes; sha256 for weights as the
hub's LFS etags, git's blob sha1 for the rest), ``snapshots/<commit>/<file>`` relative
symlinks to the blobs, and ``refs/main`` holding the commit. Used by tests (imported) and by
``scripts/make_hf_cache.py``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

__all__ = ["TINY_IDS", "build_hf_cache", "repo_folder"]

TINY = Path(__file__).resolve().parents[1] / "models" / "tiny"

# hub id -> the tiny model folder it is built from
TINY_IDS: dict[str, Path] = {
    "spectune/tiny-target": TINY / "target",
    "spectune/tiny-draft": TINY / "draft",
    "spectune/tiny-eagle": TINY / "eagle",
    "spectune/tiny-eagle3": TINY / "eagle3",
    "spectune/tiny-target-mtp": TINY / "target-mtp",
}


def repo_folder(cache: Path, repo_id: str) -> Path:
    """Where huggingface_hub keeps a model repository in ``cache``."""
    return Path(cache) / ("models--" + repo_id.replace("/", "--"))


def _blob_name(data: bytes, lfs: bool) -> str:
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _add(cache: Path, repo_id: str, src: Path, skip: tuple[str, ...] = ()) -> Path:
    """One repository from the files of ``src`` (a flat model folder); returns its snapshot
    folder. The commit is a hash of the files, so a rebuild gives the same folder."""
    files = sorted(p for p in src.iterdir() if p.is_file() and p.name not in skip)
    listing = hashlib.sha1()
    repo = repo_folder(cache, repo_id)
    blobs = repo / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    names: dict[str, str] = {}
    for f in files:
        data = f.read_bytes()
        blob = _blob_name(data, lfs=f.suffix in (".safetensors", ".bin"))
        if not (blobs / blob).exists():
            (blobs / blob).write_bytes(data)
        names[f.name] = blob
        listing.update(f"{f.name}\0{blob}\n".encode())
    commit = listing.hexdigest()
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name, blob in names.items():
        link = snap / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.join("..", "..", "blobs", blob))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def build_hf_cache(
    cache: Path, models: dict[str, Path] | None = None, *, config_only: tuple[str, ...] = ()
) -> Path:
    """Build (or rebuild) the cache at ``cache`` with ``models`` (hub id -> folder; the tiny
    models by default). Ids in ``config_only`` get their small files without the weights,
    as a pre-flight download leaves them. Returns ``cache``."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    for repo_id, src in (models or TINY_IDS).items():
        old = repo_folder(cache, repo_id)
        if old.exists():
            shutil.rmtree(old)
        weights = ("model.safetensors",) if repo_id in config_only else ()
        _add(cache, repo_id, Path(src), skip=weights)
    return cache
