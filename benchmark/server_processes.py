"""A launched SGLang server's processes, and how busy each kept its busiest thread over a level.

``sglang.launch_server`` runs the HTTP server and the tokenizer manager in the launched process.
It starts the schedulers and the detokenizer as its children, each titled by setproctitle
(managers/scheduler.py:4859, detokenizer_manager.py:521). Each of them is one Python event
loop. A loop that kept its thread near 1.0 (a whole core) over a level is where requests or
outputs queued.

Why measure it: on one host, the gated server's time to first token doubled while its
scheduler's own stages did not move
(benchmark/results/2026-12-01-offcost-8b-2.2-c128-plain-decode). Reading CPU times stops no
process, unlike py-spy, so every measured level can carry it.
"""

from __future__ import annotations

from typing import Optional

import psutil

TOKENIZER = "tokenizer"  # the launched process: HTTP server and tokenizer manager
# Child titles by role, a rank suffix under parallelism ("sglang::scheduler_TP0").
TITLES = {"scheduler": "sglang::scheduler", "detokenizer": "sglang::detokenizer"}
ROLES = (TOKENIZER, *TITLES)

ThreadTimes = dict[str, dict[int, float]]  # role -> thread id -> CPU seconds so far


def server_processes(server_pid: int) -> dict[str, int]:
    """Role -> PID: the launched process, and among its children by title the first rank's
    scheduler and the detokenizer. Empty when no such process exists."""
    try:
        children = psutil.Process(server_pid).children(recursive=True)
    except psutil.Error:
        return {}
    titled = []
    for child in children:
        try:
            titled.append((" ".join(child.cmdline()), child.pid))
        except psutil.Error:  # exited since it was listed
            continue
    found = {TOKENIZER: server_pid}
    for role, prefix in TITLES.items():
        matches = sorted(entry for entry in titled if entry[0].startswith(prefix))
        if matches:
            found[role] = matches[0][1]
    return found


def scheduler_pid(server_pid: int) -> Optional[int]:
    return server_processes(server_pid).get("scheduler")


def thread_cpu_seconds(pids: dict[str, int]) -> ThreadTimes:
    """Each thread's user + system CPU seconds so far, by role; a role whose process is gone is
    left out."""
    times: ThreadTimes = {}
    for role, pid in pids.items():
        try:
            times[role] = {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
        except psutil.Error:
            continue
    return times


def busiest_thread_share(before: ThreadTimes, after: ThreadTimes, seconds: float) -> dict[str, float]:
    """Role -> the CPU seconds its busiest thread spent between two reads, per second of wall
    time (1.0: a whole core). A thread started between the reads counts from zero."""
    shares = {}
    for role, threads in after.items():
        earlier = before.get(role, {})
        spent = [total - earlier.get(tid, 0.0) for tid, total in threads.items()]
        if spent and seconds > 0:
            shares[role] = round(max(spent) / seconds, 3)
    return shares
