"""Real SGLang servers for the GPU tests, and the load that makes the gate switch."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmark.servers.endpoints import gate_snapshot, healthy, http_json
from benchmark.servers.launch import stop

REPO = Path(__file__).resolve().parents[2]
SHAPE = os.environ.get("SPECGATE_GPU_SHAPE", "1b")
THRESHOLD = 8
# The KV-probe pair's draft and target read their KV caches this many tokens back
# (add_kv_probe in benchmark/pairs/weights.py): fewer than the tokens a burst keeps the gate off,
# more than the 10 steps a re-enable may take.
KV_PROBE_OFFSET = 16
BURST_GAP_S = 0.5
SPEC_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
# Tree drafting as SGLang picks it for a Llama target (speculative_hook.py:795-804): topk 4, 8 draft tokens.
TREE_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
              "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
# A backend the fast off path runs on (one_token_decode.DECODE_PATHS); the kit has
# no grammar backends and no FA3 (shared/gpu/README.md) unless it carries the pair's FA3 kernels
# (benchmark/fa3_kernels.py), and FlashInfer's kernels build only with its vendored CCCL
# (benchmark/results/2026-12-02-flashinfer-jit-on-the-kit) unless the kit carries them
# (benchmark/flashinfer_kernels.py).
ATTENTION_BACKEND = os.environ.get("SPECGATE_GPU_ATTENTION_BACKEND", "triton")
COMMON_FLAGS = ["--attention-backend", ATTENTION_BACKEND, "--sampling-backend", "pytorch",
                "--grammar-backend", "none", "--max-running-requests", "64",
                "--cuda-graph-max-bs", "64",
                # The gated server stays up while plain and spec run beside it on one GPU;
                # lower it to share the GPU with another job (a soak, say).
                "--mem-fraction-static", os.environ.get("SPECGATE_GPU_MEM_FRACTION", "0.4")]


class Server:
    def __init__(self, name: str, argv: list[str], port: int, log_dir: Path, tp: int = 1,
                 env: dict[str, str] | None = None):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log_dir / f"server-{name}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", *argv, *COMMON_FLAGS,
             "--tp-size", str(tp), "--host", "127.0.0.1", "--port", str(port)],
            env={**os.environ, **(env or {})},
            stdout=self.log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True,  # stop() signals the whole group (schedulers included)
        )
        deadline = time.monotonic() + 600
        while not healthy(self.url):
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {name} exited:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"server {name} did not become healthy")
            time.sleep(2)

    def get(self, path: str) -> str:
        return urllib.request.urlopen(self.url + path, timeout=60).read().decode()

    def generate(self, input_ids: list[int], **sampling) -> dict:
        return http_json(self.url + "/generate",
                               {"input_ids": input_ids, "sampling_params": sampling}, timeout=600)

    def gate_state(self) -> dict | None:
        return gate_snapshot(self.url)

    def stop(self) -> None:
        stop(self.proc, self.url)  # whole process group, then waits for the port


def ramping_load(server: Server, prompts: list[list[int]], long_tokens: int, short_tokens: int,
                 bursts: int, **sampling) -> list[dict]:
    """Four long requests run while bursts of short ones push the decode batch above the
    threshold and drain again, so the long requests live through on->off->on switches.

    Raises if a long request ended before the last burst drained: the load then never
    crossed back under the threshold with requests alive, and would prove nothing."""
    long_prompts, short_prompts = prompts[:4], prompts[4:]
    per_burst = max(1, len(short_prompts) // bursts)
    with ThreadPoolExecutor(max_workers=4 + per_burst) as pool:
        longs = [pool.submit(server.generate, p, max_new_tokens=long_tokens, **sampling)
                 for p in long_prompts]
        shorts = []
        for b in range(bursts):
            time.sleep(BURST_GAP_S)  # the batch stays at 4 for a while: the gate turns back on
            batch = short_prompts[b * per_burst:(b + 1) * per_burst]
            futures = [pool.submit(server.generate, p, max_new_tokens=short_tokens, **sampling)
                       for p in batch]
            shorts += [f.result() for f in futures]  # drain: the batch falls back to 4
        time.sleep(BURST_GAP_S)
        if any(f.done() for f in longs):
            raise RuntimeError(f"a {long_tokens}-token request finished before the last of {bursts} "
                               "bursts drained; raise long_tokens for this GPU and model")
        return [f.result() for f in longs] + shorts
