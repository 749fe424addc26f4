"""The closed loop: each server's levels at concurrency C, one after another in one client
process, with the gate's counters, the server's decode log and its processes' CPU read around
each; and the unreported levels (a warm-up, a profiled or CPU-sampled one) beside them."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Optional

from benchmark.analysis import decode_log, ttft_stages
from benchmark.client import serving_session, ttft_probe
from benchmark.client.commands import bench_command, client_env, level_prompts
from benchmark.client.profiles import LevelProfile
from benchmark.client.scheduler_sampling import SchedulerSampling
from benchmark.servers import processes
from benchmark.servers.config import ServerConfig, base_url
from benchmark.servers.endpoints import gate_delta, gate_snapshot, http_request, reset_accept_length
from benchmark.servers.record import Run

# Closed levels run but not reported. --warm-up-level: a server's first level runs slower than
# the same level right after it, by a different amount per server, so an A/B whose first level
# is measured compares unequally warm servers. --profile-level: the profiler slows a server, a
# gated one more, so no measured level is traced. --cpu-profile-level: py-spy stops the
# scheduler for every sample it takes.
WARM_UP, PROFILED, CPU_PROFILED = "warm-up", "profiled", "cpu-profiled"

# A closed level to run: (server, C, purpose, rep), as level_plan's (C, purpose, rep).
PlannedLevel = tuple[ServerConfig, int, Optional[str], Optional[int]]
PROBE_PROMPTS = 64  # distinct prompts the TTFT probes cycle through


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
    reset_accept_length(url, run.note)
    before = gate_snapshot(url)
    stages_before = stage_totals(run, url)
    server_log = run.server_log(config)
    log_offset = server_log.stat().st_size
    server = run.server_procs.get(config.name)
    pids = processes.server_processes(server.pid) if server else {}
    machine_before, per_cpu_before = (processes.machine_cpu_times(),
                                      processes.machine_cpu_times(per_cpu=True))
    threads_before, started = processes.thread_cpu_seconds(pids), time.monotonic()
    with level_probe(run, url, dataset) as probe, processes.watch_cpu(pids.get("scheduler")) as scheduler_cpus:
        exit_code = client.run(serving_session.arguments_of(cmd), run.logs / log)
    if exit_code != 0:
        run.fail(f"{tag} (see logs/{log})")
        return
    threads_after, seconds = processes.thread_cpu_seconds(pids), time.monotonic() - started
    cpu_busy = processes.busiest_thread_share(threads_before, threads_after, seconds)
    cpu_machine = processes.machine_share(machine_before, processes.machine_cpu_times(),
                                                 threads_before, threads_after, seconds)
    cpu_placement = processes.placement(per_cpu_before, processes.machine_cpu_times(per_cpu=True),
                                               scheduler_cpus, processes.smt_siblings(),
                                               processes.numa_node_count())
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


# What runs around an unreported level, by its purpose (WARM_UP has nothing around it).
LEVEL_WRAPPERS = {PROFILED: LevelProfile, CPU_PROFILED: SchedulerSampling}


def level_probe(run: Run, url: str, dataset: Path) -> AbstractContextManager:
    """With ``--ttft-probe-interval``, the probe of one measured level (ttft_split.py)."""
    interval = run.args.ttft_probe_interval
    if not interval:
        return nullcontext()
    return ttft_probe.Probe(url, ttft_probe.prompt_texts(dataset, PROBE_PROMPTS), interval)


def stage_totals(run: Run, url: str) -> Optional[ttft_stages.Totals]:
    """With ``--ttft-stages``, the server's TTFT-stage histogram totals (ttft_stages.py)."""
    if not run.args.ttft_stages:
        return None
    return ttft_stages.totals(http_request(url + "/metrics").decode())


def summary_line(raw: Path, delta: Optional[dict]) -> str:
    row = json.loads(raw.read_text().splitlines()[-1])
    gate = "" if delta is None else (f" spec/plain steps={delta['decode_steps_spec']}/"
                                     f"{delta['decode_steps_plain']} switches={delta['switches']}")
    return (f"{row['tag']:24s} out_tok/s={row['output_throughput']:9.1f} "
            f"tpot_med={row['median_tpot_ms']:7.2f}ms accept={row.get('accept_length')}{gate}")
