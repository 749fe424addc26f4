"""Output lengths spread around a mean, so that a closed loop's requests do not move in lockstep.

With one output length for every request, a closed loop at C = max running requests runs in
waves: C requests are admitted together, decode together, finish together, and their successors
prefill back to back before anyone decodes. A small timing difference (one slower prefill, one
request admitted a step later) splits a wave into groups that then stay apart, and each group's
prefills stall the others' decoding: which of the two a level settles in moves a server's own
median TPOT from run to run (benchmark/README.md, "Why each measurement"). Serving traffic has
no waves.

``sweep.py --output-len L --output-len-spread S`` draws each prompt's output length uniformly
from L·(1 - S) to L·(1 + S) and writes it into a copy of the dataset the only way SGLang's
custom loader takes one per prompt: as the token count of the prompt's answer
(sglang/benchmark/datasets/custom.py counts ``tokenizer.encode(answer)``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from benchmark.client.prompts import write_jsonl

# SGLang's custom loader drops requests whose output is under 2 tokens; the sweep's own floor
# for --output-len is 4 (sweep.MIN_OUTPUT_LEN).
MIN_LENGTH = 4
# decode(ids[:k]) need not encode back to k tokens: byte-level merges at the cut can add or take
# one. Cutting a little shorter and topping up with words the pre-tokenizer keeps apart settles it.
MAX_SHORTER_CUTS = 8
FILLER_WORD = " x"


def length_range(mean: int, spread: float) -> tuple[int, int]:
    """The lengths drawn: mean·(1 - spread) to mean·(1 + spread), both included."""
    low = max(MIN_LENGTH, round(mean * (1 - spread)))
    return low, max(low, round(mean * (1 + spread)))


def spread_lengths(count: int, mean: int, spread: float, seed: int) -> list[int]:
    low, high = length_range(mean, spread)
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


def answer_of_length(tokenizer, answer: str, length: int) -> str:
    """Text from ``answer`` (repeated as needed) that ``tokenizer.encode``, as the loader calls
    it, turns into exactly ``length`` tokens."""
    specials = len(tokenizer.encode(""))  # BOS and the like, which the loader counts too
    ids = tokenizer.encode(answer, add_special_tokens=False)
    repeats = -(-length // max(len(ids), 1)) + 1  # one more: joins can merge tokens
    ids = tokenizer.encode("\n".join([answer] * repeats), add_special_tokens=False)
    longest = length - specials
    for cut in range(longest, max(longest - MAX_SHORTER_CUTS, 0) - 1, -1):
        text = tokenizer.decode(ids[:cut])
        missing = length - len(tokenizer.encode(text))
        if missing >= 0:
            text += FILLER_WORD * missing
            if len(tokenizer.encode(text)) == length:
                return text
    raise ValueError(f"no cut of the answer encodes to {length} tokens")


def write_spread_dataset(source: Path, target: Path, tokenizer, mean: int, spread: float,
                         seed: int) -> str:
    """Copy the custom dataset ``source`` to ``target`` with each answer cut to a drawn length;
    returns the copy's sha256."""
    rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    for row, length in zip(rows, spread_lengths(len(rows), mean, spread, seed)):
        answer = row["conversations"][1]
        answer["content"] = answer_of_length(tokenizer, answer["content"], length)
    return write_jsonl(rows, target)
