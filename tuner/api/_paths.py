"""Paths a submitted job names, confined to the service's roots (``ServiceSettings.roots``).

Each path is resolved first (``..`` and every symlink followed) and only then checked for
containment, so neither ``../../etc`` nor a symlink inside a root that points out of it
escapes. Files the job reads (workload, replay surface, chat template) must be regular
files under the size limit: a FIFO would block the worker forever and ``/dev/zero`` would
never end. Model folders must be folders when they exist (one that does not is refused
later, by pre-flight); a model named by Hugging Face hub id is no path and passes (the
worker fetches it into its cache).
Called from sync routes, so the ``stat`` calls run in the thread pool, off the event loop.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from tuner.api.settings import ServiceSettings
from tuner.errors import FieldProblem, InvalidInput
from tuner.hub import is_hub_id
from tuner.space import SearchSpace

__all__ = ["as_written", "check_paths", "path_problem"]

Loc = tuple[str | int, ...]


def _models(space: SearchSpace) -> Iterator[tuple[Loc, str]]:
    """(field path, model as written) for every checkpoint the space names."""
    yield ("engine", "model"), space.engine.model
    m = space.methods
    if m.draft_model is not None:
        for i, d in enumerate(m.draft_model.drafts):
            yield ("methods", "draft_model", "drafts", i), d
    for name in ("eagle", "eagle3"):
        meth = getattr(m, name)
        if meth is not None:
            for i, h in enumerate(meth.heads):
                yield ("methods", name, "heads", i), h
    if m.mtp is not None and m.mtp.model is not None:
        yield ("methods", "mtp", "model"), m.mtp.model


def _named(space: SearchSpace) -> Iterator[tuple[Loc, str, bool]]:
    """(field path, path as written, is a file the job reads) for every path in the space.
    A model named by Hugging Face hub id is no path (``tuner.hub``'s rule: nothing of that
    name in the space's folder): it is not confined, it is fetched into the cache."""
    if space.engine.surface is not None:
        yield ("engine", "surface"), space.engine.surface, True
    for loc, written in _models(space):
        if not is_hub_id(space.resolve_model(written)):
            yield loc, written, False
    if space.engine.chat_template is not None:
        yield ("engine", "chat_template"), space.engine.chat_template, True
    if space.workloads:
        for i, w in enumerate(space.workloads):
            if w.path is not None:
                yield ("workloads", i, "path"), w.path, True
    elif space.workload.path is not None:
        yield ("workload", "path"), space.workload.path, True


def path_problem(
    written: str, base: Path, roots: tuple[Path, ...], *, file: bool, max_bytes: int
) -> str | None:
    """Why ``written`` (relative to ``base``) may not be used, or None."""
    if "\x00" in written:
        return "must not contain a NUL character"
    p = Path(written).expanduser()
    try:
        real = (p if p.is_absolute() else base / p).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        return f"cannot be resolved ({type(e).__name__})"
    if not any(real.is_relative_to(r) for r in roots):
        return (
            "must lie inside the service's folders (search_spaces, models or "
            "SPECTUNE_PATH_ROOTS) once .. and symlinks are resolved"
        )
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return "no such file" if file else None
    except OSError as e:
        return f"cannot be read ({type(e).__name__})"
    if file:
        if not stat.S_ISREG(st.st_mode):
            return "must be a regular file (not a folder, FIFO, device or socket)"
        if st.st_size > max_bytes:
            return f"is {st.st_size} bytes, over the limit of {max_bytes}"
    elif not stat.S_ISDIR(st.st_mode):
        return "must be a model folder"
    return None


def check_paths(settings: ServiceSettings, space: SearchSpace, where: str) -> None:
    """InvalidInput naming each path of ``space`` that leaves the roots or is not what it
    should be."""
    roots = settings.roots
    problems = [
        FieldProblem(("body", where, *loc), why, "path_not_allowed")
        for loc, written, file in _named(space)
        if (
            why := path_problem(
                written,
                space.base_dir,
                roots,
                file=file,
                max_bytes=settings.max_input_file_bytes,
            )
        )
        is not None
    ]
    if problems:
        raise InvalidInput(problems)


def as_written(msg: str, settings: ServiceSettings, space: SearchSpace) -> str:
    """``msg`` with each of ``space``'s paths put back as the submitter wrote it, and any other
    path inside the service's folders made relative to its folder: an answer never tells a
    client where the server keeps its files."""
    swaps = [(space.resolve(written), written) for _, written, _ in _named(space)]
    swaps += [(f"{root}{os.sep}", "") for root in settings.roots]
    for absolute, shown in sorted(swaps, key=lambda s: len(s[0]), reverse=True):
        msg = msg.replace(absolute, shown)  # longest first: a file before its folder
    return msg
