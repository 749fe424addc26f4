"""The bursty scenario: Poisson arrivals whose rate changes by phase, each phase its own client
process started on the phase's schedule (0.5.17's client has one rate per run), so a burst's
requests finish during the next quiet phase as they would in production."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from benchmark.client.commands import bench_command, run_bench
from benchmark.servers.config import ServerConfig, base_url
from benchmark.servers.endpoints import gate_delta, gate_snapshot, reset_accept_length
from benchmark.servers.record import Run


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
    reset_accept_length(url, run.note)
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
