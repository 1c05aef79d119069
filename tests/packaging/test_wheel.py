"""The built wheel works on its own, away from the checkout.

Builds the wheel from a copy of the sources, installs it into a fresh virtualenv (its
dependencies from PyPI; never vllm), then from a folder outside the repository runs
``spectune --version``, ``db upgrade``, a REPLAY ``run`` (a recorded surface: no engine) and
``serve``, which must serve the web UI at ``/`` and the API at ``/api/jobs``.

About 1-3 minutes, most of it pip downloading the dependencies. ``-m "not packaging"`` skips it.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tuner._resources import DATA_DIRS

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "tuner", *DATA_DIRS)
SURFACE = REPO / "bench" / "surfaces" / "tiny-cpu.jsonl"
REPLAY = """
name: wheel-replay
engine: {kind: replay, surface: tiny-cpu.jsonl, model: ../models/tiny/target,
         served_model_name: tiny-target, max_model_len: 512, enforce_eager: true, device: cpu}
methods:
  ngram:
    num_speculative_tokens: {min: 1, max: 4}
    prompt_lookup_min: {min: 1, max: 2}
    prompt_lookup_max: {min: 3, max: 4}
max_num_seqs: [4, 8]
memory_fraction: [0.15]
concurrency: [1, 4]
workload: {builtin: code_completion, num_prompts: 12, max_tokens: 64, warmup_requests: 2}
measurement: {repeats: 3, confirm_top: 0}
lossless: {num_prompts: 6, max_tokens: 32}
slo: {p99_tpot_ms: 50}
trials: 4
seed: 0
"""
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "_data")


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECTUNE_", "PYTHON"))}
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd}: rc {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy, so no build/ or egg-info lands in the working tree."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=_IGNORE)
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(p, src / name)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    _run([*pip, "-w", str(root / "dist"), str(src)], cwd=root)
    (whl,) = (root / "dist").glob("spectune-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with only the wheel and its core dependencies; returns its bin/."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(root / "v")], cwd=root)
    bin_ = root / "v" / "bin"
    _run([str(bin_ / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)], root)
    return bin_


@pytest.fixture(scope="module")
def work(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the checkout, holding the replay space and its surface."""
    d = tmp_path_factory.mktemp("work")
    (d / "replay.yaml").write_text(REPLAY)
    shutil.copy2(SURFACE, d / "tiny-cpu.jsonl")
    return d


def test_wheel_carries_every_data_folder_file(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for d in DATA_DIRS:
        want = {
            f"tuner/_data/{d}/{p.relative_to(REPO / d).as_posix()}"
            for p in (REPO / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        assert want, d
        assert want <= names, sorted(want - names)
    assert "tuner/_data/web/index.html" in names
    # setup.py copies the folders tuner/_resources.py looks for: the two lists agree.
    tree = ast.parse((REPO / "setup.py").read_text())
    consts = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DATA_DIRS"
    ]
    assert consts == [DATA_DIRS]


def test_installed_package_reads_its_bundled_data(venv: Path, work: Path):
    code = (
        "import json, tuner; from tuner import _resources as r;"
        "print(json.dumps([tuner.__file__, str(r.migrations_dir()), str(r.web_dir()),"
        " str(r.search_spaces_dir())]))"
    )
    paths = json.loads(_run([str(venv / "python"), "-c", code], cwd=work).stdout)
    site = str(venv.parent / "lib")
    assert all(p.startswith(site) for p in paths), paths  # never the checkout's folders
    assert paths[1].endswith("tuner/_data/migrations")
    assert _run([str(venv / "spectune"), "--version"], cwd=work).stdout.startswith("spectune 0.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def test_db_upgrade_replay_run_and_serve(wheel: Path, venv: Path, work: Path):
    db = f"sqlite:///{work / 'spectune.db'}"
    up = _run([str(venv / "spectune"), "db", "upgrade", "--db", db], cwd=work)
    assert "schema at" in up.stdout
    run = _run(
        [str(venv / "spectune"), "run", "replay.yaml", "--db", db, "--work-dir", "w"], cwd=work
    )
    assert "REPLAY: every number below was answered from the recorded surface" in run.stdout
    jobs = json.loads(_run([str(venv / "spectune"), "jobs", "--json", "--db", db], work).stdout)
    assert [(j["name"], j["state"]) for j in jobs] == [("wheel-replay", "succeeded")]

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECTUNE_", "PYTHON"))}
    cmd = [str(venv / "spectune"), "serve", "--db", db, "--port", str(port), "--no-worker"]
    log = (work / "serve.log").open("w")
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(base + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (work / "serve.log").read_text()
            assert time.monotonic() < deadline, (work / "serve.log").read_text()
            time.sleep(0.3)
        status, page = _get(base + "/")
        assert status == 200
        bundled = zipfile.ZipFile(wheel).read("tuner/_data/web/index.html").decode()
        assert page == bundled  # the UI the wheel carries
        status, body = _get(base + "/api/jobs")
        assert status == 200
        assert [j["name"] for j in json.loads(body)["items"]] == ["wheel-replay"]
        status, body = _get(base + "/api/search-spaces")
        assert "tiny-cpu" in body  # the bundled presets
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    assert "web UI NOT served" not in (work / "serve.log").read_text()
