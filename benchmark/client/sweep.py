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
import math
import shutil
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from benchmark.analysis import find_threshold
from benchmark.cli import int_list
from benchmark.client import prompts
from benchmark.client.bursty import bursty, parse_phases
from benchmark.client.dataset import prepare_dataset
from benchmark.client.levels import closed_loop, interleaved_plan, level_plan
from benchmark.client.profiles import LEVEL_PROFILE_DELAY_S, profile_decode, profile_prefill
from benchmark.servers.config import (CONFIG_KINDS, GATE_KINDS, ServerConfig, Speculation, UpstreamOptions,
                                      add_server_arguments, add_upstream_argument, server_configs, side_by_side,
                                      split_server_flags)
from benchmark.servers.launch import server
from benchmark.servers.record import Run, dated_run_dir

AUTO = "auto"

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


def parse_args(argv: list[str]) -> argparse.Namespace:
    ours, server_flags = split_server_flags(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arguments(p, model_required=True, max_running_default="the largest concurrency")
    add_upstream_argument(p)
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
                        "report.py reports a level by its median run, as one level's throughput "
                        "moves from one run to the next on the same server")
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
    drafting_error = Speculation.from_args(args).why_not(args.configs)
    if drafting_error:
        p.error(drafting_error)
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
        for config in server_configs([kind], thresholds or [], spec, run.dir, UpstreamOptions.from_args(run.args)):
            serve_and_load(run, config, dataset)


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
        configs = server_configs(args.configs, args.thresholds, spec, run.dir, UpstreamOptions.from_args(args))
        serve_interleaved(run, side_by_side(args, configs), dataset)
    else:
        serve_one_by_one(run, spec, dataset)
    if not args.dry_run:
        shutil.rmtree(run.work, ignore_errors=True)
    print(f"results: {run.dir}" + (f"; {len(run.failures)} failed" if run.failures else ""))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
