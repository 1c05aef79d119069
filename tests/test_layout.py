"""The layout the README's Architecture section promises, checked on every `make test`:
import arrows in ``tuner/`` point down (no cycle, counting imports inside functions), no
import written inside a function, no file a reader cannot hold, and engine knowledge only in
``tuner/engines/``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "tuner"
MAX_LINES = 400
# An engine's metric names, endpoints, flags and log lines (README: Architecture).
ENGINE_WORDS = re.compile(
    r"vllm:|sglang:|/flush_cache|/reset_prefix_cache|/server_info|/generate\b|KV cache size"
    r"|--speculative-"
)


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> list[tuple[str, bool]]:
    """(imported tuner module, written inside a function) for every import in ``path``."""
    name = _module(path)
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            nested |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):
                out.append((t, id(node) in nested))
    return out


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    files = {_module(f): f for f in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    inside: list[str] = []
    for name, f in files.items():
        deps = _imports(f, set(files))
        graph[name] = {d for d, _ in deps}
        inside += [f"{name} imports {d} inside a function" for d, nested in deps if nested]
    return graph, inside


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_import_graph_has_no_cycle_and_no_import_inside_a_function():
    graph, inside = _graph()
    assert "tuner.job" in graph and graph["tuner.job"], "the graph was not built"
    assert _cycles(graph) == []
    assert inside == []


def test_cycle_finder_finds_a_cycle():
    # The check above must be able to fail.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_lower_layers_do_not_import_upper_ones():
    graph, _ = _graph()
    below = {
        "tuner.engines": {"tuner.storage", "tuner.space", "tuner.job", "tuner.api", "tuner.cli"},
        "tuner.storage": {"tuner.engines", "tuner.job", "tuner.pareto", "tuner.api"},
        "tuner.space": {"tuner.storage", "tuner.job", "tuner.measure", "tuner.candidates"},
        "tuner.loadgen": {"tuner.engines"},
        "tuner.metrics": {"tuner.engines", "tuner.loadgen"},
    }
    bad = [
        f"{mod} -> {dep}"
        for mod, deps in graph.items()
        for dep in deps
        for low, banned in below.items()
        if (mod == low or mod.startswith(low + "."))
        and any(dep == b or dep.startswith(b + ".") for b in banned)
    ]
    assert bad == []


@pytest.mark.parametrize("folder", ["tuner", "web"])
def test_no_file_over_the_limit(folder):
    files = [*(REPO / folder).rglob("*.py"), *(REPO / folder).rglob("*.js")]
    assert files
    long = {
        str(f.relative_to(REPO)): n
        for f in files
        if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_engine_specifics_live_in_tuner_engines():
    hits = []
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(REPO)
        if rel.parts[:2] == ("tuner", "engines"):
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and ENGINE_WORDS.search(node.value)
            ):
                hits.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
    assert hits == []


def test_no_formatter_or_lint_comments_that_do_nothing():
    skip = "# fmt" + ": skip"  # spelled apart so this file does not match itself
    bad = []
    for f in [*PKG.rglob("*.py"), *(REPO / "tests").rglob("*.py")]:
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if skip in line or re.search(r"noqa: ?" + "ANN", line):
                bad.append(f"{f.relative_to(REPO)}:{i}")
    assert bad == []
