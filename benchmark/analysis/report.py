"""Tables and a plot derived from a sweep's raw results.

    python benchmark/report.py benchmark/results/<run> [more runs ...]

Reads ``raw.jsonl`` (closed loop), ``gate.jsonl`` (gate counters) and ``bursty.jsonl``
(per-request details) of each run; with several runs the rows are pooled and, for the same
tag, the later row wins. A level the sweep repeated (``--repeat-levels``: tags ``...,rep=I``) is
reported by its median run, with every run's throughput in a table of its own. Writes
``report.md`` (also printed) and, if matplotlib is installed (``pip install
'sglang-specgate[bench]'``), ``throughput.png`` into the first run directory (or ``--out``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from benchmark.analysis import kernel_profile, ttft_split, ttft_stages
from benchmark.analysis.auto_verdict import auto_section
from benchmark.analysis.markdown_table import md_table
from benchmark.analysis.profile_tables import (after_prefill_table, gpu_by_span_table, host_calls_table,
                                               host_ops_table, host_pace_table, host_time_table,
                                               idle_causes_table, prefill_interval_table, profile_table)
from benchmark.analysis.sweep_results import Results, load
from benchmark.analysis.sweep_tables import (against_plain_table, bursty_tables, closed_table,
                                             envelope_table, host_lengths_table, order_balanced_table,
                                             repeats_table, run_by_run_rows, setup_line,
                                             versus_plain_table)
from benchmark.servers import processes


@dataclass(frozen=True)
class LevelSection:
    """Per-level measurements of gate.jsonl's ``field`` (a dict), tabled against plain's."""

    field: str
    keys: Iterable[str]  # reread for every row: a tuple or a dict
    headers: list[str]
    digits: int
    title: str
    caption: str


LEVEL_SECTIONS = (
    LevelSection("ttft_stages", ttft_stages.STAGES, [f"{s} ms" for s in ttft_stages.STAGES], 1,
                 "## Time to first token by stage, server side (`--ttft-stages`)",
                 "Means per request over each level, from SGLang's histograms (`ttft_stages.py`). "
                 "queue: waiting to join a batch; prefill: from joining one until the scheduler "
                 "processed its prefill's result; ttft: the tokenizer manager's, the server's "
                 "whole share. In brackets: against plain at that C."),
    LevelSection("ttft_split", ttft_split.STAGES, [f"{s} ms" for s in ttft_split.STAGES], 1,
                 "## Time to first token across the server's processes (`--ttft-probe-interval`)",
                 "Medians over one-token greedy requests sent every few seconds during the level, "
                 "split by the stamps SGLang puts in their meta_info (`ttft_split.py`). tokenize: "
                 "received until sent to the scheduler; to_scheduler: until in its waiting queue; "
                 "queue; prefill: until the scheduler processed the prefill; back: until the "
                 "tokenizer manager handled the output. In brackets: against plain at that C."),
    LevelSection("cpu_busy", processes.ROLES, list(processes.ROLES), 2,
                 "## Busiest thread of each server process",
                 "CPU seconds of each process's busiest thread over the level, per second "
                 "(`servers/processes.py`; 1.00: a whole core). tokenizer: the launched process "
                 "(HTTP server and tokenizer manager). Each is one Python event loop: one near "
                 "1.00 is where requests or outputs queue. In brackets: against plain at that C."),
    LevelSection("cpu_machine", processes.MACHINE_KEYS,
                 ["machine cores busy", "steal %", "scheduler's other threads"], 2,
                 "## The machine's CPU over each level",
                 "From the machine's CPU times and the scheduler's threads (`servers/processes.py`, "
                 "`machine_share`): the cores the whole machine kept busy, the client's included; "
                 "steal, the share of its CPU time the hypervisor gave elsewhere (0 where the "
                 "kernel counts none); the cores the scheduler's other threads kept busy. The "
                 "scheduler's own thread reads busy whether it computes or waits on the GPU, so "
                 "these say whether a server shared a slower or busier host. In brackets: against "
                 "plain at that C."),
    LevelSection("cpu_placement", processes.PLACEMENT_KEYS,
                 ["CPUs the scheduler ran on", "its core's other thread busy", "NUMA nodes"], 2,
                 "## Where each scheduler ran",
                 "Sampled every 0.5 s through the level (`servers/processes.py`, `placement`): how many "
                 "CPUs the scheduler's event loop was seen on; how busy the other hardware thread "
                 "of its core was (the busiest one, averaged over the samples; absent without SMT), "
                 "which slows every host call the scheduler makes; the machine's NUMA nodes. In "
                 "brackets: against plain at that C."),
)


def markdown(res: Results, titles: list[str], slo_ttft_ms: float, slo_tpot_ms: float,
             plot: Optional[str]) -> str:
    parts = [f"# Sweep: {', '.join(titles)}", setup_line(res)]
    if res.closed:
        parts += ["## Closed loop (`--max-concurrency C --request-rate inf`)", closed_table(res),
                  "accept len: the server's average over that level (reset before each level); "
                  "under a gate it mixes speculative and plain steps. steps: decode steps the "
                  "gate ran speculative / plain during the level, from `/server_info`."]
    if res.repeats:
        parts += ["## Repeated levels (`--repeat-levels`)", repeats_table(res),
                  "Each configuration's level at C run several times back to back on one "
                  "server; the tables above and below report its median run (gated / plain: "
                  "median against median)."]
    pairs = run_by_run_rows(res)
    if pairs:
        parts += ["## Run by run against plain",
                  md_table(["config", "C", "tok/s vs plain's run of the same number, in order",
                            "median", "lowest", "highest", "median TPOT vs plain, in order",
                            "their median", "median ITL", "mean TTFT"], pairs),
                  "Run I of a gate against run I of plain. With `sweep.py --interleave` both "
                  "servers stayed up and each pair ran back to back, so host and time drift "
                  "cancel in the ratio; without it the runs of a pair were a server start apart."]
    if res.envelope():
        parts += ["## Envelope: gated / max(plain, always-on)", envelope_table(res)]
    parts += auto_section(res) or []
    if "plain" in res.closed and res.gated():
        parts += ["## Gated / plain (above N the gate is off: this is what being off costs)",
                  versus_plain_table(res),
                  "steady decode: the median throughput of the scheduler's decode log lines "
                  "with the batch at >= 90 % of C (`decode_log.py`), without the drain at the "
                  "end of a level, where the batch falls under N and the gate speculates again. "
                  "decode only: the same over the log intervals no prefill interrupted (a "
                  "decode step's own cost; at a full batch two servers' prefills can come at "
                  "different rates). prefill batches: those the server log shows during the "
                  "level, each one an interruption of decoding. ms a step, a prefill: a "
                  "least-squares line through the steady log intervals' durations against the "
                  "prefill batches in each: a decode step alone, and what one prefill batch "
                  "costs the decoding requests (`decode_log.prefill_cost`). "
                  "mean TTFT: a gated server's prefill also keeps the draft's KV cache: with the "
                  "gate on it runs the draft over the prompt, and with it off it buffers one row "
                  "a prompt token for the plain steps after it to write (`deferred_draft_kv.py`)."]
    host_lengths = host_lengths_table(res)
    if host_lengths:
        parts += ["## Host sequence lengths (`host_seq_lens.py`)", host_lengths,
                  "Over the median run of each level: decode batches whose sequence lengths the "
                  "gate gave the scheduler from the host (plain steps), those that waited for the "
                  "GPU's copy (speculative steps), and lengths served that the GPU's "
                  "contradicted, which must be 0 (one served batch in 8 is checked since "
                  "c83b79f, every one before)."]
    for section in LEVEL_SECTIONS:
        if any(row.get(section.field) for row in res.gate.values()):
            parts += [section.title, against_plain_table(res, section.field, section.keys,
                                                         section.headers, section.digits),
                      section.caption]
    if plot:
        parts.append(f"![throughput vs concurrency]({plot})")
    if "decode" in res.profiles:
        parts += ["## Decode step profile (`--profile-concurrency`)",
                  profile_table(res.profiles["decode"], "step", with_busy=True),
                  "GPU kernel time per forward step from SGLang's `/start_profile` over steady "
                  "decode; GPU busy: kernel time over the profiled span (the rest is idle, "
                  "waiting on the CPU). Full kernel lists in `profile-<config>.json`."]
    if "level" in res.profiles:
        parts += ["## Loaded level profile (`--profile-level`)",
                  profile_table(res.profiles["level"], "step", with_busy=True),
                  prefill_interval_table(res.profiles["level"]),
                  "Forward steps of a closed level as its load mixed prefills and decode steps, "
                  "in an extra level at that C after the measured ones (the profiler slows a "
                  "server; sweeps before `af04a09` traced the measured level itself). "
                  "A prefill's interval: from the decode step before it to the one after it, what "
                  "it cost the decoding requests; GPU busy: the kernel time in it, the rest the "
                  "GPU waited on the CPU (`kernel_profile.prefill_intervals`: steps told apart by "
                  "the host's step spans with `--profile-host`, else by Triton's kernel names). Kernels in "
                  "`profile-level-<config>.json`."]
        # With --profile-host: where the host went, each table with what it says.
        for table, caption in (
            (idle_causes_table,
             "What the host was doing while the GPU paused (`--profile-host`, "
             "`kernel_profile.idle_causes`): waited, it had been held by a wait on the "
             "GPU (named) that returned inside the pause, then launched; late, no wait "
             "held it, it launched late from the span named. The host recording slows "
             "the host: these pauses are longer than in an unrecorded level."),
            (host_time_table,
             "How long each span held the host a step, ms: working (waiting on the GPU) "
             "(`kernel_profile.host_time`; inclusive, so `scheduler.run_batch` holds the "
             "`step[...]` forwards it launched). The scheduler keeps the GPU fed while its "
             "working time a step stays under the GPU's; recorded, as above."),
            (host_pace_table,
             "How fast each server's host ran: the median length of host calls that "
             "every server's forwards make alike (`kernel_profile.host_pace`), and their "
             "geometric mean against plain's. Where it is well above 1.00, that server's "
             "host ran slower (a busier or slower core), and its host-bound gaps and host "
             "time above say so rather than what its code costs."),
            (host_calls_table,
             "What a forward step cost the host: the host calls (torch ops, nested ones "
             "included, and CUDA calls) in each `scheduler.run_batch` holding a step of "
             "that kind, and how long it held the host, medians "
             "(`kernel_profile.host_calls_per_step`). The count does not depend on how "
             "fast the host ran; the time does, and is recorded, as above. By span: the "
             "calls no other call holds, by the innermost annotated span around each, "
             "mean a step (work done every few steps counts by its share)."),
            (host_ops_table,
             "Where that host time went: the top-level calls above by innermost span and "
             "name, the "
             f"{kernel_profile.TOP_LEVEL_OPS} that held the host longest, mean µs a step "
             "(`kernel_profile.host_calls_per_step`), recorded: the calls to cut first."),
            (gpu_by_span_table,
             "What a forward step cost the GPU, by the span that launched it: the kernels, "
             "copies and memsets launched in each kind of step, by the innermost annotated "
             "span around the launch, mean µs a step (`kernel_profile.host_calls_per_step`); "
             "a step's own forward is its `step[...]` span."),
            (after_prefill_table,
             "The host ms of a decode step by its place after the last prefill, medians "
             "(`kernel_profile.host_calls_per_step`): after a prefill bound by the host, "
             "the GPU waits for the first."),
        ):
            made = table(res.profiles["level"])
            if made:
                parts += [caption, made]
    if "prefill" in res.profiles:
        parts += ["## Prefill wave profile (`--profile-prefill`)",
                  profile_table(res.profiles["prefill"], "wave", with_busy=False),
                  "GPU kernel time of one wave: C requests sent at once to the idle server, "
                  "their prefill and the decode steps of their 4 output tokens. The span also "
                  "holds the client's start, so no busy fraction. Kernels in "
                  "`profile-prefill-<config>.json`."]
    if res.bursty:
        parts += [f"## Bursty (SLO: TTFT ≤ {slo_ttft_ms:g} ms, TPOT ≤ {slo_tpot_ms:g} ms)",
                  bursty_tables(res, slo_ttft_ms, slo_tpot_ms),
                  "goodput: requests that met both SLOs per second of the scenario's nominal "
                  "length (the sum of its phases)."]
    return "\n\n".join(parts) + "\n"


def plot_throughput(res: Results, path: Path) -> bool:
    """Throughput vs concurrency and the envelope ratio; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 8),
                                      gridspec_kw={"height_ratios": [2, 1]})
    color = {name: f"C{i}" for i, name in enumerate(res.closed)}  # same line, both panels
    for name, by_c in res.closed.items():
        cs = sorted(by_c)
        top.plot(cs, [by_c[c]["output_throughput"] for c in cs], marker="o", label=name,
                 color=color[name])
    env = res.envelope()
    if env:
        top.plot(list(env), list(env.values()), "k--", linewidth=1, label="max(plain, spec)")
        for name in res.gated():
            cs = [c for c in env if c in res.closed[name]]
            bottom.plot(cs, [res.closed[name][c]["output_throughput"] / env[c] for c in cs],
                        marker="o", color=color[name])
        bottom.axhline(1.0, color="k", linestyle="--", linewidth=1)
    levels = sorted({c for by_c in res.closed.values() for c in by_c})
    top.set_xscale("log", base=2)
    top.set_xticks(levels, [str(c) for c in levels])
    top.set_ylabel("output tokens / s")
    top.legend()
    top.grid(True, alpha=0.3)
    bottom.set_ylabel("gated / max(plain, spec)")
    bottom.set_xlabel("concurrency (closed loop)")
    bottom.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="sweep results directories")
    parser.add_argument("--out", type=Path, help="where to write (default: the first run)")
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=20.0)
    parser.add_argument("--order-balanced", action="store_true",
                        help="the runs are one A/B with its servers started in different orders "
                        "(plans/start_order.sh): table each gate against plain in each and their "
                        "geometric mean, into order-balanced.md")
    args = parser.parse_args(argv)
    out = args.out or args.runs[0]
    out.mkdir(parents=True, exist_ok=True)
    if args.order_balanced:
        text = order_balanced_table({run.name: load([run]) for run in args.runs}) + "\n"
        (out / "order-balanced.md").write_text(text)
        print(text)
        return
    res = load(args.runs)
    if not res.closed and not res.bursty:
        raise SystemExit(f"no results in {', '.join(map(str, args.runs))}")
    plot = "throughput.png" if res.closed and plot_throughput(res, out / "throughput.png") else None
    text = markdown(res, [r.name for r in args.runs], args.slo_ttft_ms, args.slo_tpot_ms, plot)
    (out / "report.md").write_text(text)
    print(text)
    if res.closed and plot is None:
        print("(no plot: matplotlib is not installed; pip install 'sglang-specgate[bench]')")


if __name__ == "__main__":
    main()
