"""A launched SGLang server's processes, how busy each kept its busiest thread over a level,
and the machine's CPU meanwhile.

``sglang.launch_server`` runs the HTTP server and the tokenizer manager in the launched process.
It starts the schedulers and the detokenizer as its children, each titled by setproctitle
(managers/scheduler.py:4859, detokenizer_manager.py:521). Each of them is one Python event
loop. A loop that kept its thread near 1.0 (a whole core) over a level is where requests or
outputs queued.

Why measure it: a server's time to first token can grow while its scheduler's own stages do
not move, and then one of these loops holds the time. Reading CPU times stops no process, unlike
py-spy, so every measured level can carry it.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
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
# wait on the GPU, so its share cannot tell a slow host. A busier machine, CPU time taken by the
# hypervisor (steal) or the server's own other threads says why one server's host ran slower
# than another's, for every level and without a profiler.
MACHINE_IDLE = ("idle", "iowait")
MACHINE_GUEST = ("guest", "guest_nice")  # Linux counts them in user and nice already
MACHINE_KEYS = ("cores_busy", "steal_pct", "scheduler_rest")  # machine_share's


def machine_cpu_times(per_cpu: bool = False):
    """The machine's CPU times so far, all cores together or a list of each one's."""
    return psutil.cpu_times(percpu=per_cpu)


def split_cpu_time(before, after) -> tuple[float, float, float]:
    """CPU seconds between two reads of CPU times (``machine_cpu_times``, all cores or one):
    busy, stolen by the hypervisor (0 where the kernel counts none), and in all."""
    spent = {name: getattr(after, name) - getattr(before, name) for name in after._fields
             if name not in MACHINE_GUEST}
    total = sum(spent.values())
    steal = spent.get("steal", 0.0)
    idle = sum(spent.get(name, 0.0) for name in MACHINE_IDLE)
    return total - idle - steal, steal, total


def machine_share(before, after, threads_before: ThreadTimes, threads_after: ThreadTimes,
                  seconds: float) -> dict[str, float]:
    """Over a level: the cores the whole machine kept busy (the client's included), the share of
    its CPU time the hypervisor gave elsewhere (steal, in percent; 0 where the kernel counts
    none), and the cores the scheduler's threads other than its busiest kept busy."""
    busy, steal, total = split_cpu_time(before, after)
    if seconds <= 0 or total <= 0:
        return {}
    scheduler = spent_by_thread(threads_before, threads_after).get("scheduler", [])
    return {"cores_busy": round(busy / seconds, 2),
            "steal_pct": round(100 * steal / total, 2),
            "scheduler_rest": round(sum(scheduler[1:]) / seconds, 3)}


# Why placement too: a server's host can run slower by its start order alone, on a machine whose
# busy cores and steal do not change. A scheduler thread sharing its core's other hardware thread
# with a busy one (the client, the tokenizer) or running away from its memory's NUMA node would do
# that, and it is settled per start.
PLACEMENT_KEYS = ("scheduler_cpus", "sibling_busy", "numa_nodes")  # placement's
PLACEMENT_SAMPLE_S = 0.5
SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")


def cpu_list(text: str) -> list[int]:
    """The CPUs of a sysfs list such as "0-3,8,10-11"."""
    cpus = []
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus += range(int(first), int(last or first) + 1)
    return cpus


def smt_siblings(sys_cpu: Path = SYS_CPU) -> dict[int, list[int]]:
    """CPU -> the other hardware threads of its core (none without SMT)."""
    siblings = {}
    for path in sys_cpu.glob("cpu[0-9]*/topology/thread_siblings_list"):
        cpu = int(path.parent.parent.name[3:])
        siblings[cpu] = [other for other in cpu_list(path.read_text()) if other != cpu]
    return siblings


def numa_node_count(sys_node: Path = SYS_NODE) -> int:
    return max(len(list(sys_node.glob("node[0-9]*"))), 1)


def thread_cpu(pid: int, tid: int) -> Optional[int]:
    """The CPU a thread last ran on (field 39 of /proc/PID/task/TID/stat), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[36])  # fields from the 3rd on, after the name


@contextlib.contextmanager
def watch_cpu(pid: Optional[int], every_s: float = PLACEMENT_SAMPLE_S):
    """Yields a list that fills, every ``every_s`` while the block runs and once as it ends (a
    block shorter than ``every_s`` is seen too), with the CPU the main thread of process ``pid``
    (a scheduler's event loop) last ran on."""
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        cpu = thread_cpu(pid, pid)
        if cpu is not None:
            seen.append(cpu)

    def sample_until_stopped() -> None:
        while not stop.wait(every_s):
            sample()

    sampler = threading.Thread(target=sample_until_stopped, daemon=True) if pid else None
    if sampler:
        sampler.start()
    try:
        yield seen
    finally:
        stop.set()
        if sampler:
            sampler.join()
            sample()


def busy_per_cpu(before, after) -> list[float]:
    """Per CPU, the share of its time between two ``machine_cpu_times(per_cpu=True)`` reads
    that it ran something (steal and idle apart)."""
    return [busy / total if total > 0 else 0.0 for busy, _, total in map(split_cpu_time, before, after)]


def placement(per_cpu_before, per_cpu_after, scheduler_cpus: list[int], siblings: dict[int, list[int]],
              numa_nodes: int) -> dict:
    """Over a level: how many CPUs the scheduler's event loop was seen on; how busy the other
    hardware threads of its core were, each sample's busiest, averaged over the samples (absent
    without SMT); and the machine's NUMA nodes."""
    if not scheduler_cpus:
        return {}
    busy = busy_per_cpu(per_cpu_before, per_cpu_after)
    shared = [max(busy[s] for s in siblings[cpu]) for cpu in scheduler_cpus if siblings.get(cpu)]
    return {"scheduler_cpus": len(set(scheduler_cpus)),
            **({"sibling_busy": round(sum(shared) / len(shared), 2)} if shared else {}),
            "numa_nodes": numa_nodes}
