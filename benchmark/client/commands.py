"""Command lines of SGLang's own benchmark client, ``python -m sglang.benchmark.serving``, as the
sweep runs it: one per closed level, bursty phase or profile load."""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from benchmark.client import serving_session
from benchmark.servers.record import Run


def level_prompts(concurrency: int, per_concurrency: int, minimum: int) -> int:
    # Several waves of requests per level, so ramp-up and drain are a small part of it.
    return max(per_concurrency * concurrency, minimum)


def bench_command(args: argparse.Namespace, *, url: str, tag: str, dataset: Path, output_file: Path,
                  num_prompts: int, warmup: int, concurrency: Optional[int] = None,
                  rate: float = math.inf, seed: int = 1, details: bool = False,
                  flush_cache: bool = False, output_len: Optional[int] = None) -> list[str]:
    cmd = [
        sys.executable, "-m", serving_session.PROGRAM,
        "--backend", "sglang", "--base-url", url,
        "--tokenizer", args.tokenizer or args.model_path,
        "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--num-prompts", str(num_prompts),
        "--request-rate", "inf" if math.isinf(rate) else f"{rate:g}",
        "--warmup-requests", str(warmup),
        "--seed", str(seed), "--disable-tqdm",
        "--output-file", str(output_file), "--tag", tag,
    ]
    output_len = output_len or (None if args.output_len_spread else args.output_len)
    if output_len:  # else each prompt's own answer length (the dataset's assistant turn)
        cmd += ["--sharegpt-output-len", str(output_len)]
    if concurrency is not None:
        cmd += ["--max-concurrency", str(concurrency)]
    if details:
        cmd.append("--output-details")  # per-request TTFT/ITL, for goodput and p99 TPOT
    if flush_cache:
        # Every level samples the same prompts (same seed): without a flush, later levels
        # would hit the prefix cache that earlier ones filled.
        cmd.append("--flush-cache")
    return cmd


def client_env() -> dict[str, str]:
    # SGLANG_IS_IN_CI makes the client flush the cache after warm-up, which fails while
    # another client's requests are in flight (overlapping bursty phases).
    return {k: v for k, v in os.environ.items() if k != "SGLANG_IS_IN_CI"}


def run_bench(run: Run, cmd: list[str], log_name: str) -> subprocess.Popen:
    run.record(cmd)
    with open(run.logs / log_name, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=client_env())
