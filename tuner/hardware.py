"""What a warm start must match: the machine a job measured on."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

__all__ = ["hardware_fingerprint", "nvidia_smi"]


def nvidia_smi(query: str) -> list[str] | None:
    """One ``nvidia-smi --query-gpu=QUERY`` answer, a line per GPU (no header, no units);
    None without the tool or when it fails."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


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
    gpus = nvidia_smi("name") if device == "cuda" else None
    if gpus:
        out += f" / {', '.join(gpus)}"
    return f"{out} / {device}"
