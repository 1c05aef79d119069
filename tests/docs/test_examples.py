"""Every shell example of the docs runs, and prints what its page shows (by shape).

Each page's ``console`` blocks run in page order against a copy of the replayed job's database
(``conftest.replay_db``): ``spectune ...`` in this process, ``curl ...`` against the app through
FastAPI's TestClient. Blocks the page marks not-run are listed in NOT_RUN: their ``spectune``
commands must still parse, and the flags they give a script of this repository must exist."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs._examples import PAGES, REPO, Block, console_blocks, same_shape
from tuner import cli

# Page -> the first command of each block it does not run. Keep it short: a new entry needs a
# reason on its page (an engine, a GPU, a download, or a change to the machine).
NOT_RUN = {
    "README.md": [
        "make demo",
        ".venv/bin/spectune run bench/tiny-cpu-replay.yaml --db sqlite:///replay.db",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[gpu]'",
    ],
    "docs/getting-started.md": ["make demo", "make serve"],
    "docs/gpu.md": [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[gpu]'",
        "spectune run search_spaces/gpu-llama-3.1-8b-instruct.yaml",
    ],
    "docs/operations.md": [
        "spectune serve --no-worker --db postgresql://spectune@db:5432/spectune",
        "pip install .",
        "docker build -f deploy/docker/Dockerfile.cpu -t spectune:cpu .",
        "kubectl apply -k deploy/k8s/",
    ],
    "docs/watch.md": ["spectune watch --url http://127.0.0.1:8000 --job 1 --once"],
    "docs/integrations.md": [".venv/bin/pip install 'spectune[dashboard]'"],
    "docs/web-ui.md": [".venv/bin/python docs/screenshots.py --db sqlite:///spectune.db --job 1"],
    "docs/benchmarks.md": [
        "make demo",
        ".venv/bin/python bench/search_efficiency.py --surface bench/surfaces/tiny-cpu.jsonl "
        "--seeds 30 --budget 40",
        ".venv/bin/python bench/search_efficiency.py --surface "
        "bench/surfaces/tiny-cpu-sampled.jsonl --whole-job --seeds 30",
        ".venv/bin/python bench/search_efficiency.py --surface bench/surfaces/tiny-cpu.jsonl "
        "--whole-job --seeds 30 --budget 40 --strategies spectune,tpe,random,grid",
        ".venv/bin/python bench/record_surface.py search_spaces/wide-cpu.yaml "
        "--out bench/surfaces/wide-cpu.jsonl",
        ".venv/bin/python bench/protocol_spread.py --space search_spaces/tiny-cpu.yaml "
        '--params \'[{"method": "none"}, {"method": "ngram", '
        '"num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}]\' '
        '--protocols \'{"fixed": {"warmup": "fixed", "repeat_s": null}, "steady": '
        '{"warmup": "steady", "repeat_s": 5}}\' --launches 6 --extra steady=4',
        ".venv/bin/python bench/relaunch.py --space search_spaces/tiny-cpu.yaml "
        '--params \'{"method": "none"}\' --launches 6',
        ".venv/bin/python bench/fidelity.py --url http://127.0.0.1:8000 --model fake --runs 3",
        ".venv/bin/pytest tests/engines/test_sampling_vllm.py tests/offline/test_offline_vllm.py"
        " -m engine",
        ".venv/bin/python bench/sampled_traffic.py",
        ".venv/bin/python bench/queueing.py",
        ".venv/bin/spectune run search_spaces/tiny-cpu-suffix.yaml",
        ".venv/bin/spectune run search_spaces/tiny-cpu-medusa.yaml",
        ".venv/bin/python bench/workers_speedup.py",
        ".venv/bin/python bench/watch_demo.py",
    ],
}
SCRIPT = re.compile(r"^(?:\S*python3?) ((?:bench|scripts|docs)/\S+\.py)(.*)$")


def _pages_with_examples() -> list[Path]:
    return [p for p in PAGES if console_blocks([p])]


@contextlib.contextmanager
def _env(assignments: dict[str, str]) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in assignments}
    os.environ.update(assignments)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _split(text: str) -> tuple[dict[str, str], list[str]]:
    """``A=1 B=2 prog args # comment`` -> ({A: 1, B: 2}, [prog, args])."""
    argv = shlex.split(text, comments=True)
    env = {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
        k, _, v = argv.pop(0).partition("=")
        env[k] = v
    return env, argv


def _spectune(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else int(e.code is not None)
    return rc, out.getvalue()


def _curl(argv: list[str], client) -> tuple[int, str]:
    method, url, data, headers = None, None, None, {}
    args = iter(argv[1:])
    for a in args:
        if a in ("-s", "--silent", "-S", "--show-error"):
            continue
        if a in ("-X", "--request"):
            method = next(args)
        elif a in ("-H", "--header"):
            k, _, v = next(args).partition(":")
            headers[k.strip()] = v.strip()
        elif a in ("-d", "--data", "--data-raw"):
            data = next(args)
        elif a.startswith("-"):
            raise AssertionError(f"curl option {a} is not supported by tests/docs")
        else:
            url = a
    assert url, "curl without a URL"
    resp = client.request(
        method or ("POST" if data else "GET"), url, content=data, headers=headers
    )
    return 0, resp.text


class _Runner:
    """Runs one page's blocks on its own copies of the databases."""

    def __init__(self, tmp: Path, replay_db: Path, measured: Path | None, stack):
        self.stack = stack
        self.urls = {"replay": self._copy(replay_db, tmp / "replay.db")}
        if measured is not None:
            self.urls["measured"] = self._copy(measured, tmp / "measured.db")
        self.clients: dict[str, object] = {}

    @staticmethod
    def _copy(src: Path, dst: Path) -> str:
        shutil.copy(src, dst)
        return f"sqlite:///{dst}"

    def client(self, which: str):
        if which not in self.clients:
            from fastapi.testclient import TestClient

            from tuner.api import ServiceSettings, create_app

            settings = ServiceSettings(database_url=self.urls[which], embedded_worker=False)
            app = create_app(settings, run_worker=False)
            self.clients[which] = self.stack.enter_context(TestClient(app))
        return self.clients[which]

    def run(self, block: Block) -> None:
        which = "measured" if block.marker == "measured-job" else "replay"
        for n, cmd in enumerate(block.commands):
            env, argv = _split(cmd.text)
            env = {"SPECTUNE_DATABASE_URL": self.urls[which], **env}
            where = f"{block.page.relative_to(REPO)}:{cmd.line}: $ {cmd.text}"
            with _env(env):
                if argv[0] in ("spectune", ".venv/bin/spectune"):
                    rc, out = _spectune(argv[1:])
                elif argv[0] == "curl":
                    rc, out = _curl(argv, self.client(which))
                else:
                    raise AssertionError(f"{where}: only spectune and curl run; mark it not-run")
            want = block.exit_code if n == len(block.commands) - 1 else 0
            assert rc == want, f"{where}: exit {rc}, the page says {want}\n{out[-2000:]}"
            problems = same_shape(cmd.output, out)
            assert not problems, f"{where}: {problems[0]}\n--- got ---\n{out[-3000:]}"


@pytest.mark.parametrize("page", _pages_with_examples(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_examples_run(page, tmp_path, replay_db, request, monkeypatch):
    monkeypatch.chdir(REPO)
    # `plan` reports hub models as the cache holds them: none here, and downloads allowed.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    runnable = [b for b in console_blocks([page]) if b.not_run is None]
    needs_measured = any(b.marker == "measured-job" for b in runnable)
    measured = request.getfixturevalue("measured_db") if needs_measured else None
    with contextlib.ExitStack() as stack:
        runner = _Runner(tmp_path, replay_db, measured, stack)
        for block in runnable:
            runner.run(block)


def test_not_run_blocks_are_the_listed_few():
    found: dict[str, list[str]] = {}
    for b in console_blocks():
        if b.not_run is not None:
            assert b.not_run, f"{b.where}: a not-run block says why"
            assert b.commands, f"{b.where}: a not-run block without a $ command"
            found.setdefault(str(b.page.relative_to(REPO)), []).append(b.commands[0].text)
    norm = {p: [" ".join(shlex.split(c, comments=True)) for c in cs] for p, cs in found.items()}
    want = {p: [" ".join(shlex.split(c, comments=True)) for c in cs] for p, cs in NOT_RUN.items()}
    assert norm == want


def test_commands_not_run_still_parse_and_name_real_flags():
    """A not-run ``spectune`` command parses with today's parser; a script's flags exist."""
    parser = cli.build_parser()
    for b in console_blocks():
        if b.not_run is None:
            continue
        for c in b.commands:
            for part in re.split(r"\s*(?:&&|\|)\s*", c.text):
                env, argv = _split(part)
                if not argv:
                    continue
                if argv[0].endswith("spectune"):
                    try:
                        parser.parse_args(argv[1:])
                    except SystemExit as e:  # --version and --help exit 0
                        if e.code:
                            raise AssertionError(f"{b.where}: $ {part} does not parse") from e
                m = SCRIPT.match(" ".join(argv))
                if m:
                    script = REPO / m.group(1)
                    assert script.is_file(), f"{b.where}: {m.group(1)} does not exist"
                    src = script.read_text()
                    for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", m.group(2)):
                        assert f'"{flag}"' in src, f"{b.where}: {script.name} has no {flag}"


def test_no_shell_outside_console_blocks():
    """Shell examples are console blocks, so the tests above see every one of them."""
    from tests.docs._examples import blocks

    bad = [
        b.where
        for p in PAGES
        for b in blocks(p)
        if b.language in ("bash", "sh", "shell", "zsh") and "site-packages" not in str(p)
    ]
    assert bad == []
