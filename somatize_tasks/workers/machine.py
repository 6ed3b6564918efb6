"""What this machine offers a worker: GPU presence and CPU cores."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

_HIDDEN = {"", "-1", "none", "void", "nodevfiles"}


def detect_gpu(environ: Mapping[str, str] | None = None) -> bool:
    """True when an NVIDIA GPU is usable here.

    ``CUDA_VISIBLE_DEVICES`` set to nothing (or ``-1``) hides every GPU, as
    CUDA itself reads it; otherwise ``nvidia-smi -L`` on PATH must list at
    least one GPU. A broken or hanging ``nvidia-smi`` means no GPU.
    """
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip().lower() in _HIDDEN:
        return False
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if smi is None:
        return False
    try:
        listing = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU ") for line in listing.splitlines())


def cpu_cores() -> int:
    """Cores this process may run on (affinity-aware where the OS says)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
