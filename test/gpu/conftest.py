"""GPU fixtures: a generated target/draft pair of known agreement and real SGLang servers.

Set SPECGATE_GPU_SHAPE (tiny, 1b, 8b) to pick the model size; the environment must already
make `import sglang` work (on the project's H200: the kit, PYTHONPATH=/tmp/site).
SPECGATE_REQUIRE_GPU=1 (the GPU workflow, gpu_job.sh) makes a host where torch sees no CUDA
device an error: there every test would skip and pytest would pass having run nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmark.pairs.design import Design, make_design
from servers import KV_PROBE_OFFSET, REPO, SHAPE, SPEC_FLAGS, Server

ACCEPT_LENGTH, SEED = 2.2, 0


def write_pair(root: Path, *extra: str) -> Path:
    subprocess.run([sys.executable, str(REPO / "benchmark" / "model_pair.py"), str(root),
                    "--shape", SHAPE, "--accept-length", str(ACCEPT_LENGTH), "--seed", str(SEED),
                    "--device", "cuda", *extra], check=True)
    return root


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SPECGATE_REQUIRE_GPU") == "1" and not torch.cuda.is_available():
        raise pytest.UsageError(
            "SPECGATE_REQUIRE_GPU=1, but torch sees no CUDA device, so every GPU test would skip. "
            "Check nvidia-smi and that the installed torch is a CUDA build.")


@pytest.fixture(scope="session")
def model_pair(tmp_path_factory) -> Path:
    return write_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="session")
def probe_pair(tmp_path_factory) -> Path:
    """The pair with KV probes: the draft's proposals are noise while its KV cache entry
    KV_PROBE_OFFSET tokens back is stale, and the target's output is noise where a forward's
    attention leaves out that entry or the current one (a length planned short) or reads a
    stale one. So every probe test's exact greedy output also checks the target's attention,
    plain steps while off included (on FlashInfer planned from the gate's host lengths)."""
    return write_pair(tmp_path_factory.mktemp("probe-pair"), "--kv-probe-offset", str(KV_PROBE_OFFSET))


@pytest.fixture(scope="session")
def design() -> Design:
    """The pair's language, drawn on the CPU from the seed: what every server must emit greedily."""
    return make_design(SHAPE, ACCEPT_LENGTH, SEED)


@pytest.fixture(scope="session")
def probe_design() -> Design:
    return make_design(SHAPE, ACCEPT_LENGTH, SEED, KV_PROBE_OFFSET)


@pytest.fixture(scope="session")
def servers() -> list[Server]:
    """Every server the tests started; all are stopped at the end (stopping twice is harmless)."""
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def start_server(model_pair, servers, tmp_path_factory):
    log_dir = Path(os.environ.get("SPECGATE_GPU_LOGS", tmp_path_factory.mktemp("logs")))

    def start(name: str, *, spec: bool, extra: tuple[str, ...] = (), tp: int = 1,
              pair: Path | None = None, env: dict[str, str] | None = None,
              drafting: list[str] = SPEC_FLAGS) -> Server:
        """``drafting``: the speculative flags (SPEC_FLAGS' chain, or servers.TREE_FLAGS)."""
        pair = pair or model_pair
        argv = ["--model-path", str(pair / "target")]
        if spec:
            argv += drafting + ["--speculative-draft-model-path", str(pair / "draft")]
        server = Server(name, argv + list(extra), 30100 + len(servers), log_dir, tp, env)
        servers.append(server)
        return server

    return start
