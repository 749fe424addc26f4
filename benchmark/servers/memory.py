"""A server's memory, where the soak samples it: the GPUs' used memory and the server's share of
it (nvidia-smi), and the resident memory of the server's process tree."""

from __future__ import annotations

from contextlib import suppress
from typing import Optional
from urllib.parse import urlparse

import psutil

from benchmark.servers.machine import nvidia_smi

def gpu_memory_mib() -> Optional[list[int]]:
    """Used memory of every GPU nvidia-smi lists (MiB), whoever uses it."""
    rows = nvidia_smi("--query-gpu=memory.used")
    return None if rows is None else [int(row[0]) for row in rows]


def server_gpu_memory_mib(pids: set[int]) -> Optional[int]:
    """GPU memory of these processes (MiB), so that other tenants of the GPUs do not count;
    None where nvidia-smi shows none of them (in a container it may list host PIDs)."""
    rows = nvidia_smi("--query-compute-apps=pid,used_memory") or []
    used = [int(mib) for pid, mib in rows if int(pid) in pids]
    return sum(used) if used else None


def process_tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants (SGLang's scheduler and detokenizer are children of
    the launcher); empty once the process is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss_mib(procs: list[psutil.Process]) -> Optional[float]:
    """Resident memory of these processes; None when there are none."""
    if not procs:
        return None
    total = 0
    for proc in procs:
        with suppress(psutil.Error):  # a child that exited since it was listed
            total += proc.memory_info().rss
    return total / 2**20


def listening_pid(url: str) -> Optional[int]:
    """The process listening on the URL's port, where psutil may see it (same user or root)."""
    port = urlparse(url).port
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return None
    return next((c.pid for c in conns
                 if c.pid and c.status == psutil.CONN_LISTEN and c.laddr.port == port), None)
