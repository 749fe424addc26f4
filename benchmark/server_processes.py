"""A launched SGLang server's processes, how busy each kept its busiest thread over a level,
and the machine's CPU meanwhile.

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


def spent_by_thread(before: ThreadTimes, after: ThreadTimes) -> dict[str, list[float]]:
    """Role -> each thread's CPU seconds between two reads, busiest first. A thread started
    between the reads counts from zero."""
    spent = {}
    for role, threads in after.items():
        earlier = before.get(role, {})
        spent[role] = sorted((total - earlier.get(tid, 0.0) for tid, total in threads.items()), reverse=True)
    return spent


def busiest_thread_share(before: ThreadTimes, after: ThreadTimes, seconds: float) -> dict[str, float]:
    """Role -> the CPU seconds its busiest thread spent between two reads, per second of wall
    time (1.0: a whole core)."""
    if seconds <= 0:
        return {}
    return {role: round(spent[0] / seconds, 3)
            for role, spent in spent_by_thread(before, after).items() if spent}


# Why the machine's CPU too: the scheduler's thread reads busy whether it computes or spins in a
# wait on the GPU, so its share cannot tell a slow host. In one FlashInfer A/B the gate's server
# ran every host call 1.3-1.6x as long as plain's did
# (benchmark/results/2026-12-03-flashinfer-c128-traced): a busier machine, CPU time taken by the
# hypervisor (steal) or the server's own other threads would say why, for every level and
# without a profiler.
MACHINE_IDLE = ("idle", "iowait")
MACHINE_GUEST = ("guest", "guest_nice")  # Linux counts them in user and nice already
MACHINE_KEYS = ("cores_busy", "steal_pct", "scheduler_rest")  # machine_share's


def machine_cpu_times():
    """The machine's CPU times so far, all cores together."""
    return psutil.cpu_times()


def machine_share(before, after, threads_before: ThreadTimes, threads_after: ThreadTimes,
                  seconds: float) -> dict[str, float]:
    """Over a level: the cores the whole machine kept busy (the client's included), the share of
    its CPU time the hypervisor gave elsewhere (steal, in percent; 0 where the kernel counts
    none), and the cores the scheduler's threads other than its busiest kept busy."""
    spent = {name: getattr(after, name) - getattr(before, name) for name in after._fields
             if name not in MACHINE_GUEST}
    total = sum(spent.values())
    if seconds <= 0 or total <= 0:
        return {}
    steal = spent.get("steal", 0.0)
    idle = sum(spent.get(name, 0.0) for name in MACHINE_IDLE)
    scheduler = spent_by_thread(threads_before, threads_after).get("scheduler", [])
    return {"cores_busy": round((total - idle - steal) / seconds, 2),
            "steal_pct": round(100 * steal / total, 2),
            "scheduler_rest": round(sum(scheduler[1:]) / seconds, 3)}
