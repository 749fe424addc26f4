"""Many ``python -m sglang.benchmark.serving`` runs in one client process.

The client's imports (SGLang, torch, transformers) take 12-20 s, longer than a closed-loop level
on a fast server, and a sweep paid them at every level of every server. A session imports the
client once and runs its command-line entry point (``cli_main``, what ``-m`` runs) once per
request, each with its own arguments and log:

    stdin:  {"argv": [serving flags ...], "log": "PATH"}    a line per run
    stdout: {"returncode": N}                                a line per run, once it ended

``Session`` is the sweep's side of it. Runs are sequential; concurrent clients (the bursty
scenario's overlapping phases) still need processes of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Optional

PROGRAM = "sglang.benchmark.serving"


def arguments_of(command: list[str]) -> list[str]:
    """The client's flags in a ``python -m sglang.benchmark.serving FLAGS`` command line."""
    if command[1:3] != ["-m", PROGRAM]:
        raise ValueError(f"not a {PROGRAM} command line: {command[:3]}")
    return command[3:]


def exit_status(code: object) -> int:
    """What a process would exit with after ``SystemExit(code)``."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1  # sys.exit("message") prints it, exits 1


def run_once(argv: list[str], log: Path) -> int:
    """One client run, as ``python -m sglang.benchmark.serving ARGV > LOG 2>&1`` would do it."""
    from sglang.benchmark.serving import cli_main

    with open(log, "a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        sys.argv = [PROGRAM, *argv]
        try:
            cli_main()
        except SystemExit as e:  # argparse errors and the client's own sys.exit(1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            return exit_status(e.code)
        except Exception:  # noqa: BLE001 (the run fails, the session serves the next one)
            traceback.print_exc()
            return 1
    return 0


def serve() -> None:
    # Replies get a copy of stdout of their own, and fd 1 then points at stderr (the session's
    # log): nothing the client or a library writes to stdout can garble them.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    for line in sys.stdin:
        request = json.loads(line)
        code = run_once(request["argv"], Path(request["log"]))
        replies.write(json.dumps({"returncode": code}) + "\n")
        replies.flush()


class Session:
    """A client process that runs one ``sglang.benchmark.serving`` argument list at a time."""

    def __init__(self, log: Path, env: Optional[dict] = None) -> None:
        """``log``: where the session's own output goes (what a run writes outside its log)."""
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, env=env)

    def run(self, argv: list[str], log: Path) -> int:
        """The run's exit status; 1 if the session process is gone."""
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log)}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return 1
        reply = self.proc.stdout.readline()
        return json.loads(reply)["returncode"] if reply else 1

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()
        self.proc.wait()
        self.proc.stdout.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    serve()
