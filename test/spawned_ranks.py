"""Tensor-parallel ranks on the CPU: spawned processes joined by a gloo process group, as
SGLang's ranks are by theirs, for the tests that every rank decides alike."""

from __future__ import annotations

import multiprocessing
import socket


def run_ranks(target, world_size: int = 2, timeout_s: float = 120) -> dict[int, object]:
    """Run ``target(rank, world_size, port, results)`` in ``world_size`` spawned processes; each
    joins the group with ``join_group(rank, world_size, port)`` and puts ``(rank, value)`` on
    ``results``. Returns the values by rank; fails if a rank exits with an error."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    with socket.socket() as s:  # a free port for gloo's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = [ctx.Process(target=target, args=(rank, world_size, port, results)) for rank in range(world_size)]
    for proc in ranks:
        proc.start()
    try:
        got = dict(results.get(timeout=timeout_s) for _ in ranks)
    finally:
        for proc in ranks:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    assert [proc.exitcode for proc in ranks] == [0] * world_size
    return got


def join_group(rank: int, world_size: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)


def broadcast_from_rank0(text: str) -> str:
    """What GroupCoordinator.broadcast_object(text, src=0) does across the ranks' CPU group."""
    import torch.distributed as dist

    box = [text]
    dist.broadcast_object_list(box, src=0)
    return box[0]
