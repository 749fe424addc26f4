"""Workload shift: the same schedule of domains and concurrency against each configuration.

The pair has one accept length per domain (``model_pair.py --accept-length 3.2,1.3``); the
prompts change domain every ``--phase-s`` and the concurrency steps through ``--concurrency``
every ``--concurrency-s`` (shift_load.py). Each configuration serves the whole schedule, in
``--rounds`` rounds; with ``--interleave`` all servers stay up, sharing the GPU, and each round
runs them in turn, the order reversed every other round. Every row holds the configuration's
output throughput, its greedy outputs checked against the pair's design, and its ``spec_gate``
state from ``/server_info`` before and after.

    python -m benchmark.client.shift --model-path P/target --draft-model-path P/draft --design P/design.json \\
        --name 8b --configs plain,spec,gate,gate-auto,upstream-adaptive --thresholds 4,9,31 -- \\
        --attention-backend triton

Everything after ``--`` is passed to every server. It writes shift.jsonl (a row a round and
configuration) and summary.md (shift_tables.py) to the run folder, whose name holds ``shift``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Optional

from benchmark.analysis.shift_tables import summary_markdown
from benchmark.cli import int_list
from benchmark.client.shift_load import ShiftSchedule, Walk, run_load
from benchmark.client.soak_load import client_session
from benchmark.servers.config import (CONFIG_KINDS, ServerConfig, Speculation, UpstreamOptions,
                                      add_server_arguments, add_upstream_argument, base_url, server_configs,
                                      side_by_side, split_server_flags)
from benchmark.servers.endpoints import gate_delta, gate_snapshot
from benchmark.servers.launch import server
from benchmark.servers.record import Run, dated_run_dir


def parse_args(argv: list[str]) -> argparse.Namespace:
    ours, server_flags = split_server_flags(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_arguments(p, model_required=True, max_running_default="the largest --concurrency")
    add_upstream_argument(p)
    p.add_argument("--design", type=Path, required=True, help="the pair's design.json (its domains)")
    p.add_argument("--configs", type=lambda s: s.split(","), default="plain,spec,gate,gate-auto,upstream-adaptive",
                   help=f"comma list of {', '.join(CONFIG_KINDS)}")
    p.add_argument("--thresholds", type=int_list, default=[],
                   help="N for each gate and upstream-gate server, comma list")
    load = p.add_argument_group("load")
    load.add_argument("--phases", type=int, default=6, help="domain phases in a round")
    load.add_argument("--phase-s", type=float, default=60, help="seconds a domain lasts")
    load.add_argument("--concurrency", type=int_list, default=[4, 64, 16, 32],
                      help="closed-loop concurrency levels, in turn")
    load.add_argument("--concurrency-s", type=float, default=20, help="seconds a level lasts")
    load.add_argument("--output-len", type=int, default=256)
    load.add_argument("--prompt-len", type=int, default=128)
    load.add_argument("--rounds", type=int, default=3, help="the schedule this many times per server")
    load.add_argument("--seed", type=int, default=0)
    p.add_argument("--interleave", action="store_true",
                   help="every server up at once, each round run on them in turn")
    p.add_argument("--name", default="shift", help="results go to results/<date>-shift-<name>/")
    p.add_argument("--run-dir", type=Path, help="results directory (overrides --name)")
    p.add_argument("--dry-run", action="store_true", help="print the server commands, run nothing")
    args = p.parse_args(ours)
    args.server_flags = server_flags
    if not set(args.configs) <= set(CONFIG_KINDS):
        p.error(f"--configs: choose from {', '.join(CONFIG_KINDS)}, got {args.configs}")
    drafting_error = Speculation.from_args(args).why_not(args.configs)
    if drafting_error:
        p.error(drafting_error)
    if {"gate", "upstream-gate"} & set(args.configs) and not args.thresholds:
        p.error("--thresholds: the N of each gate and upstream-gate server")
    try:  # the schedule's numbers first; its domains are the pair's, read where the load runs
        args.schedule = ShiftSchedule(1, args.phases, args.phase_s, tuple(args.concurrency), args.concurrency_s)
        if not args.dry_run:
            args.walk = Walk(json.loads(args.design.read_text()))
            args.schedule = replace(args.schedule, domains=args.walk.domains)
    except (OSError, ValueError, KeyError) as e:
        p.error(f"--design / the schedule: {e}")
    if args.rounds < 1:
        p.error("--rounds: at least 1")
    args.max_running_requests = args.max_running_requests or max(args.concurrency)
    args.cuda_graph_max_bs = args.cuda_graph_max_bs or args.max_running_requests
    run_dir = args.run_dir or dated_run_dir(f"shift-{args.name}")
    if "shift" not in run_dir.name:  # results folders of this scenario are found by the name
        p.error(f"--run-dir: the folder's name must contain 'shift', got {run_dir.name}")
    args.run_dir = run_dir
    return args


def serve_schedule(run: Run, config: ServerConfig, round_index: int) -> None:
    """One round of the schedule against a running server; a row in shift.jsonl."""
    args, url = run.args, base_url(run.args, config)

    async def load():
        async with client_session() as session:
            async def post(payload: dict) -> dict:
                async with session.post(url + "/generate", json=payload) as resp:
                    resp.raise_for_status()
                    return await resp.json()

            return await run_load(post, args.schedule, args.walk, output_len=args.output_len,
                                  prompt_len=args.prompt_len, seed=args.seed + round_index)

    before = gate_snapshot(url)
    result = asyncio.run(load())
    after = gate_snapshot(url)
    row = {"config": config.name, "round": round_index, "phase_s": args.schedule.phase_s, **result.summary(),
           "gate_before": before, "gate": after, "gate_delta": gate_delta(before, after)}
    with open(run.dir / "shift.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    run.note(f"# {config.name} round {round_index}: {row['output_throughput']:.0f} tok/s, "
             f"{row['requests']} requests, {row['mismatched']} mismatched, {row['errors']} errors")
    if row["mismatched"] or row["errors"]:
        run.fail(f"{config.name} round {round_index}: {row['mismatched']} outputs off the design, "
                 f"{row['errors']} errors {row['first_errors']}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    run = Run.begin(args, argv)
    configs = server_configs(args.configs, args.thresholds, Speculation.from_args(args), run.dir,
                             UpstreamOptions.from_args(args))
    if args.interleave:
        configs = side_by_side(args, configs)
        with ExitStack() as servers:
            up = []
            for config in configs:
                if servers.enter_context(server(run, config)):
                    up.append(config)
                else:
                    run.server_failed(config)
            if not args.dry_run:
                for r in range(args.rounds):
                    for config in (up if r % 2 == 0 else up[::-1]):
                        serve_schedule(run, config, r)
    else:
        for config in configs:
            with server(run, config) as started:
                if not started:
                    run.server_failed(config)
                elif not args.dry_run:
                    for r in range(args.rounds):
                        serve_schedule(run, config, r)
    if not args.dry_run and (run.dir / "shift.jsonl").exists():
        rows = [json.loads(line) for line in (run.dir / "shift.jsonl").read_text().splitlines()]
        (run.dir / "summary.md").write_text(summary_markdown(rows))
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
