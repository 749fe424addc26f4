"""The prompts every level of a sweep samples: ``--dataset``, or the coding and tool-call prompts
of ``client.prompts``, with the answers cut to spread output lengths under
``--output-len-spread`` (``client.output_spread``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.client import output_spread, prompts
from benchmark.client.commands import level_prompts
from benchmark.servers.record import Run


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
        run.note(f"# dataset: python -m benchmark.client.prompts --rows {args.rows} --prompt-seed "
                 f"{args.prompt_seed} --tool-fraction {args.tool_fraction} --context-chars "
                 f"{args.context_chars} (Python {sys.version.split()[0]} stdlib"
                 f"{''.join(f', {s}' for s in args.source or [])}) sha256 {digest}")
    return path
