"""Soak: minutes of load oscillating around the gate's threshold N, and a pass/fail verdict.

The load (``soak_load.py``) keeps a number of streaming requests in flight that follows a wave
between N/2 and 2N, with bursts past the server's ``--max-running-requests``, mixed prompt and
output lengths, long prompts while the gate is off, and requests that are sampled, ask for
logprobs, carry stop strings or are dropped by the client before their first token or
mid-stream. Every ``--sample-interval`` seconds the script records the GPUs' used memory, the
server process tree's resident memory and the gate's counters. The verdict: no crash, no
stall, no hang, no lost, truncated or malformed request, no memory growth after the warm-up,
each kind of request exercised, requests queued and retracted, and the gate switched,
speculating and decoding plainly; the exit status is 1 when any criterion fails.

    python benchmark/soak.py --name 1b-n8 --model-path T --draft-model-path D --threshold 8 \\
        --duration 1200 -- --attention-backend triton
    python benchmark/soak.py --name attached --url http://127.0.0.1:30000 --duration 600

The first starts the server the way ``sweep.py`` does (everything after ``--`` goes to it) and
stops it afterwards; the second soaks a running server. See benchmark/README.md for the outputs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import random
import secrets
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, Optional, TextIO

import aiohttp

from benchmark.analysis.soak_verdict import markdown, pool_check_failures, queue_and_retractions, verdict
from benchmark.cli import int_list
from benchmark.client.soak_load import (EXERCISED, FIRST_PROMPT_ID, PROBE_TOKENS, Load, Mix,
                                        RequestResult, Wave, client_session, common_substring, drive,
                                        loop_time, probe)
from benchmark.servers.config import (Speculation, add_server_arguments, base_url, server_configs,
                                      split_server_flags)
from benchmark.servers.endpoints import gate_snapshot, http_json
from benchmark.servers.launch import server
from benchmark.servers.memory import (gpu_memory_mib, listening_pid, process_tree, server_gpu_memory_mib,
                                      tree_rss_mib)
from benchmark.servers.record import Run, dated_run_dir

# After the probe the server idles for the first time since the load began, and SGLang's
# scheduler checks its KV and request pools whenever it idles (Scheduler.on_idle). With
# SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE (the default) a leak kills the scheduler, which then
# takes the server down (SIGQUIT to the launcher): "server alive", judged after this wait, sees it.
IDLE_CHECK_WAIT_S = 5

# Greedy requests whose output text the default stop strings are drawn from.
STOP_CALIBRATION_REQUESTS, STOP_CALIBRATION_TOKENS = 8, 64

# --------------------------------------------------------------------------- samples


def take_sample(url: str, pid: Optional[int], t: float, load: Load) -> dict:
    gpus = gpu_memory_mib()
    tree = [] if pid is None else process_tree(pid)
    sample = {
        "t": round(t, 2), "time": datetime.datetime.now().isoformat(timespec="seconds"),
        "target": load.target, "in_flight": load.in_flight, "outcomes": dict(load.counts),
        "gpu_memory_mib": None if gpus is None else sum(gpus), "gpu_memory_mib_per_gpu": gpus,
        "server_gpu_memory_mib": server_gpu_memory_mib({p.pid for p in tree}) if tree else None,
        "host_rss_mib": tree_rss_mib(tree),
        "gate": None, "server_info_error": None,
    }
    try:
        sample["gate"] = gate_snapshot(url)
    except (OSError, ValueError) as e:  # unreachable, timed out (a hung scheduler), bad JSON
        sample["server_info_error"] = f"{type(e).__name__}: {e}"
    return sample


async def sample_until(stop: asyncio.Event, interval: float, take: Callable[[], Awaitable[dict]],
                       on_sample: Callable[[dict], None]) -> None:
    """A sample every ``interval`` seconds, and a last one taken after ``stop`` is set (a
    sample already under way when it is set still reflects the load before the drain)."""
    while not stop.is_set():
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if not stop.is_set():
            on_sample(await take())
    on_sample(await take())


def calibrate_stop_strings(url: str, vocab_size: int, seed: int) -> tuple[str, ...]:
    """A stop string that greedy outputs of this server's model contain: the two characters
    found in most of a few sample outputs, so that stop requests do end at a string."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(FIRST_PROMPT_ID, vocab_size) for _ in range(16)]
               for _ in range(STOP_CALIBRATION_REQUESTS)]
    outs = http_json(url + "/generate", {
        "input_ids": prompts, "sampling_params": {"max_new_tokens": STOP_CALIBRATION_TOKENS,
                                                  "temperature": 0.0, "ignore_eos": True}},
        timeout=120)
    found = common_substring([out["text"] for out in outs], length=2)
    if found is None:
        raise SystemExit("no two characters recur in the model's outputs: pass --stop-strings")
    return (found,)


def jsonl(f: TextIO) -> Callable[[dict], None]:
    def write(row: dict) -> None:
        f.write(json.dumps(row) + "\n")
        f.flush()  # a soak that dies still leaves its rows
    return write


def server_alive(proc: Optional[subprocess.Popen], last_request: RequestResult) -> tuple[bool, str]:
    if proc is not None and proc.poll() is not None:
        return False, f"the server exited with status {proc.returncode}"
    if last_request.outcome != "completed":
        return False, (f"a {PROBE_TOKENS}-token request after the soak: {last_request.outcome}"
                       f"{f' ({last_request.error})' if last_request.error else ''}")
    return True, (f"a {PROBE_TOKENS}-token request after the soak took "
                  f"{last_request.latency_s:.2f} s")


# --------------------------------------------------------------------------- the run


def make_wave(args: argparse.Namespace, threshold: int, max_running: int = 0) -> Wave:
    """``max_running``: the server's --max-running-requests, which a default burst doubles."""
    low = args.low or max(1, threshold // 2)
    high = args.high or 2 * threshold
    if not 1 <= low < high:
        raise SystemExit(f"the wave needs 1 <= --low < --high, got {low} and {high}")
    burst = max_running if args.burst is None else args.burst
    return Wave(low, high, args.period, args.shape, burst,
                args.burst_every if burst else 0.0, args.burst_seconds if burst else 0.0)


def warmup_s(args: argparse.Namespace, wave: Wave) -> float:
    """Until memory is judged: SGLang's allocator and Python's heap grow to the load's peak once,
    and only a load that has sent every kind of request, a burst included, has reached it; a
    leak keeps growing after that."""
    if args.warmup is not None:
        return args.warmup
    warmup = max(2 * wave.period, wave.burst_every)
    if warmup >= args.duration:
        raise SystemExit(f"the default warm-up ({warmup:g} s: two periods and the first burst) "
                         f"leaves nothing of --duration {args.duration:g} to judge: lengthen it "
                         "or pass --warmup")
    return warmup


def make_mix(args: argparse.Namespace, threshold: int, stop_strings: tuple[str, ...]) -> Mix:
    return Mix(tuple(args.prompt_lens), tuple(args.output_lens), args.abort_fraction,
               args.sampled_fraction, args.vocab_size,
               prefill_abort_fraction=args.prefill_abort_fraction,
               logprob_fraction=args.logprob_fraction, stop_fraction=args.stop_fraction,
               stop_strings=stop_strings, long_prompt_len=args.long_prompt_len,
               long_prompt_fraction=args.long_prompt_fraction, long_prompt_above=threshold)


def exercise_planned(mix: Mix) -> dict[str, bool]:
    return dict(zip(EXERCISED, (mix.logprob_fraction > 0, mix.stop_fraction > 0,
                                mix.long_prompt_fraction > 0, mix.prefill_abort_fraction > 0)))


def commit() -> str:
    """The project commit under test: SPECGATE_COMMIT where the checkout travels without its
    history (the GPU host), else git's."""
    if os.environ.get("SPECGATE_COMMIT"):
        return os.environ["SPECGATE_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def load_and_sample(run: Run, url: str, wave: Wave, mix: Mix, pid: Optional[int],
                          incremental: bool, connect: Callable[[], aiohttp.ClientSession],
                          ) -> tuple[Load, list[dict], RequestResult, float]:
    """The load, the samples taken through it and the probe after it, and the load's seconds."""
    args, load, samples = run.args, Load(), []
    rid_prefix = f"soak-{secrets.token_hex(3)}"  # unique across soaks of one server
    start = loop_time()
    with open(run.dir / "samples.jsonl", "w") as sf, open(run.dir / "requests.jsonl", "w") as rf:
        write_sample, write_request = jsonl(sf), jsonl(rf)

        def on_sample(sample: dict) -> None:
            samples.append(sample)
            write_sample(sample)

        async def take() -> dict:
            t = loop_time() - start  # the load's clock, read here: nvidia-smi and urllib block a thread
            return await asyncio.to_thread(take_sample, url, pid, t, load)

        on_sample(await take())  # before the first request: the counters' baseline
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_until(stop, args.sample_interval, take, on_sample))
        async with connect() as session:
            try:
                await drive(session, url, wave, args.duration, mix.plans(args.seed, rid_prefix),
                            soak_start=start, timeout=args.request_timeout,
                            incremental=incremental, max_failures=args.max_failures, load=load,
                            on_result=lambda r: write_request(r.row()))
            finally:
                stop.set()
                await sampler
            last = await probe(session, url, rid_prefix, start, args.request_timeout)
    return load, samples, last, loop_time() - start


def soak(run: Run, url: str, pid: Optional[int], proc: Optional[subprocess.Popen],
         server_log: Optional[Path], *, connect: Callable[[], aiohttp.ClientSession] = client_session,
         run_load: Callable[[Coroutine], Any] = asyncio.run) -> int:
    """``server_log``: where the server this script started logs; None for an attached one.
    ``connect`` opens the load's HTTP session and ``run_load`` runs its event loop, whose clock
    the load reads: a test gives its own of both."""
    args = run.args
    try:
        info = http_json(url + "/server_info")
    except OSError as e:
        raise SystemExit(f"{url}/server_info: {e}")
    state = (info.get("internal_states") or [{}])[0]
    gate = state.get("spec_gate") or {}
    threshold = args.threshold or gate.get("threshold")
    if not threshold:
        raise SystemExit("the server reports no spec gate: pass --threshold for the wave")
    wave = make_wave(args, threshold, state.get("effective_max_running_requests_per_dp")
                     or info.get("max_running_requests") or 0)
    warmup = warmup_s(args, wave)  # before the load: a bad one must not cost a soak
    stop_strings = tuple(args.stop_strings) if args.stop_strings is not None else \
        calibrate_stop_strings(url, args.vocab_size, args.seed) if args.stop_fraction else ()
    mix = make_mix(args, threshold, stop_strings)
    run.note(f"# soak {args.duration:g} s on {url}, N={threshold}, {wave}, stop strings "
             f"{stop_strings}, server pid {pid}")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load, samples, last, elapsed_s = run_load(load_and_sample(
        run, url, wave, mix, pid, incremental=bool(info.get("incremental_streaming_output")),
        connect=connect))
    if server_log is not None:  # an attached server's exit and log are not ours to see
        time.sleep(IDLE_CHECK_WAIT_S)
    summary = {
        "name": args.name, "url": url, "commit": commit(),
        "attention_backend": state.get("attention_backend") or info.get("attention_backend"),
        "started": started, "elapsed_s": elapsed_s, "duration_s": args.duration,
        "stopped_early": load.stopped_early, "threshold": threshold, "wave": asdict(wave),
        "stop_strings": stop_strings,
        **verdict(load.counts, samples, alive=server_alive(proc, last),
                  pool_failures=None if server_log is None else pool_check_failures(server_log),
                  warmup=warmup, settle=wave.period, max_gpu_growth=args.max_gpu_growth,
                  max_host_growth=args.max_host_growth, min_switches=args.min_switches,
                  aborts_planned=args.abort_fraction + args.prefill_abort_fraction > 0,
                  exercised=load.exercised, exercise_planned=exercise_planned(mix),
                  log_stats=None if server_log is None else queue_and_retractions(server_log),
                  bursts_planned=wave.burst > 0),
    }
    (run.dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = markdown(summary)
    (run.dir / "summary.md").write_text(text)
    print(text + f"results: {run.dir}", flush=True)
    return 0 if summary["passed"] else 1


def parse_args(argv: list[str]) -> argparse.Namespace:
    ours, server_flags = split_server_flags(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="soak this running server instead of starting one")
    p.add_argument("--server-pid", type=int,
                   help="with --url: the server's launcher process, for host memory "
                        "(default: the process listening on the URL's port)")
    add_server_arguments(p, model_required=False, max_running_default="--high")
    p.add_argument("--threshold", type=int,
                   help="the gate's N; with --url, default: the server's")
    wave = p.add_argument_group("load")
    wave.add_argument("--duration", type=float, default=1200, help="seconds of load")
    wave.add_argument("--period", type=float, default=60, help="seconds per wave")
    wave.add_argument("--shape", choices=("triangle", "square"), default="triangle")
    wave.add_argument("--low", type=int, help="fewest requests in flight (default N/2)")
    wave.add_argument("--high", type=int, help="most requests in flight (default 2N)")
    wave.add_argument("--prompt-lens", type=int_list, default="16,128,512,2048",
                      help="prompt lengths in tokens, drawn uniformly")
    wave.add_argument("--output-lens", type=int_list, default="16,64,256,1024",
                      help="max_new_tokens, drawn uniformly")
    wave.add_argument("--abort-fraction", type=float, default=0.1,
                      help="share of requests the client drops mid-stream")
    wave.add_argument("--prefill-abort-fraction", type=float, default=0.05,
                      help="share the client drops before their first token (queued or in prefill)")
    wave.add_argument("--logprob-fraction", type=float, default=0.1,
                      help="share with return_logprob; each must get one logprob per token")
    wave.add_argument("--stop-fraction", type=float, default=0.1,
                      help="share with stop strings; each must end at one or run to its length")
    wave.add_argument("--stop-strings", type=lambda s: s.split(","),
                      help="comma-separated (default: two characters common in the model's "
                           "greedy outputs)")
    wave.add_argument("--long-prompt-len", type=int, default=6144,
                      help="tokens of a long prompt: several prefill chunks")
    wave.add_argument("--long-prompt-fraction", type=float, default=0.05,
                      help="share of long prompts among requests launched above N (the gate off)")
    wave.add_argument("--burst", type=int,
                      help="requests a burst adds to the wave (default: the server's "
                           "--max-running-requests, so that requests queue; 0: none)")
    wave.add_argument("--burst-every", type=float, default=240, help="seconds between bursts")
    wave.add_argument("--burst-seconds", type=float, default=20, help="seconds a burst lasts")
    wave.add_argument("--sampled-fraction", type=float, default=0.5,
                      help="share sampled (temperature 0.8, top_p 0.95); the rest greedy")
    wave.add_argument("--vocab-size", type=int, default=32000,
                      help="prompt token ids are drawn below this")
    wave.add_argument("--request-timeout", type=float, default=300,
                      help="seconds a request may take before it counts as hung")
    wave.add_argument("--max-failures", type=int, default=20,
                      help="stop the load after this many lost or hung requests")
    wave.add_argument("--seed", type=int, default=0)
    judge = p.add_argument_group("verdict")
    judge.add_argument("--sample-interval", type=float, default=10, help="seconds")
    judge.add_argument("--warmup", type=float,
                       help="seconds before memory is judged (default: two --period, and the "
                            "first burst where bursts are planned)")
    judge.add_argument("--max-gpu-growth", type=float, default=0.02)
    judge.add_argument("--max-host-growth", type=float, default=0.02)
    judge.add_argument("--min-switches", type=int, default=2)
    p.add_argument("--name", default="soak", help="results go to results/<date>-soak-<name>/")
    p.add_argument("--run-dir", type=Path, help="results directory (overrides --name)")
    p.add_argument("--dry-run", action="store_true", help="print the server command, run nothing")
    args = p.parse_args(ours)
    args.server_flags = server_flags
    if args.url:
        if server_flags or args.dry_run:
            p.error("server flags after -- and --dry-run need a server this script starts")
        args.url = args.url.rstrip("/")
    elif not (args.model_path and args.draft_model_path and args.threshold):
        p.error("give --url, or --model-path, --draft-model-path and --threshold")
    if args.threshold is not None and args.threshold < 1:
        p.error("--threshold: N >= 1")
    drafting_error = Speculation.from_args(args).why_not(["gate"])
    if drafting_error:
        p.error(drafting_error)
    if args.warmup is not None and not 0 <= args.warmup < args.duration:
        p.error("--warmup must be shorter than --duration")
    for name in ("abort_fraction", "prefill_abort_fraction", "logprob_fraction", "stop_fraction",
                 "long_prompt_fraction", "sampled_fraction"):
        if not 0 <= getattr(args, name) <= 1:
            p.error(f"--{name.replace('_', '-')}: a share in [0, 1], got {getattr(args, name)}")
    if args.abort_fraction + args.prefill_abort_fraction > 1:
        p.error("--abort-fraction and --prefill-abort-fraction add up to more than 1")
    if args.burst and not 0 < args.burst_seconds < args.burst_every:
        p.error("a burst needs 0 < --burst-seconds < --burst-every")
    if args.threshold and not args.max_running_requests:
        # The wave's peak: the batch never needs more, and fewer CUDA graphs start faster.
        args.max_running_requests = make_wave(args, args.threshold).high
    args.cuda_graph_max_bs = args.cuda_graph_max_bs or args.max_running_requests
    args.run_dir = args.run_dir or dated_run_dir(f"soak-{args.name}")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    run = Run.begin(args, argv)
    if args.url:
        return soak(run, args.url, args.server_pid or listening_pid(args.url), proc=None,
                    server_log=None)
    config, = server_configs(["gate"], [args.threshold], Speculation.from_args(args),
                                   run.dir)
    with server(run, config) as started:
        if args.dry_run:
            return 0
        proc = run.server_procs.get(config.name)
        if not started or proc is None:
            run.server_failed(config)
            return 1
        return soak(run, base_url(args), proc.pid, proc, server_log=run.server_log(config))


if __name__ == "__main__":
    sys.exit(main())
