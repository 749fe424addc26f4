"""Run Python in a fresh interpreter: SGLang discovers plugins once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_python(args: list[str], env: dict[str, str] | None = None, timeout: int = 180):
    """A fresh interpreter (plugin discovery happens per process)."""
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("SGLANG_SPEC_DISABLE_BATCH_THRESHOLD", "SGLANG_SPEC_GATE_HOST_SEQ_LENS",
                             "SGLANG_SPEC_GATE_FA3_OFF_PATH", "SGLANG_PLUGINS")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=Path(__file__).parent)
