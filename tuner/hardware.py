"""What a warm start must match: the machine a job measured on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

__all__ = ["hardware_fingerprint"]


def hardware_fingerprint(device: str) -> str:
    """CPU model and count, and the accelerator's name (``nvidia-smi``) on CUDA."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = f"{cpu} x{os.cpu_count()}"
    if device == "cuda" and shutil.which("nvidia-smi"):
        try:
            gpus = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout.strip()
            out += f" / {gpus.replace(chr(10), ', ')}"
        except (OSError, subprocess.SubprocessError):
            pass
    return f"{out} / {device}"
