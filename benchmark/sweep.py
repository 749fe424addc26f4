"""Serving sweep: plain decoding vs EAGLE-3 vs the two batch-size gates, on one GPU machine.

For each server configuration the sweep starts ``sglang.launch_server`` once, then runs
``sglang.benchmark.serving`` (SGLang's own client, whose JSONL rows are the raw results):

* closed loop: ``--max-concurrency C --request-rate inf`` for each C, ``max(k*C, min)`` prompts,
  the levels one after another in one client process (``serving_session.py``: the client's
  imports take longer than a level);
* bursty: Poisson arrivals whose rate alternates between phases (default 60 s at 2 req/s,
  60 s at 32 req/s, 60 s at 2 req/s). 0.5.17's client has one rate per run (only the mooncake
  trace replays timestamps, with synthetic prompts), so each phase is its own client process,
  started on the phase's schedule without waiting for the previous one to drain: requests of a
  burst still finish during the next quiet phase, as they would in production.

The gates run at each ``--thresholds`` N; by default (``auto``) at the N find_threshold.py
suggests from the plain and spec rows measured just before them.

One server runs at a time, unless ``--interleave`` keeps them all up, sharing the GPU, and runs
each closed level on them in turn: an A/B whose pairs ran minutes apart on the same host.

Around each level it reads the gate's counters from ``/server_info``
(``internal_states[0].spec_gate``) and stores them with their deltas in ``gate.jsonl``.

    python benchmark/sweep.py --model-path T --draft-model-path D --name 8b \\
        --configs plain,spec,upstream-gate,gate -- --load-format dummy

Everything after ``--`` is passed to every server. See benchmark/README.md for the outputs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional

import cpu_profile
import decode_log
import find_threshold
import kernel_profile
import machine
import output_spread
import prompts
import server_processes
import serving_session
import ttft_split
import ttft_stages

RESULTS = Path(__file__).resolve().parent / "results"
CONFIG_KINDS = ("plain", "spec", "upstream-gate", "gate")
GATE_KINDS = ("upstream-gate", "gate")
AUTO = "auto"
GATE_COUNTERS = ("decode_steps_spec", "decode_steps_plain", "switches")
# The gate's host sequence lengths (FlashInfer): batches served from the host, batches that
# waited for the GPU's copy, and lengths the GPU's contradicted (host_seq_lens.py).
HOST_LENGTH_COUNTERS = ("resolved_on_host", "copied_back", "disagreed")
PROFILE_WAIT_S = 120.0  # for the profile load to reach decode, and for the trace
PREFILL_WAVE_OUTPUT_LEN = 4  # the fewest output tokens sglang.benchmark.serving accepts
# How far into a closed level --profile-level starts its trace: past the client's start, the
# warm-up requests and the ramp to C running requests.
LEVEL_PROFILE_DELAY_S = 8.0
# Closed levels run but not reported. --warm-up-level: a server's first level ran slower than
# the same level right after it, by a different amount per server (8B, C = 128: plain 8,134 ->
# 8,338 tok/s, the gate 7,426 -> 7,500; benchmark/results/2026-12-01-offcost-8b-2.2-c128), so
# an A/B whose first level is measured compares unequally warm servers. --profile-level: the
# profiler slows a server, a gated one more (at C = 64, 8B: plain by 9 %, the gate by 15 %;
# benchmark/results/2026-12-01-offcost-8b-2.2-prompt-rows), so no measured level is traced.
# --cpu-profile-level: py-spy stops the scheduler for every sample it takes.
WARM_UP, PROFILED, CPU_PROFILED = "warm-up", "profiled", "cpu-profiled"
# --interleave: the servers share the GPU, all of them together this fraction of its memory
# (the rest is activations). SGLang makes a server's static memory --mem-fraction-static of the
# memory free when it starts (kv_cache_configurator.py:1616-1625, resized after graph capture
# to the same bound, kv_pool_runtime.py:53), so each later server gets a larger fraction of less.
INTERLEAVED_MEMORY = 0.85
CPU_PROFILE_ROWS = 60  # functions in cpu-profile-c<C>.md, by share in the last server's samples


@dataclass(frozen=True)
class Speculation:
    """The EAGLE flags shared by every speculative configuration (chain drafting)."""

    algorithm: str
    draft_model_path: str
    num_steps: int
    draft_load_format: Optional[str]

    def flags(self) -> list[str]:
        flags = [
            "--speculative-algorithm", self.algorithm,
            "--speculative-draft-model-path", self.draft_model_path,
            "--speculative-num-steps", str(self.num_steps),
            "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(self.num_steps + 1),
        ]
        if self.draft_load_format:
            flags += ["--speculative-draft-load-format", self.draft_load_format]
        return flags

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Speculation":
        """From the options of ``add_server_arguments``."""
        return cls(args.speculative_algorithm, args.draft_model_path or "",
                   args.speculative_num_steps, args.draft_load_format)


@dataclass(frozen=True)
class ServerConfig:
    """One server of the sweep; ``name`` starts every tag of its rows."""

    name: str
    flags: tuple[str, ...]
    # Written to run_dir/<name>.json before the server starts (upstream gate only).
    adaptive_config: Optional[dict] = None
    port: Optional[int] = None  # None: the sweep's --port (servers that run one at a time)


def server_configs(kinds: list[str], thresholds: list[int], spec: Speculation,
                   run_dir: Path) -> list[ServerConfig]:
    """The configurations to compare, in the order given; gates once per threshold."""
    configs = []
    for kind in kinds:
        if kind == "plain":
            configs.append(ServerConfig("plain", ()))
        elif kind == "spec":
            configs.append(ServerConfig("spec", tuple(spec.flags())))
        elif kind == "upstream-gate":
            # Upstream's own hard gate (--speculative-adaptive with single-candidate slots):
            # S steps up to batch N, the steps-0 state above.
            for n in thresholds:
                name = f"upstream-gate-{n}"
                configs.append(ServerConfig(
                    name,
                    (*spec.flags(), "--speculative-adaptive",
                     "--speculative-adaptive-config", str(run_dir / f"{name}.json")),
                    adaptive_config={"1": {"candidate_steps": [spec.num_steps]},
                                     str(n + 1): {"candidate_steps": [0]}},
                ))
        elif kind == "gate":
            for n in thresholds:
                configs.append(ServerConfig(
                    f"gate-{n}",
                    (*spec.flags(), "--speculative-disable-batch-threshold", str(n)),
                ))
        else:
            raise ValueError(f"unknown configuration {kind!r}; choose from {CONFIG_KINDS}")
    return configs


@dataclass(frozen=True)
class Phase:
    """A stretch of the bursty scenario: Poisson arrivals at ``rate`` req/s for ``seconds``."""

    rate: float
    seconds: float

    @property
    def num_prompts(self) -> int:
        return max(1, round(self.rate * self.seconds))


def parse_phases(text: str) -> list[Phase]:
    """``"2:60,32:60"`` -> 60 s at 2 req/s, then 60 s at 32 req/s; ``""`` -> none."""
    phases = []
    for part in filter(None, text.split(",")):
        rate, _, seconds = part.partition(":")
        phases.append(Phase(float(rate), float(seconds)))
    return phases


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers, e.g. 16,32,64") from None


# SGLang's custom loader refuses a fixed output length under 4 (sglang/benchmark/datasets/custom.py).
MIN_OUTPUT_LEN = 4


def output_len_arg(text: str) -> int:
    """``--output-len``: 0 (each prompt's answer length) or a length SGLang's loader accepts,
    so a bad value stops the sweep before any server starts, not in its first client."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or (value != 0 and value < MIN_OUTPUT_LEN):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give 0 (each prompt's answer length) or at least {MIN_OUTPUT_LEN} tokens")
    return value


def spread_arg(text: str) -> float:
    """``--output-len-spread``: a fraction of --output-len, 0 <= S < 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a fraction of --output-len from 0 (every request the same) to below 1")
    return value


def thresholds_arg(text: str) -> Optional[list[int]]:
    """``"8,16"`` -> [8, 16]; ``"auto"`` -> None: the N find_threshold.py suggests (auto_thresholds)."""
    return None if text == AUTO else int_list(text)


def level_prompts(concurrency: int, per_concurrency: int, minimum: int) -> int:
    # Several waves of requests per level, so ramp-up and drain are a small part of it.
    return max(per_concurrency * concurrency, minimum)


def server_command(args: argparse.Namespace, config: ServerConfig) -> list[str]:
    return [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", args.model_path,
        "--host", args.host, "--port", str(server_port(args, config)),
        # The same batch range for every configuration: SGLang's defaults differ between
        # plain and speculative servers (48 running requests under speculation).
        "--max-running-requests", str(args.max_running_requests),
        "--cuda-graph-max-bs", str(args.cuda_graph_max_bs),
        *config.flags, *args.server_flags,
    ]


def bench_command(args: argparse.Namespace, *, url: str, tag: str, dataset: Path, output_file: Path,
                  num_prompts: int, warmup: int, concurrency: Optional[int] = None,
                  rate: float = math.inf, seed: int = 1, details: bool = False,
                  flush_cache: bool = False, output_len: Optional[int] = None) -> list[str]:
    cmd = [
        sys.executable, "-m", serving_session.PROGRAM,
        "--backend", "sglang", "--base-url", url,
        "--tokenizer", args.tokenizer or args.model_path,
        "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--num-prompts", str(num_prompts),
        "--request-rate", "inf" if math.isinf(rate) else f"{rate:g}",
        "--warmup-requests", str(warmup),
        "--seed", str(seed), "--disable-tqdm",
        "--output-file", str(output_file), "--tag", tag,
    ]
    output_len = output_len or (None if args.output_len_spread else args.output_len)
    if output_len:  # else each prompt's own answer length (the dataset's assistant turn)
        cmd += ["--sharegpt-output-len", str(output_len)]
    if concurrency is not None:
        cmd += ["--max-concurrency", str(concurrency)]
    if details:
        cmd.append("--output-details")  # per-request TTFT/ITL, for goodput and p99 TPOT
    if flush_cache:
        # Every level samples the same prompts (same seed): without a flush, later levels
        # would hit the prefix cache that earlier ones filled.
        cmd.append("--flush-cache")
    return cmd


def server_port(args: argparse.Namespace, config: ServerConfig) -> int:
    return args.port if config.port is None else config.port


def base_url(args: argparse.Namespace, config: Optional[ServerConfig] = None) -> str:
    """Where ``config``'s server listens; without one, the sweep's --port."""
    return f"http://{args.host}:{args.port if config is None else server_port(args, config)}"


def gate_delta(before: Optional[dict], after: Optional[dict]) -> Optional[dict]:
    """Counter increments between two ``spec_gate`` snapshots; None without a gate. With
    ``host_seq_lens`` where the gate served host lengths."""
    if before is None or after is None:
        return None
    delta = {k: after[k] - before[k] for k in GATE_COUNTERS}
    lengths = before.get("host_seq_lens"), after.get("host_seq_lens")
    if all(lengths):
        delta["host_seq_lens"] = {k: lengths[1][k] - lengths[0][k] for k in HOST_LENGTH_COUNTERS}
    return delta


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


def http_request(url: str, payload: Optional[dict] = None, timeout: float = 30) -> bytes:
    """GET, or POST ``payload`` as JSON; the response body."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def http_json(url: str, payload: Optional[dict] = None, timeout: float = 30) -> dict:
    return json.loads(http_request(url, payload, timeout))


def scheduler_state(url: str) -> dict:
    """The first scheduler's internal state, as /server_info reports it."""
    return (http_json(url + "/server_info").get("internal_states") or [{}])[0]


def gate_snapshot(url: str) -> Optional[dict]:
    return scheduler_state(url).get("spec_gate")


def reset_accept_length(run: Run, url: str) -> None:
    # avg_spec_accept_length (the `accept_length` of each row) is a lifetime average;
    # any accepted /set_internal_state resets it, and an empty update changes nothing else.
    try:
        http_json(url + "/set_internal_state", {"server_args": {}})
    except OSError as e:  # URLError, HTTPError and timeouts are all OSErrors
        run.note(f"# warning: could not reset avg_spec_accept_length: {e}")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:  # refused, 503 while starting, timeout
        return False


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
        deadline = time.monotonic() + args.server_timeout
        while not healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                yield False
                return
            time.sleep(2)
        yield True
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
    deadline = time.monotonic() + 60
    while healthy(url) and time.monotonic() < deadline:  # the next server needs the port
        time.sleep(1)


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass  # the whole group has exited


def client_env() -> dict[str, str]:
    # SGLANG_IS_IN_CI makes the client flush the cache after warm-up, which fails while
    # another client's requests are in flight (overlapping bursty phases).
    return {k: v for k, v in os.environ.items() if k != "SGLANG_IS_IN_CI"}


def run_bench(run: Run, cmd: list[str], log_name: str) -> subprocess.Popen:
    run.record(cmd)
    with open(run.logs / log_name, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=client_env())


def level_command(run: Run, config: ServerConfig, c: int, dataset: Path,
                  unreported: Optional[str] = None, rep: Optional[int] = None) -> list[str]:
    """A closed level's client; an ``unreported`` one's (WARM_UP, PROFILED) figures go to the
    work folder, not raw.jsonl."""
    args = run.args
    return bench_command(
        args, url=base_url(args, config),
        tag=level_tag(config, c, rep) + (f",{unreported}" if unreported else ""), dataset=dataset,
        output_file=run.work / f"{unreported}-levels.jsonl" if unreported else run.dir / "raw.jsonl",
        num_prompts=level_prompts(c, args.prompts_per_concurrency, args.min_prompts),
        concurrency=c, warmup=c, seed=args.seed, flush_cache=True,
    )


def level_tag(config: ServerConfig, c: int, rep: Optional[int] = None) -> str:
    return f"{config.name},c={c}" + (f",rep={rep}" if rep else "")


def bench_log_name(config: ServerConfig, c: int, label: Optional[str] = None) -> str:
    return f"bench-{config.name}-c{c}" + (f"-{label}" if label else "") + ".log"


def level_plan(args: argparse.Namespace) -> list[tuple[int, Optional[str], Optional[int]]]:
    """The closed levels each server runs, in order: (C, None, rep) for a measured one, rep
    1..K with --repeat-levels K > 1, else None; (C, WARM_UP, None) before them and
    (C, PROFILED, None), (C, CPU_PROFILED, None) after them for the unreported ones asked for."""
    reps = range(1, args.repeat_levels + 1) if args.repeat_levels > 1 else [None]
    return [*([(args.warm_up_level, WARM_UP, None)] if args.warm_up_level is not None else []),
            *((c, None, rep) for c in args.concurrency for rep in reps),
            *([(args.profile_level, PROFILED, None)] if args.profile_level is not None else []),
            *([(args.cpu_profile_level, CPU_PROFILED, None)] if args.cpu_profile_level is not None else [])]


# A closed level to run: (server, C, purpose, rep), as level_plan's (C, purpose, rep).
PlannedLevel = tuple[ServerConfig, int, Optional[str], Optional[int]]


def interleaved_plan(args: argparse.Namespace, configs: list[ServerConfig]) -> list[PlannedLevel]:
    """--interleave: every server's warm-up level, then each measured level's runs alternating
    between the servers, in reverse order every other run (A B, B A, A B, ...), so that pair I of
    a level ran in the same minute on the same host and neither server always goes first."""
    plan: list[PlannedLevel] = []
    for c, purpose, rep in level_plan(args):
        plan += [(config, c, purpose, rep) for config in (configs[::-1] if (rep or 1) % 2 == 0 else configs)]
    return plan


def closed_loop(run: Run, plan: list[PlannedLevel], dataset: Path, session_log: str) -> None:
    if run.args.dry_run:
        for config, c, purpose, rep in plan:
            if purpose == CPU_PROFILED:
                run.note(f"# py-spy samples {config.name}'s scheduler during the level below: "
                         + shlex.join(SchedulerSampling(run, config, c).command("PID")))
            run.record(level_command(run, config, c, dataset, unreported=purpose, rep=rep))
        return
    run.note("# the levels below run one after another in one client process "
             "(serving_session.py: the same entry point, imported once)")
    with serving_session.Session(run.logs / session_log, env=client_env()) as client:
        for config, c, purpose, rep in plan:
            if purpose is None:
                closed_level(run, config, client, c, dataset, rep)
            else:
                around = LEVEL_WRAPPERS.get(purpose)
                unreported_level(run, config, client, c, dataset, purpose,
                                 around(run, config, c) if around else None)


def closed_level(run: Run, config: ServerConfig, client: serving_session.Session, c: int,
                 dataset: Path, rep: Optional[int] = None) -> None:
    url, tag = base_url(run.args, config), level_tag(config, c, rep)
    cmd, log = level_command(run, config, c, dataset, rep=rep), bench_log_name(config, c, rep and f"rep{rep}")
    run.record(cmd)
    reset_accept_length(run, url)
    before = gate_snapshot(url)
    stages_before = stage_totals(run, url)
    server_log = run.server_log(config)
    log_offset = server_log.stat().st_size
    server = run.server_procs.get(config.name)
    pids = server_processes.server_processes(server.pid) if server else {}
    machine_before, per_cpu_before = (server_processes.machine_cpu_times(),
                                      server_processes.machine_cpu_times(per_cpu=True))
    threads_before, started = server_processes.thread_cpu_seconds(pids), time.monotonic()
    with level_probe(run, url, dataset) as probe, server_processes.watch_cpu(pids.get("scheduler")) as scheduler_cpus:
        exit_code = client.run(serving_session.arguments_of(cmd), run.logs / log)
    if exit_code != 0:
        run.fail(f"{tag} (see logs/{log})")
        return
    threads_after, seconds = server_processes.thread_cpu_seconds(pids), time.monotonic() - started
    cpu_busy = server_processes.busiest_thread_share(threads_before, threads_after, seconds)
    cpu_machine = server_processes.machine_share(machine_before, server_processes.machine_cpu_times(),
                                                 threads_before, threads_after, seconds)
    cpu_placement = server_processes.placement(per_cpu_before, server_processes.machine_cpu_times(per_cpu=True),
                                               scheduler_cpus, server_processes.smt_siblings(),
                                               server_processes.numa_node_count())
    after = gate_snapshot(url)
    server_lines = decode_log.read_from(server_log, log_offset)
    stages = (ttft_stages.mean_ms(stages_before, stage_totals(run, url))
              if stages_before is not None else None)
    run.gate_row(tag, config.name, before, after, max_concurrency=c,
                 steady_decode=decode_log.steady_throughput(server_lines, c),
                 prefills=decode_log.prefill_batches(server_lines), ttft_stages=stages,
                 cpu_busy=cpu_busy, cpu_machine=cpu_machine, cpu_placement=cpu_placement,
                 ttft_split=probe.summary() if probe else None)
    print(summary_line(run.dir / "raw.jsonl", gate_delta(before, after)), flush=True)


def unreported_level(run: Run, config: ServerConfig, client: serving_session.Session, c: int,
                     dataset: Path, purpose: str,
                     around: Optional[AbstractContextManager] = None) -> None:
    """The closed level at C once more, for a ``purpose`` its figures would spoil (WARM_UP,
    PROFILED), inside ``around``."""
    cmd = level_command(run, config, c, dataset, unreported=purpose)
    run.record(cmd)
    log = bench_log_name(config, c, purpose)
    with around or nullcontext():
        exit_code = client.run(serving_session.arguments_of(cmd), run.logs / log)
    if exit_code != 0:
        run.fail(f"{level_tag(config, c)},{purpose} (see logs/{log})")


class LevelProfile:
    """``--profile-level C``: around a closed level at C, a trace of --profile-steps forward
    steps started LEVEL_PROFILE_DELAY_S into it, prefills and decode steps as the load mixes them;
    written with what each prefill cost the decoding requests (kernel_profile.prefill_intervals)
    to profile-level-<config>.json."""

    def __init__(self, run: Run, config: ServerConfig, c: int) -> None:
        self.run, self.config, self.c = run, config, c
        self.trace_dir = run.work / f"profile-level-{config.name}"
        self.started = threading.Event()
        self.refused: Optional[OSError] = None
        self.timer = threading.Timer(LEVEL_PROFILE_DELAY_S, self._start)

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
        pid = server_processes.scheduler_pid(server.pid) if server else None
        if pid is None:
            self.run.fail(f"{self.config.name} CPU profile: no {server_processes.TITLES['scheduler']} "
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


# What runs around an unreported level, by its purpose (WARM_UP has nothing around it).
LEVEL_WRAPPERS = {PROFILED: LevelProfile, CPU_PROFILED: SchedulerSampling}


def level_prefill_intervals(trace: dict) -> dict:
    try:
        return {"prefill_intervals": kernel_profile.prefill_interval_summary(trace)}
    except ValueError:  # no prefill between two decode steps
        return {"prefill_intervals": None}


PROBE_PROMPTS = 64  # distinct prompts the TTFT probes cycle through


def level_probe(run: Run, url: str, dataset: Path) -> AbstractContextManager:
    """With ``--ttft-probe-interval``, the probe of one measured level (ttft_split.py)."""
    interval = run.args.ttft_probe_interval
    if not interval:
        return nullcontext()
    return ttft_split.Probe(url, ttft_split.prompt_texts(dataset, PROBE_PROMPTS), interval)


def stage_totals(run: Run, url: str) -> Optional[ttft_stages.Totals]:
    """With ``--ttft-stages``, the server's TTFT-stage histogram totals (ttft_stages.py)."""
    if not run.args.ttft_stages:
        return None
    return ttft_stages.totals(http_request(url + "/metrics").decode())


def last_gen_throughput(url: str) -> float:
    """The decode throughput of the scheduler's latest decode log line."""
    return scheduler_state(url).get("last_gen_throughput", 0.0)


def wait_for(condition, load: Optional[subprocess.Popen] = None,
             timeout: float = PROFILE_WAIT_S, poll_s: float = 0.5) -> bool:
    """Poll ``condition`` every ``poll_s`` (while ``load`` runs, if given); False on timeout or
    when it ended."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline or (load is not None and load.poll() is not None):
            return False
        time.sleep(poll_s)
    return True


def start_profile(url: str, trace_dir: Path, num_steps: Optional[int] = None, host: bool = False) -> None:
    """GPU activity, and with ``host`` CPU activity without Python stacks (SGLang records them by
    default: far more host overhead); without ``num_steps`` until ``/stop_profile``. Answers in
    plain text."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    request = {"output_dir": str(trace_dir), "activities": ["CPU", "GPU"] if host else ["GPU"],
               "with_stack": False, "record_shapes": False}
    if num_steps is not None:
        request["num_steps"] = num_steps
    http_request(url + "/start_profile", request, timeout=60)


def written_trace(trace_dir: Path, load: Optional[subprocess.Popen] = None,
                  timeout: float = PROFILE_WAIT_S) -> Optional[Path]:
    if not wait_for(lambda: any(trace_dir.glob("*.trace.json.gz")), load, timeout=timeout):
        return None
    time.sleep(2)  # the profiler may still be writing the file
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
    events = kernel_profile.read_trace(trace)
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
        if not wait_for(lambda: last_gen_throughput(url) != logged, load):
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


def bursty(run: Run, config: ServerConfig, dataset: Path) -> None:
    args, url = run.args, base_url(run.args, config)
    phases = args.bursty_phases
    slices = bursty_slices(dataset, phases, run.work, write=not args.dry_run)
    cmds = [
        bench_command(
            args, url=url,
            tag=f"{config.name},bursty,phase={k},rate={p.rate:g},s={p.seconds:g}",
            dataset=slices[k], output_file=run.work / f"{config.name}-phase-{k}.jsonl",
            num_prompts=p.num_prompts, warmup=0, rate=p.rate, seed=args.seed + k,
            details=True,
        )
        for k, p in enumerate(phases)
    ]
    # A server fresh from start-up is warmed by a side client, so that every phase starts
    # on schedule; after the closed loop it is warm already.
    warmup = None if "closed" in args.scenarios else bench_command(
        args, url=url, tag=f"{config.name},warmup", dataset=slices[0],
        output_file=run.work / "warmup.jsonl", num_prompts=2, warmup=2, concurrency=2,
        flush_cache=True)
    if args.dry_run:
        for cmd in [warmup, *cmds] if warmup else cmds:
            run.record(cmd)
        return
    if warmup:
        run_bench(run, warmup, f"bench-{config.name}-warmup.log").wait()
    reset_accept_length(run, url)
    before = gate_snapshot(url)
    start, procs = time.monotonic(), []
    for k, cmd in enumerate(cmds):
        # Phase k starts once the phases before it have had their time, drained or not.
        time.sleep(max(0.0, start + sum(p.seconds for p in phases[:k]) - time.monotonic()))
        procs.append(run_bench(run, cmd, f"bench-{config.name}-bursty-{k}.log"))
    codes = [p.wait() for p in procs]
    after = gate_snapshot(url)
    run.gate_row(f"{config.name},bursty", config.name, before, after, scenario="bursty")
    with open(run.dir / "bursty.jsonl", "a") as out:
        for k, code in enumerate(codes):
            phase_file = run.work / f"{config.name}-phase-{k}.jsonl"
            if code != 0 or not phase_file.exists():
                run.fail(f"{config.name} bursty phase {k} "
                         f"(see logs/bench-{config.name}-bursty-{k}.log)")
                continue
            out.writelines(json.dumps(compact_details(json.loads(line))) + "\n"
                           for line in phase_file.read_text().splitlines())
    print(f"{config.name} bursty: gate {gate_delta(before, after)}", flush=True)


def compact_details(row: dict) -> dict:
    """A client row with ``--output-details``, minus its per-token ITLs and generated texts.

    Those are ~7 KB per request (tens of MB per scenario); the per-request TPOT needs only
    each request's decode time, their sum, kept as ``decode_s``. Everything else is verbatim.
    """
    row = dict(row)
    row["decode_s"] = [sum(itl) for itl in row.pop("itls")]
    del row["generated_texts"]
    return row


def bursty_slices(dataset: Path, phases: list[Phase], work: Path, write: bool) -> list[Path]:
    """Disjoint prompt files per phase, so no phase hits prefixes another one cached."""
    paths = [work / f"bursty-phase-{k}.jsonl" for k in range(len(phases))]
    if write:
        lines = dataset.read_text().splitlines(keepends=True)
        offset = 0
        for path, phase in zip(paths, phases):
            path.write_text("".join(lines[offset:offset + phase.num_prompts]))
            offset += phase.num_prompts
    return paths


def summary_line(raw: Path, delta: Optional[dict]) -> str:
    row = json.loads(raw.read_text().splitlines()[-1])
    gate = "" if delta is None else (f" spec/plain steps={delta['decode_steps_spec']}/"
                                     f"{delta['decode_steps_plain']} switches={delta['switches']}")
    return (f"{row['tag']:24s} out_tok/s={row['output_throughput']:9.1f} "
            f"tpot_med={row['median_tpot_ms']:7.2f}ms accept={row.get('accept_length')}{gate}")


def prompts_needed(args: argparse.Namespace) -> int:
    closed = max((level_prompts(c, args.prompts_per_concurrency, args.min_prompts)
                  for c in args.concurrency), default=0) if "closed" in args.scenarios else 0
    burst = sum(p.num_prompts for p in args.bursty_phases) if "bursty" in args.scenarios else 0
    return max(closed, burst, args.profile_concurrency or 0)


def prepare_dataset(run: Run) -> Path:
    """The prompts every level samples: --dataset or prompts.py's, with the answers cut to
    spread output lengths under --output-len-spread."""
    args = run.args
    dataset = prompts_dataset(run)
    if not args.output_len_spread:
        return dataset
    spread = run.work / "prompts-spread.jsonl"
    if not args.dry_run:
        from sglang.benchmark.utils import get_tokenizer  # the client's, so lengths count alike

        tokenizer = get_tokenizer(args.tokenizer or args.model_path)
        try:
            digest = output_spread.write_spread_dataset(dataset, spread, tokenizer, args.output_len,
                                                        args.output_len_spread, args.prompt_seed)
        except ValueError as e:  # a tokenizer whose cuts never settle: say so before any server
            raise SystemExit(f"--output-len-spread: {e} with {args.tokenizer or args.model_path}'s "
                             "tokenizer; run without the spread") from None
        low, high = output_spread.length_range(args.output_len, args.output_len_spread)
        run.note(f"# output lengths: each answer cut to {low}-{high} tokens, drawn uniformly "
                 f"(output_spread.py, seed {args.prompt_seed}) sha256 {digest}")
    return spread


def prompts_dataset(run: Run) -> Path:
    args = run.args
    needed = prompts_needed(args)
    if args.dataset is not None:
        rows = sum(1 for line in args.dataset.read_text().splitlines() if line.strip())
        if rows < needed:
            raise SystemExit(f"{args.dataset} has {rows} rows, the sweep needs {needed}")
        run.note(f"# dataset {args.dataset}: {rows} rows")
        return args.dataset
    path = run.work / "prompts.jsonl"
    if args.rows < needed:
        raise SystemExit(f"--rows {args.rows} is below the {needed} prompts the sweep needs")
    if not args.dry_run:
        digest = prompts.write_jsonl(prompts.generate_from_args(args), path)
        run.note(f"# dataset: benchmark/prompts.py --rows {args.rows} --prompt-seed "
                 f"{args.prompt_seed} --tool-fraction {args.tool_fraction} --context-chars "
                 f"{args.context_chars} (Python {sys.version.split()[0]} stdlib"
                 f"{''.join(f', {s}' for s in args.source or [])}) sha256 {digest}")
    return path


def split_server_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """The script's own arguments, and those after ``--`` (passed to every server)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def add_server_arguments(p: argparse.ArgumentParser, *, model_required: bool,
                         max_running_default: str) -> None:
    """The options that say how to start a server (``server_command``); soak.py shares them."""
    p.add_argument("--model-path", required=model_required, help="target model")
    p.add_argument("--draft-model-path", help="EAGLE-3 draft model")
    p.add_argument("--speculative-algorithm", default="EAGLE3")
    p.add_argument("--speculative-num-steps", type=int, default=3,
                   help="draft steps S (chain drafting: topk 1, S+1 draft tokens)")
    p.add_argument("--draft-load-format", help="e.g. dummy, for config-only draft models")
    p.add_argument("--max-running-requests", type=int,
                   help=f"for every server (default: {max_running_default})")
    p.add_argument("--cuda-graph-max-bs", type=int,
                   help="for every server (default: --max-running-requests)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--server-timeout", type=float, default=900, help="seconds to become healthy")


def why_not_interleaved(args: argparse.Namespace, server_flags: list[str]) -> Optional[str]:
    """What in the command line --interleave cannot run, with the fix; None if nothing."""
    if args.thresholds is None and any(kind in GATE_KINDS for kind in args.configs):
        return "--thresholds auto needs plain and spec measured before the gates: give --thresholds N"
    servers = sum(len(args.thresholds) if kind in GATE_KINDS else 1 for kind in args.configs)
    if servers < 2:
        return "it runs servers side by side: give --configs two or more, e.g. gate,plain"
    if args.scenarios != ["closed"]:
        return "closed levels only: give --scenarios closed"
    if args.profile_concurrency or args.profile_prefill:
        # Those run after a server's closed levels, outside them; --profile-level and
        # --cpu-profile-level are closed levels, taking their turn like the others.
        return ("--profile-concurrency/--profile-prefill profile one server at a time: drop them, "
                "or profile a level with --profile-level C")
    if any(flag.split("=")[0] == "--mem-fraction-static" for flag in server_flags):
        return "it splits the GPU's memory between the servers itself: drop --mem-fraction-static"
    return None


def dated_run_dir(name: str) -> Path:
    return RESULTS / f"{datetime.date.today().isoformat()}-{name}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ours, server_flags = split_server_flags(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arguments(p, model_required=True, max_running_default="the largest concurrency")
    p.add_argument("--tokenizer", help="tokenizer for the client (default: --model-path)")
    p.add_argument("--configs", default="plain,spec,upstream-gate,gate",
                   help=f"comma list of {', '.join(CONFIG_KINDS)} (default: all)")
    p.add_argument("--thresholds", type=thresholds_arg, default=AUTO,
                   help="gate thresholds N, comma list, one server per gate and N; or auto "
                        "(default): the N find_threshold.py suggests from the plain and spec "
                        "rows, so list plain,spec before the gates in --configs")
    p.add_argument("--concurrency", type=int_list, default=[1, 2, 4, 8, 16, 32, 64, 128],
                   help="closed-loop levels, comma list")
    p.add_argument("--prompts-per-concurrency", type=int, default=8)
    p.add_argument("--min-prompts", type=int, default=32)
    p.add_argument("--output-len", type=output_len_arg, default=256,
                   help="output tokens per request; 0: each prompt's answer length (mixed)")
    p.add_argument("--output-len-spread", type=spread_arg, default=0.0,
                   help="draw each prompt's output length uniformly from --output-len times "
                        "(1 - S) to (1 + S), so a closed loop's requests do not finish in "
                        "lockstep (output_spread.py); default 0")
    p.add_argument("--scenarios", default="closed,bursty", help="closed, bursty or both")
    p.add_argument("--bursty-phases", type=parse_phases, default=parse_phases("2:60,32:60,2:60"),
                   help="RATE:SECONDS,... (default 2:60,32:60,2:60)")
    p.add_argument("--dataset", type=Path, help="custom JSONL (default: generate with prompts.py)")
    p.add_argument("--profile-concurrency", type=int,
                   help="after the load, profile decode steps at this batch size (profile-*.json)")
    p.add_argument("--profile-steps", type=int, default=20, help="forward steps to profile")
    p.add_argument("--profile-output-len", type=int, default=2048,
                   help="output tokens of the profiled requests: decode must outlast the profile")
    p.add_argument("--profile-level", type=int, metavar="C",
                   help=f"after each server's measured levels, run its closed level at concurrency "
                        f"C once more and profile --profile-steps forward steps "
                        f"{LEVEL_PROFILE_DELAY_S:g} s into it: prefills and decode steps as the "
                        f"load mixes them (profile-level-*.json, with what each prefill cost the "
                        f"decoding requests); the profiled level's own figures are not reported")
    p.add_argument("--profile-host", action="store_true",
                   help="record the host in every profile too (CPU activity: ops, CUDA calls, "
                        "SGLang's scheduler spans) and say, for each pause of the GPU, what the "
                        "host was doing: held by a wait on the GPU, or late "
                        "(kernel_profile.idle_causes), where its time went (host_time), how "
                        "fast it ran (host_pace), how many host calls each kind of step made "
                        "(host_calls_per_step) and where it was while the GPU paused in "
                        "prefills (prefill_pauses); recording slows the host, so these "
                        "profiles' busy figures read lower than GPU-only ones")
    p.add_argument("--cpu-profile-level", type=int, metavar="C",
                   help="after each server's measured levels, run its closed level at concurrency "
                        "C once more with py-spy sampling its scheduler throughout "
                        "(pyspy-*-c<C>.txt, and cpu-profile-c<C>.md: each server's time by "
                        "function, waits on the GPU included); py-spy must be on PATH (pip "
                        "install py-spy) with the right to trace the server (root, or "
                        "ptrace_scope 0); the level's own figures are not reported")
    p.add_argument("--warm-up-level", type=int, metavar="C",
                   help="before each server's measured levels, run its closed level at "
                        "concurrency C once, unreported: a server's first level runs slower "
                        "than the same level after it, by a different amount per server")
    p.add_argument("--repeat-levels", type=int, default=1, metavar="K",
                   help="run each measured closed level K times back to back (tags ...,rep=I); "
                        "report.py reports a level by its median run: at C = 128 one level's "
                        "throughput moved by up to 4 %% from the next on the same server")
    p.add_argument("--interleave", action="store_true",
                   help="start every configuration's server at once, each with a share of the "
                        "GPU's memory on ports --port, --port+1, ..., and run each closed level "
                        "on them in turn (with --repeat-levels K, K pairs in A B, B A order): an "
                        "A/B whose pairs ran minutes apart, not a server start and a host apart; "
                        "closed levels only, thresholds given")
    p.add_argument("--ttft-stages", action="store_true",
                   help="serve with --enable-metrics and record each closed level's mean queue, "
                        "prefill and TTFT per request from SGLang's histograms (ttft_stages.py)")
    p.add_argument("--ttft-probe-interval", type=float, default=0.0, metavar="S",
                   help="serve with --enable-metrics and, during each measured closed level, send "
                        "a one-token request every S s and record the medians of its TTFT split "
                        "across the server's processes (ttft_split.py); 0 (default): none")
    p.add_argument("--profile-prefill", action="store_true",
                   help="also profile a wave of --profile-concurrency requests sent at once to "
                        "the idle server: its prefill (profile-prefill-*.json)")
    prompts.add_arguments(p)
    p.add_argument("--seed", type=int, default=1, help="client seed (prompt order, arrivals)")
    p.add_argument("--name", default="sweep", help="results go to results/<date>-<name>/")
    p.add_argument("--run-dir", type=Path, help="results directory (overrides --name)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(ours)
    # The histograms --ttft-stages reads, and the stamps of --ttft-probe-interval's requests,
    # exist only with metrics on, on every server alike.
    metrics = args.ttft_stages or args.ttft_probe_interval > 0
    args.server_flags = [*server_flags, "--enable-metrics"] if metrics else server_flags
    if args.ttft_probe_interval < 0:
        p.error(f"--ttft-probe-interval must be >= 0 seconds, got {args.ttft_probe_interval}")
    args.configs = [c for c in args.configs.split(",") if c]
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    if not set(args.scenarios) <= {"closed", "bursty"}:
        p.error(f"--scenarios: closed and/or bursty, got {args.scenarios}")
    if not set(args.configs) <= set(CONFIG_KINDS):
        p.error(f"--configs: choose from {', '.join(CONFIG_KINDS)}, got {args.configs}")
    if args.interleave:
        interleave_error = why_not_interleaved(args, server_flags)
        if interleave_error:
            p.error(f"--interleave: {interleave_error}")
    if args.repeat_levels < 1:
        p.error(f"--repeat-levels: K >= 1 runs of each measured level, got {args.repeat_levels}")
    if any(n < 1 for n in args.thresholds or []):
        p.error("--thresholds: N >= 1 (0 would mean a gate that never fires)")
    if args.output_len_spread and not args.output_len:
        p.error("--output-len-spread spreads lengths around --output-len: give it a length, not 0")
    for flag, level, what in (("--profile-level", args.profile_level, "profiles"),
                              ("--cpu-profile-level", args.cpu_profile_level, "samples"),
                              ("--warm-up-level", args.warm_up_level, "repeats")):
        if level is not None and ("closed" not in args.scenarios or level not in args.concurrency):
            p.error(f"{flag} {level} {what} a closed-loop level: give one of "
                    f"--concurrency {','.join(map(str, args.concurrency))} with --scenarios closed")
    args.py_spy = shutil.which("py-spy")
    if args.cpu_profile_level is not None and not args.dry_run and args.py_spy is None:
        p.error("--cpu-profile-level samples each scheduler with py-spy, which is not on PATH: "
                "pip install py-spy, or drop --cpu-profile-level")
    args.py_spy = args.py_spy or "py-spy"  # a dry run prints the command all the same
    if args.profile_host and args.profile_level is None and not args.profile_concurrency:
        p.error("--profile-host records the host in profiles: give --profile-level or "
                "--profile-concurrency too")
    if args.profile_prefill and not args.profile_concurrency:
        p.error("--profile-prefill profiles a wave of --profile-concurrency requests: give both")
    if args.configs != ["plain"] and not args.draft_model_path:
        p.error("--draft-model-path is required for speculative configurations")
    args.max_running_requests = args.max_running_requests or max(
        [*args.concurrency, args.profile_concurrency or 0], default=64)
    args.cuda_graph_max_bs = args.cuda_graph_max_bs or args.max_running_requests
    if args.run_dir is None:
        args.run_dir = dated_run_dir(args.name)
    return args


def auto_thresholds(run: Run) -> list[int]:
    """``--thresholds auto``: the N that find_threshold.py suggests from the plain and spec rows
    the run directory holds by now (this sweep's, or an earlier sweep's into the same --run-dir).
    Empty, with the reason recorded, when there is no N to measure."""
    if run.args.dry_run:
        run.note("# --thresholds auto: the gates' N comes from the plain and spec rows, "
                 "which a dry run does not measure")
        return []
    ratios, _ = find_threshold.spec_plain_ratios(run.dir)
    if not ratios:
        run.fail(f"--thresholds auto: no concurrency level with both plain and spec rows in "
                 f"{run.dir}; list plain,spec before the gates in --configs, or pass --thresholds N")
        return []
    crossover = find_threshold.find_crossover(ratios)
    run.note(f"# --thresholds auto: find_threshold.py suggests "
             f"{find_threshold.verdict(crossover, max(ratios))}")
    if crossover.suggested is None:
        run.fail("--thresholds auto: spec never beats plain here, so there is no gate to measure")
        return []
    return [crossover.suggested]


def serve_and_load(run: Run, config: ServerConfig, dataset: Path) -> None:
    """One server: start it, run the scenarios (and the profile) against it, stop it."""
    args = run.args
    run.note(f"# server {config.name}")
    with server(run, config) as started:
        if not started:
            run.server_failed(config)
            return
        try:
            if "closed" in args.scenarios:
                closed_loop(run, [(config, *level) for level in level_plan(args)], dataset,
                            f"bench-{config.name}-session.log")
            if "bursty" in args.scenarios and args.bursty_phases:
                bursty(run, config, dataset)
            # The prefill wave first, on the idle server: the decode profile ends by killing
            # its client, whose requests the server aborts only afterwards.
            if args.profile_prefill:
                profile_prefill(run, config, dataset)
            if args.profile_concurrency:
                profile_decode(run, config, dataset)
        except OSError as e:  # the server went away: go on with the next one
            run.fail(f"{config.name}: {e}")


def serve_one_by_one(run: Run, spec: Speculation, dataset: Path) -> None:
    """Each configuration's server in turn, the gates at the --thresholds N (auto: the N that
    the plain and spec rows measured before them suggest)."""
    thresholds = run.args.thresholds
    for kind in run.args.configs:
        if kind in GATE_KINDS and thresholds is None:
            thresholds = auto_thresholds(run)  # once plain and spec have run
        for config in server_configs([kind], thresholds or [], spec, run.dir):
            serve_and_load(run, config, dataset)


def side_by_side(args: argparse.Namespace, configs: list[ServerConfig]) -> list[ServerConfig]:
    """--interleave: each server on its own port with an equal share of the GPU's memory
    (INTERLEAVED_MEMORY), sleeping while idle so that its scheduler does not spin on a CPU the
    measured server's processes could use."""
    share = INTERLEAVED_MEMORY / len(configs)
    return [replace(config, port=args.port + k,
                    flags=(*config.flags, "--mem-fraction-static", f"{share / (1 - k * share):.3f}",
                           "--sleep-on-idle"))
            for k, config in enumerate(configs)]


def serve_interleaved(run: Run, configs: list[ServerConfig], dataset: Path) -> None:
    """--interleave: start every server, then run the closed levels alternately against those
    that came up, while two or more did: a server that fails to start (say, an experimental
    configuration) is recorded as failed and costs the others' comparison nothing."""
    with ExitStack() as servers:
        up = []
        for config in configs:
            run.note(f"# server {config.name} (port {config.port}), resident with the others")
            if servers.enter_context(server(run, config)):
                up.append(config)
            else:
                run.server_failed(config)
        if len(up) < 2:
            return
        try:
            closed_loop(run, interleaved_plan(run.args, up), dataset, "bench-session.log")
        except OSError as e:  # a server went away
            run.fail(f"interleaved levels: {e}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    run = Run(args)
    spec = Speculation.from_args(args)
    if not args.dry_run:
        shutil.rmtree(run.work, ignore_errors=True)
        for d in (run.logs, run.work):
            d.mkdir(parents=True, exist_ok=True)
    run.note_invocation(argv)
    dataset = prepare_dataset(run)
    if args.interleave:
        configs = server_configs(args.configs, args.thresholds, spec, run.dir)
        serve_interleaved(run, side_by_side(args, configs), dataset)
    else:
        serve_one_by_one(run, spec, dataset)
    if not args.dry_run:
        shutil.rmtree(run.work, ignore_errors=True)
    print(f"results: {run.dir}" + (f"; {len(run.failures)} failed" if run.failures else ""))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
