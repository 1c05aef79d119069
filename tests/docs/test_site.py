"""The documentation site builds with ``--strict``, its generated references cover the code, and
what the pages promise about the code holds: the README stays short, the GPU preset is what
the GPU guide says, every exit code and failure reason is documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml

from tests.docs._examples import PAGES, REPO, blocks
from tuner import cli
from tuner.engines import FAIL_REASONS
from tuner.hub import is_hub_id
from tuner.space import load_space, loads_space

DOCS = REPO / "docs"


def _generator():
    sys.path.insert(0, str(DOCS / "_gen"))
    try:
        import reference
    finally:
        sys.path.remove(str(DOCS / "_gen"))
    return reference


def test_the_site_builds_strict(tmp_path):
    """`make docs` in a few seconds: a broken link, anchor or generated page fails it."""
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stderr[-4000:]
    site = tmp_path / "site"
    cli_page = (site / "reference" / "cli" / "index.html").read_text()
    assert "spectune watch" in cli_page and "generated: cli" not in cli_page
    rest_page = (site / "reference" / "rest-api" / "index.html").read_text()
    assert "submit_job" in rest_page and "generated: rest" not in rest_page
    # The README's demo result is included, not copied.
    readme = (REPO / "README.md").read_text()
    block = readme.split("[start:demo-result] -->", 1)[1].split("<!--", 1)[0]
    first = block.strip().splitlines()[0]  # plain text: no markup to render differently
    assert first in (site / "getting-started" / "index.html").read_text(), first


def test_the_cli_reference_has_every_command_and_option():
    text = _generator().cli_reference()

    def walk(parser, path):
        for a in parser._actions:
            for o in a.option_strings:
                if o not in ("-h", "--help"):
                    yield path, o
            if hasattr(a, "choices") and isinstance(a.choices, dict):
                for name, sub in a.choices.items():
                    yield from walk(sub, [*path, name])

    for path, option in walk(cli.build_parser(), ["spectune"]):
        if len(path) > 1:
            assert f"### `{' '.join(path)}`" in text
        assert f"`{option}`" in text


def test_the_rest_reference_has_every_operation():
    gen = _generator()
    doc = gen.openapi_document()
    text = gen.rest_reference(doc)
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert ids and all(f"`{i}`" in text for i in ids)
    assert all(f"### {name}" in text for name in doc["components"]["schemas"])


def test_the_readme_is_short_and_keeps_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text


def test_the_gpu_preset_is_what_the_guide_says():
    space = load_space(REPO / "search_spaces" / "gpu-llama-3.1-8b-instruct.yaml")
    assert space.engine.device == "cuda" and not space.engine.enforce_eager
    assert len(space.memory_fraction) >= 2  # a real axis
    models = [space.engine.model, *space.methods.draft_model.drafts]
    models += space.methods.eagle3.heads
    assert all(is_hub_id(m) for m in models), models
    assert "not measured on a gpu by this project" in (DOCS / "gpu.md").read_text().lower()


def test_every_exit_code_is_documented():
    section = (DOCS / "troubleshooting.md").read_text().split("## Exit codes")[1].split("\n#")[0]
    documented = {int(m) for m in re.findall(r"^\| `(\d+)` \|", section, re.M)}
    listed = {int(m) for m in re.findall(r"^  (\d+) +\S", cli.EXIT_CODES, re.M)}
    assert documented == listed


def test_every_failure_reason_is_documented():
    text = (DOCS / "troubleshooting.md").read_text()
    assert all(f"| `{r}` |" in text for r in FAIL_REASONS)


def test_marked_search_spaces_validate():
    marked = [b for p in PAGES for b in blocks(p) if b.marker == "valid-space"]
    assert marked, "the search-space reference shows a space that validates"
    for b in marked:
        text = "\n".join(_block_text(b))
        assert isinstance(yaml.safe_load(text), dict)
        loads_space(text, base_dir=REPO / "search_spaces")


def _block_text(block) -> list[str]:
    lines = block.page.read_text().splitlines()
    end = next(i for i in range(block.line, len(lines)) if lines[i].startswith("```"))
    return lines[block.line : end]
