"""Start an SGLang server for a run, wait until it serves, and stop it with all its processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from benchmark.servers.config import ServerConfig, base_url, server_command
from benchmark.servers.endpoints import healthy
from benchmark.servers.record import Run


@contextmanager
def server(run: Run, config: ServerConfig) -> Iterator[bool]:
    """Start the server, yield whether it became healthy, and always stop it."""
    args, url = run.args, base_url(run.args, config)
    cmd = server_command(args, config)
    if args.dry_run:
        run.record(cmd)
        yield True
        return
    if healthy(url):
        raise SystemExit(f"something already serves {url}; stop it or pass --port")
    if config.adaptive_config is not None:
        (run.dir / f"{config.name}.json").write_text(json.dumps(config.adaptive_config) + "\n")
    run.record(cmd)
    with open(run.server_log(config), "ab") as log:
        # A session of its own, so stopping it reaches the scheduler and detokenizer too.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    run.server_procs[config.name] = proc
    try:
        yield wait_for(lambda: healthy(url), proc, timeout=args.server_timeout, poll_s=2)
    finally:
        del run.server_procs[config.name]
        stop(proc, url)


def stop(proc: subprocess.Popen, url: str) -> None:
    """SIGTERM the server's process group; SIGKILL whatever is left after a grace period."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc, signal.SIGKILL)  # a hung launcher, or children that outlived it
    proc.wait()
    wait_for(lambda: not healthy(url), timeout=60, poll_s=1)  # the next server needs the port


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # the whole group has exited


def wait_for(condition: Callable[[], bool], load: Optional[subprocess.Popen] = None, *,
             timeout: float, poll_s: float = 0.5) -> bool:
    """Poll ``condition`` every ``poll_s`` (while ``load`` runs, if given); False on timeout or
    when it ended."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline or (load is not None and load.poll() is not None):
            return False
        time.sleep(poll_s)
    return True
