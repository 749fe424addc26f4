"""sweep.py --cpu-profile-level: py-spy on each server's scheduler through one more closed level.

Real processes stand in for what needs a GPU: a "launcher" whose children take the titles
SGLang's processes take (setproctitle, as managers/scheduler.py:4859 does), and a stand-in
``py-spy`` on PATH that records which PID it was given and writes raw samples when interrupted,
as py-spy does (the real one needs ptrace rights and a Python process to trace).
"""

from __future__ import annotations

import collections
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchmark.client import scheduler_sampling, sweep
from benchmark.servers import config, processes, record

# Prints its children's PIDs once every child has set its title.
LAUNCHER = """
import multiprocessing, sys, time
import setproctitle

def child(title, titled):
    setproctitle.setproctitle(title)
    titled.set()
    time.sleep(600)

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")  # as SGLang starts its scheduler
    titles = ["sglang::detokenizer", "sglang::scheduler_TP1", "sglang::scheduler_TP0"]
    titled = [multiprocessing.Event() for _ in titles]
    procs = [multiprocessing.Process(target=child, args=(t, e)) for t, e in zip(titles, titled)]
    for p in procs:
        p.start()
    for e in titled:
        e.wait()
    print(*(p.pid for p in procs), flush=True)
    time.sleep(600)
"""

# Writes the PID it sampled into the raw samples, so the test sees which process it was given;
# says it is listening for SIGINT through the FIFO beside its samples that the test reads.
PY_SPY = """#!{python}
import signal, sys
from pathlib import Path
argv = sys.argv
out, pid = Path(argv[argv.index("-o") + 1]), argv[argv.index("-p") + 1]
def interrupted(*_):
    if {writes}:
        out.write_text(f"thread (7): MainThread;event_loop (scheduler.py:1700);run_batch (pid{{pid}}.py:1) 3\\n"
                       f"thread (7): MainThread;event_loop (scheduler.py:1700) 1\\n")
    sys.exit(0)
signal.signal(signal.SIGINT, interrupted)
Path(str(out) + ".ready").write_text("listening")
while True:
    signal.pause()
"""


@pytest.fixture
def launcher(tmp_path):
    """A stand-in server process with its children titled; yields (process, [detok, TP1, TP0] PIDs)."""
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        yield proc, [int(p) for p in proc.stdout.readline().split()]  # once every child is titled
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stand_in_py_spy(tmp_path: Path, monkeypatch, writes: bool = True) -> None:
    """The stand-in ``py-spy`` first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "py-spy"
    script.write_text(PY_SPY.format(python=sys.executable, writes=writes))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def sampling_run(tmp_path: Path, monkeypatch, writes: bool = True) -> record.Run:
    stand_in_py_spy(tmp_path, monkeypatch, writes)
    run = record.Run(sweep.parse_args(["--model-path", "/m/target", "--configs", "plain",
                                      "--concurrency", "16", "--scenarios", "closed",
                                      "--cpu-profile-level", "16", "--run-dir", str(tmp_path / "run")]))
    run.logs.mkdir(parents=True)
    os.mkfifo(run.dir / "pyspy-plain-c16.txt.ready")  # where the stand-in says it listens
    return run


def level(sampling: scheduler_sampling.SchedulerSampling) -> None:
    """The closed level the sampling wraps: it lasts until the stand-in py-spy says, through its
    FIFO, that it listens for the SIGINT that ends it."""
    fd = os.open(str(sampling.samples) + ".ready", os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(60_000), "the stand-in py-spy never said it listens"  # a bound, not a pace
        assert os.read(fd, 64) == b"listening"
    finally:
        os.close(fd)


def test_the_scheduler_is_the_first_ranks_scheduler_under_the_server(launcher) -> None:
    proc, (detokenizer, tp1, tp0) = launcher
    assert processes.scheduler_pid(proc.pid) == tp0
    assert processes.scheduler_pid(tp0) is None  # no scheduler under a scheduler
    assert processes.scheduler_pid(2**22 + 12345) is None  # no such process


def test_a_servers_processes_by_role(launcher) -> None:
    proc, (detokenizer, _, tp0) = launcher
    pids = processes.server_processes(proc.pid)
    assert pids == {"tokenizer": proc.pid, "scheduler": tp0, "detokenizer": detokenizer}
    times = processes.thread_cpu_seconds(pids)
    assert set(times) == set(pids) and all(times[role] for role in pids)  # each has its threads
    assert processes.thread_cpu_seconds({"scheduler": 2**22 + 12345}) == {}  # gone: left out


def test_the_busiest_threads_share_of_a_level() -> None:
    before = {"scheduler": {1: 10.0, 2: 3.0}, "detokenizer": {5: 1.0}}
    after = {"scheduler": {1: 18.0, 2: 9.0, 3: 1.0}, "detokenizer": {5: 3.0}, "tokenizer": {9: 4.0}}
    # Over 10 s: the scheduler's thread 1 spent 8 s; the tokenizer was first read after the level.
    assert processes.busiest_thread_share(before, after, 10.0) == {
        "scheduler": 0.8, "detokenizer": 0.2, "tokenizer": 0.4}


def test_the_machines_cpu_over_a_level() -> None:
    fields = "user nice system idle iowait irq softirq steal guest guest_nice"
    times = collections.namedtuple("scputimes", fields)
    before = times(100.0, 0.0, 20.0, 500.0, 5.0, 0.0, 1.0, 4.0, 10.0, 0.0)
    # Over 10 s on 16 cores (160 CPU seconds): 30 user (the 10 guest within), 10 system,
    # 2 softirq, 8 stolen, 110 idle or waiting on I/O.
    after = times(130.0, 0.0, 30.0, 608.0, 7.0, 0.0, 3.0, 12.0, 20.0, 0.0)
    threads_before = {"scheduler": {1: 10.0, 2: 1.0, 3: 0.5}}
    threads_after = {"scheduler": {1: 20.0, 2: 3.0, 3: 1.5, 4: 0.5}}
    assert processes.machine_share(before, after, threads_before, threads_after, 10.0) == {
        "cores_busy": 4.2, "steal_pct": 5.0, "scheduler_rest": 0.35}
    assert processes.machine_share(before, before, {}, {}, 10.0) == {}  # no time passed
    first = processes.machine_cpu_times()  # this machine's, whatever fields its OS has
    later = type(first)(*(seconds + 1.0 for seconds in first))  # a second more of each
    assert set(processes.machine_share(first, later, {}, {}, 0.2)) == set(processes.MACHINE_KEYS)


def test_cpu_topology_from_sysfs(tmp_path) -> None:
    assert processes.cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    for cpu, siblings in ((0, "0,2"), (2, "0,2"), (1, "1"), (3, "3")):  # one core with SMT
        topology = tmp_path / "cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(siblings + "\n")
    (tmp_path / "cpu" / "cpufreq").mkdir()  # not a CPU
    assert processes.smt_siblings(tmp_path / "cpu") == {0: [2], 2: [0], 1: [], 3: []}
    for node in ("node0", "node1", "possible"):
        (tmp_path / "node" / node).mkdir(parents=True)
    assert processes.numa_node_count(tmp_path / "node") == 2
    assert processes.numa_node_count(tmp_path / "none") == 1  # no NUMA in sysfs: one node
    assert isinstance(processes.smt_siblings(), dict)  # this machine's, read alike


def test_watching_which_cpu_a_process_runs_on() -> None:
    cpus = set(range(psutil.cpu_count()))
    assert processes.thread_cpu(os.getpid(), os.getpid()) in cpus
    assert processes.thread_cpu(os.getpid(), 2**22 + 1) is None  # no such thread
    with processes.watch_cpu(os.getpid(), every_s=3600) as seen:
        pass  # a block shorter than every_s: seen once, as it ends
    assert len(seen) == 1 and seen[0] in cpus
    with processes.watch_cpu(None, every_s=3600) as nothing:
        pass
    assert nothing == []


def test_where_the_scheduler_ran_over_a_level() -> None:
    times = collections.namedtuple("scputimes", "user system idle steal")
    before = [times(0.0, 0.0, 0.0, 0.0)] * 4
    # Over the level: CPU 0 busy throughout, CPU 2 (its core's other thread) 60 %, CPU 1 idle,
    # CPU 3 half stolen and half idle.
    after = [times(9.0, 1.0, 0.0, 0.0), times(0.0, 0.0, 10.0, 0.0), times(5.0, 1.0, 4.0, 0.0),
             times(0.0, 0.0, 5.0, 5.0)]
    siblings = {0: [2], 2: [0], 1: [], 3: []}
    # The scheduler seen on CPU 0 three times and CPU 1 once: its sibling's 60 % over the
    # samples on a core with one.
    assert processes.placement(before, after, [0, 0, 1, 0], siblings, 1) == {
        "scheduler_cpus": 2, "sibling_busy": 0.6, "numa_nodes": 1}
    assert processes.placement(before, after, [1, 3], siblings, 2) == {"scheduler_cpus": 2, "numa_nodes": 2}
    assert processes.placement(before, after, [], siblings, 1) == {}  # never seen
    assert set(processes.placement(before, after, [0], siblings, 1)) == set(processes.PLACEMENT_KEYS)


def test_a_cpu_profiled_level_samples_its_servers_scheduler_and_tables_it(tmp_path, monkeypatch, launcher) -> None:
    proc, (_, _, tp0) = launcher
    run = sampling_run(tmp_path, monkeypatch)
    plain = config.ServerConfig("plain", ())
    run.server_procs[plain.name] = proc
    with scheduler_sampling.SchedulerSampling(run, plain, 16) as sampling:
        level(sampling)
    assert run.failures == []
    assert f"run_batch (pid{tp0}.py:1) 3" in (run.dir / "pyspy-plain-c16.txt").read_text()
    table = (run.dir / "cpu-profile-c16.md").read_text()
    assert f"| `run_batch (pid{tp0}.py)` | 75.0 / 75.0 |" in table
    assert "pyspy-plain-c16: 4 samples" in table
    command = (run.dir / "command.txt").read_text()
    assert f"py-spy record --threads --idle -f raw -p {tp0} -o {run.dir / 'pyspy-plain-c16.txt'}" in command


def test_a_server_without_a_scheduler_fails_the_sweep_and_samples_nothing(tmp_path, monkeypatch) -> None:
    run = sampling_run(tmp_path, monkeypatch)
    with scheduler_sampling.SchedulerSampling(run, config.ServerConfig("plain", ()), 16) as sampling:
        assert sampling.proc is None
    assert run.failures == ["plain CPU profile: no sglang::scheduler process under the server"]


def test_a_py_spy_that_wrote_nothing_fails_the_sweep(tmp_path, monkeypatch, launcher) -> None:
    run = sampling_run(tmp_path, monkeypatch, writes=False)
    run.server_procs["plain"] = launcher[0]
    with scheduler_sampling.SchedulerSampling(run, config.ServerConfig("plain", ()), 16) as sampling:
        level(sampling)
    assert run.failures == ["plain CPU profile: py-spy wrote no samples (exit 0; see logs/py-spy-plain-c16.log)"]


def test_without_py_spy_on_path_the_flag_names_the_fix(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    argv = ["--model-path", "/m/target", "--configs", "plain", "--concurrency", "16",
            "--scenarios", "closed", "--cpu-profile-level", "16"]
    with pytest.raises(SystemExit) as exit_info:
        sweep.parse_args(argv)
    assert exit_info.value.code == 2
    assert ("--cpu-profile-level samples each scheduler with py-spy, which is not on PATH: "
            "pip install py-spy" in capsys.readouterr().err)
    assert sweep.parse_args([*argv, "--dry-run"]).py_spy == "py-spy"  # a dry run prints it anyway


def test_the_level_must_be_a_closed_level_of_the_sweep(tmp_path, monkeypatch, capsys) -> None:
    stand_in_py_spy(tmp_path, monkeypatch)
    with pytest.raises(SystemExit):
        sweep.parse_args(["--model-path", "/m/target", "--configs", "plain", "--concurrency", "16,32",
                          "--scenarios", "closed", "--cpu-profile-level", "8"])
    assert ("--cpu-profile-level 8 samples a closed-loop level: give one of --concurrency 16,32"
            in capsys.readouterr().err)


def test_interleaved_servers_each_get_their_profiled_levels_after_the_measured_ones(tmp_path, capsys) -> None:
    sweep.main(["--model-path", "/m/target", "--draft-model-path", "/m/draft", "--run-dir",
                str(tmp_path / "run"), "--interleave", "--configs", "gate,plain", "--thresholds", "9",
                "--scenarios", "closed", "--concurrency", "128", "--repeat-levels", "2",
                "--profile-level", "128", "--cpu-profile-level", "128", "--dry-run"])
    out = capsys.readouterr().out.splitlines()
    tags = [line.split("--tag ")[1].split()[0] for line in out if "sglang.benchmark.serving" in line]
    assert tags == ["gate-9,c=128,rep=1", "plain,c=128,rep=1", "plain,c=128,rep=2",
                    "gate-9,c=128,rep=2", "gate-9,c=128,profiled", "plain,c=128,profiled",
                    "gate-9,c=128,cpu-profiled", "plain,c=128,cpu-profiled"]
    sampled = [line for line in out if line.startswith("# py-spy samples")]
    assert [line.split("-o ")[1] for line in sampled] == [
        str(tmp_path / "run" / "pyspy-gate-9-c128.txt"), str(tmp_path / "run" / "pyspy-plain-c128.txt")]
    bench = [line for line in out if "cpu-profiled" in line and "sglang.benchmark.serving" in line]
    assert all(str(tmp_path / "run" / "raw.jsonl") not in line for line in bench)
