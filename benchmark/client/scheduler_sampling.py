"""``--cpu-profile-level C``: py-spy samples a server's scheduler through a closed level, and the
servers sampled so far are tabled side by side (``analysis.cpu_profile``)."""

from __future__ import annotations

import signal
import subprocess
from typing import Optional

from benchmark.analysis import cpu_profile
from benchmark.servers import processes
from benchmark.servers.config import ServerConfig
from benchmark.servers.record import Run

CPU_PROFILE_ROWS = 60  # functions in cpu-profile-c<C>.md, by share in the last server's samples


class SchedulerSampling:
    """``--cpu-profile-level C``: py-spy samples the server's scheduler through a whole closed
    level at C (pyspy-<config>-c<C>.txt, raw), and cpu-profile-c<C>.md tables the servers sampled
    so far side by side (cpu_profile.py), the latest last: where each scheduler's time went."""

    def __init__(self, run: Run, config: ServerConfig, c: int) -> None:
        self.run, self.config, self.c = run, config, c
        self.samples = run.dir / f"pyspy-{config.name}-c{c}.txt"
        self.log = f"py-spy-{config.name}-c{c}.log"
        self.proc: Optional[subprocess.Popen] = None

    def command(self, pid: int | str) -> list[str]:
        return cpu_profile.record_command(self.run.args.py_spy, pid, self.samples)

    def __enter__(self) -> "SchedulerSampling":
        server = self.run.server_procs.get(self.config.name)
        pid = processes.scheduler_pid(server.pid) if server else None
        if pid is None:
            self.run.fail(f"{self.config.name} CPU profile: no {processes.TITLES['scheduler']} "
                          f"process under the server")
            return self
        cmd = self.command(pid)
        self.run.record(cmd)
        with open(self.run.logs / self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its samples when interrupted
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if not self.samples.is_file():
            self.run.fail(f"{self.config.name} CPU profile: py-spy wrote no samples (exit {code}; "
                          f"see logs/{self.log})")
            return
        sampled = sorted(self.run.dir.glob(f"pyspy-*-c{self.c}.txt"), key=lambda path: path.stat().st_mtime)
        profiles = {path.stem: cpu_profile.shares(path.read_text()) for path in sampled}
        (self.run.dir / f"cpu-profile-c{self.c}.md").write_text(cpu_profile.tables(profiles, CPU_PROFILE_ROWS))
