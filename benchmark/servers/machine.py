"""The machine a benchmark runs on, for the head of its command.txt: the same load gives a gated
server a different ratio to a plain one on different hosts of one GPU type, so results must say
which host they came from."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Optional

GPU_FIELDS = "name,uuid,driver_version,clocks.max.sm,power.limit"


def nvidia_smi(query: str, allow_missing: bool = False) -> Optional[list[list[str]]]:
    """Rows of an ``nvidia-smi --query-*`` in CSV; None without nvidia-smi, or on a "[N/A]"
    field unless ``allow_missing``."""
    try:
        out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[field.strip() for field in line.split(",")] for line in out.splitlines() if line.strip()]
    if not allow_missing and any("N/A" in field for row in rows for field in row):
        return None
    return rows


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe() -> str:
    """One comment line: host, CPU and every GPU nvidia-smi lists."""
    gpus = nvidia_smi(f"--query-gpu={GPU_FIELDS}", allow_missing=True)
    gpu_text = "; ".join(
        f"{name} {uuid} (driver {driver}, max SM clock {clock} MHz, power limit {power} W)"
        for name, uuid, driver, clock, power in gpus) if gpus else "no GPU listed by nvidia-smi"
    return f"# machine: {platform.node()}, {os.cpu_count()} x {cpu_model()}, {gpu_text}"
