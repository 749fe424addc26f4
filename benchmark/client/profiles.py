"""Torch-profiler traces of a server (SGLang's ``/start_profile``): of a closed level as its load
mixes prefills and decode steps, of C requests decoding at once, and of a wave of C prefills;
each summarized by ``analysis.kernel_profile`` into profile-*.json beside its trace."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from benchmark.analysis import kernel_profile, trace_events
from benchmark.client.commands import bench_command, run_bench
from benchmark.servers.config import ServerConfig, base_url
from benchmark.servers.endpoints import http_request, last_gen_throughput, start_profile
from benchmark.servers.launch import wait_for
from benchmark.servers.record import Run

PROFILE_WAIT_S = 120.0  # for the profile load to reach decode, and for the trace
PREFILL_WAVE_OUTPUT_LEN = 4  # the fewest output tokens sglang.benchmark.serving accepts
TRACE_SETTLE_S = 2.0  # after a trace file appears, for the profiler to finish writing it

# How far into a closed level --profile-level starts its trace: past the client's start, the
# warm-up requests and the ramp to C running requests.
LEVEL_PROFILE_DELAY_S = 8.0


class LevelProfile:
    """``--profile-level C``: around a closed level at C, a trace of --profile-steps forward
    steps started LEVEL_PROFILE_DELAY_S into it, prefills and decode steps as the load mixes them;
    written with what each prefill cost the decoding requests (kernel_profile.prefill_intervals)
    to profile-level-<config>.json. ``timer`` makes the start's timer (a test's starts at once,
    or never)."""

    def __init__(self, run: Run, config: ServerConfig, c: int,
                 timer: Callable[[float, Callable[[], None]], threading.Timer] = threading.Timer) -> None:
        self.run, self.config, self.c = run, config, c
        self.trace_dir = run.work / f"profile-level-{config.name}"
        self.started = threading.Event()
        self.refused: Optional[OSError] = None
        self.timer = timer(LEVEL_PROFILE_DELAY_S, self._start)

    def _start(self) -> None:
        try:
            start_profile(base_url(self.run.args, self.config), self.trace_dir, self.run.args.profile_steps,
                          host=self.run.args.profile_host)
        except OSError as e:  # URLError, HTTPError, a timeout: said in __exit__, not as a thread's traceback
            self.refused = e
            return
        self.started.set()

    def __enter__(self) -> "LevelProfile":
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        self.timer.join()  # a start already under way finishes
        if self.refused is not None:
            self.run.fail(f"{self.config.name} level profile: /start_profile failed: {self.refused}")
            return
        if not self.started.is_set():
            self.run.fail(f"{self.config.name} level profile: the level ended within "
                          f"{LEVEL_PROFILE_DELAY_S:g} s")
            return
        trace = written_trace(self.trace_dir, timeout=10)
        if trace is None:
            # The level ended before --profile-steps steps: the profiler writes what it has on stop.
            http_request(base_url(self.run.args, self.config) + "/stop_profile", timeout=120)
            trace = written_trace(self.trace_dir)
        write_profile(self.run, self.config, trace, self.run.args.profile_steps, "level",
                      concurrency=self.c, trace_fields=level_prefill_intervals)


def level_prefill_intervals(trace: dict) -> dict:
    try:
        return {"prefill_intervals": kernel_profile.prefill_interval_summary(trace)}
    except ValueError:  # no prefill between two decode steps
        return {"prefill_intervals": None}


def written_trace(trace_dir: Path, load: Optional[subprocess.Popen] = None,
                  timeout: float = PROFILE_WAIT_S) -> Optional[Path]:
    if not wait_for(lambda: any(trace_dir.glob("*.trace.json.gz")), load, timeout=timeout):
        return None
    time.sleep(TRACE_SETTLE_S)  # the profiler may still be writing the file
    return sorted(trace_dir.glob("*.trace.json.gz"))[-1]


def write_profile(run: Run, config: ServerConfig, trace: Optional[Path], steps: int, phase: str,
                  concurrency: Optional[int] = None,
                  trace_fields: Callable[[dict], dict] = lambda trace: {}, **fields) -> None:
    """Summarize ``trace`` into profile-<config>.json (decode) or profile-<phase>-<config>.json,
    with ``trace_fields`` of the same trace (read once: a loaded level's trace is large), and
    move the trace beside it (<same stem>.trace.json.gz, ignored by git: megabytes)."""
    if trace is None:
        run.fail(f"{config.name} {phase} profile: the profiler wrote no trace")
        return
    events = trace_events.read_trace(trace)
    try:
        summary = kernel_profile.summarize_trace(events, steps)
    except ValueError as e:
        run.fail(f"{config.name} {phase} profile: {e}")
        return
    summary.update(config=config.name, phase=phase,
                   concurrency=concurrency or run.args.profile_concurrency,
                   **trace_fields(events), **fields)
    if run.args.profile_host:
        summary.update(kernel_profile.idle_causes(events, steps))
        summary.update(kernel_profile.host_time(events, steps))
        summary.update(kernel_profile.host_pace(events))
        summary.update(kernel_profile.host_calls_per_step(events))
        summary.update(kernel_profile.prefill_pauses(events))
    stem = "profile" if phase == "decode" else f"profile-{phase}"
    (run.dir / f"{stem}-{config.name}.json").write_text(json.dumps(summary, indent=1) + "\n")
    # Kept beside the summary: the working directory goes at the end of the sweep. A move, not
    # a rename: the working directory is under the system's temporary one, often another disk.
    shutil.move(trace, run.dir / f"{stem}-{config.name}.trace.json.gz")
    print(kernel_profile.summary_line(summary), flush=True)


def profile_load_command(run: Run, config: ServerConfig, dataset: Path, tag: str,
                         output_len: int) -> list[str]:
    """Exactly --profile-concurrency requests at once, none waiting, on an empty prefix cache."""
    args, c = run.args, run.args.profile_concurrency
    return bench_command(
        args, url=base_url(args, config), tag=f"{config.name},{tag}", dataset=dataset,
        output_file=run.work / "profile.jsonl",
        num_prompts=c, concurrency=c, warmup=0, seed=args.seed, output_len=output_len,
        flush_cache=True,
    )


def profile_decode(run: Run, config: ServerConfig, dataset: Path) -> None:
    """Exactly C long requests at once, so after their prefill every step is a decode step at
    batch C; profile --profile-steps of them and write profile-<config>.json."""
    args, url = run.args, base_url(run.args, config)
    trace_dir = run.work / f"profile-{config.name}"
    cmd = profile_load_command(run, config, dataset, "profile", args.profile_output_len)
    if args.dry_run:
        run.record(cmd)
        return
    logged = last_gen_throughput(url)
    load = run_bench(run, cmd, f"bench-{config.name}-profile.log")
    try:
        # The client takes seconds to start, and all C prefills come first: wait for the
        # scheduler's next decode log line (every --decode-log-interval steps, 40 by default),
        # which is written only after that many decode steps.
        if not wait_for(lambda: last_gen_throughput(url) != logged, load, timeout=PROFILE_WAIT_S):
            run.fail(f"{config.name} profile: the load never reached decode")
            return
        start_profile(url, trace_dir, args.profile_steps, host=args.profile_host)
        trace = written_trace(trace_dir, load)
    finally:
        load.terminate()
        load.wait()
    write_profile(run, config, trace, args.profile_steps, "decode",
                  output_len=args.profile_output_len)


def profile_prefill(run: Run, config: ServerConfig, dataset: Path) -> None:
    """C requests sent at once to the idle server, as a closed loop sends a wave when C requests
    finish together: the trace holds their prefill and the few decode steps of their
    PREFILL_WAVE_OUTPUT_LEN tokens; written per wave to profile-prefill-<config>.json."""
    args, url = run.args, base_url(run.args, config)
    trace_dir = run.work / f"profile-prefill-{config.name}"
    cmd = profile_load_command(run, config, dataset, "profile-prefill", PREFILL_WAVE_OUTPUT_LEN)
    if args.dry_run:
        run.record(cmd)
        return
    start_profile(url, trace_dir, host=args.profile_host)
    try:
        run_bench(run, cmd, f"bench-{config.name}-profile-prefill.log").wait()
    finally:
        http_request(url + "/stop_profile", timeout=120)
    write_profile(run, config, written_trace(trace_dir), 1, "prefill",
                  output_len=PREFILL_WAVE_OUTPUT_LEN)
