"""A run's results directory: every command goes to command.txt before it runs, each level's
gate counters to gate.jsonl, and what failed to ``failures``."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from benchmark.servers import machine
from benchmark.servers.config import ServerConfig
from benchmark.servers.endpoints import gate_delta

RESULTS = Path(__file__).resolve().parents[1] / "results"


class Run:
    """A results directory: every command goes to command.txt before it runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir: Path = args.run_dir
        self.logs = self.dir / "logs"
        self.work = Path(tempfile.gettempdir()) / f"specgate-sweep-{self.dir.name}"
        self.failures: list[str] = []
        # The servers ``server()`` is running, by configuration name, for callers that watch
        # them (soak.py, --cpu-profile-level).
        self.server_procs: dict[str, subprocess.Popen] = {}

    @classmethod
    def begin(cls, args: argparse.Namespace, argv: list[str]) -> "Run":
        """A script's run: its logs folder made (not in a dry run) and its invocation noted."""
        run = cls(args)
        if not args.dry_run:
            run.logs.mkdir(parents=True, exist_ok=True)
        run.note_invocation(argv)
        return run

    def note_invocation(self, argv: list[str]) -> None:
        """When, where and how the script was started: the head of command.txt."""
        self.note(f"# {datetime.datetime.now().isoformat(timespec='seconds')} in {os.getcwd()}")
        self.note(machine.describe())
        self.note(shlex.join([sys.executable, sys.argv[0], *argv]))

    def note(self, text: str) -> None:
        print(text, flush=True)
        if not self.args.dry_run:
            with open(self.dir / "command.txt", "a") as f:
                f.write(text + "\n")

    def record(self, cmd: list[str]) -> None:
        self.note(shlex.join(cmd))

    def fail(self, what: str) -> None:
        self.failures.append(what)
        self.note(f"# FAILED: {what}")

    def server_log(self, config: ServerConfig) -> Path:
        return self.logs / f"server-{config.name}.log"

    def server_failed(self, config: ServerConfig) -> None:
        self.fail(f"server {config.name} (see {self.server_log(config).relative_to(self.dir)})")

    def gate_row(self, tag: str, config: str, before: Optional[dict], after: Optional[dict],
                 **extra: object) -> None:
        row = {"tag": tag, "config": config, **extra, "before": before, "after": after,
               "delta": gate_delta(before, after)}
        with open(self.dir / "gate.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


def dated_run_dir(name: str) -> Path:
    return RESULTS / f"{datetime.date.today().isoformat()}-{name}"
