"""GPU fixtures: a generated target/draft pair of known agreement and real SGLang servers.

Set SPECGATE_GPU_SHAPE (tiny, 1b, 8b) to pick the model size; the environment must already
make `import sglang` work (on the project's H200: the kit, PYTHONPATH=/tmp/site).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servers import REPO, SHAPE, SPEC_FLAGS, Server


@pytest.fixture(scope="session")
def model_pair(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pair")
    subprocess.run([sys.executable, str(REPO / "benchmark" / "model_pair.py"), str(root),
                    "--shape", SHAPE, "--accept-length", "2.2", "--device", "cuda"], check=True)
    return root


@pytest.fixture(scope="session")
def start_server(model_pair, tmp_path_factory):
    log_dir = Path(os.environ.get("SPECGATE_GPU_LOGS", tmp_path_factory.mktemp("logs")))
    servers = []

    def start(name: str, *, spec: bool, extra: tuple[str, ...] = (), tp: int = 1) -> Server:
        argv = ["--model-path", str(model_pair / "target")]
        if spec:
            argv += SPEC_FLAGS + ["--speculative-draft-model-path", str(model_pair / "draft")]
        server = Server(name, argv + list(extra), 30100 + len(servers), log_dir, tp)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


