"""The pair's design: a walk through ``hidden_size`` tokens that is the target's language, the
"good" coordinates where the draft proposes the right next token, and the accept length they
give, drawn from a seed on the CPU so that every device builds the same pair."""

from __future__ import annotations

from dataclasses import dataclass

import torch

VOCAB = 32000
NUM_SPECIAL = 3  # <unk>, <s>, </s>: never in the walk, so the target never ends a request
NUM_STEPS = 3  # --speculative-num-steps the accept length is designed for
MAX_POSITIONS = 8192  # max_position_embeddings of both models
SHAPES = {  # Llama-3-70B and -8B, Llama-3.2-1B-like, a CPU test shape (>= 7 layers: distinct aux layers)
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                num_attention_heads=64, num_key_value_heads=8),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8),
    "tiny": dict(hidden_size=256, intermediate_size=512, num_hidden_layers=8,
                 num_attention_heads=4, num_key_value_heads=2),
}


def head_dim(dims: dict) -> int:
    return dims["hidden_size"] // dims["num_attention_heads"]


def expected_accept_length(q: float, steps: int = NUM_STEPS) -> float:
    return sum(q**k for k in range(steps + 1))


def solve_q(accept_length: float, steps: int = NUM_STEPS) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: expected_accept_length is increasing on [0, 1]
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_accept_length(mid, steps) < accept_length else (lo, mid)
    return (lo + hi) / 2


def mean_accept_length(good: torch.Tensor, nxt: torch.Tensor, steps: int = NUM_STEPS) -> float:
    """Accept length averaged over every coordinate as the start of a draft chain."""
    at, run, total = torch.arange(len(nxt)), torch.ones(len(nxt), dtype=torch.bool), 1.0
    for _ in range(steps):
        run &= good[at]
        total += run.double().mean().item()
        at = nxt[at]
    return total


def simulate_serving(good: torch.Tensor, nxt: torch.Tensor, output_len: int = 256,
                     steps: int = NUM_STEPS) -> float:
    """What SGLang reports: sum of (correct drafts + 1) over all verifies / number of verifies
    (managers/scheduler_components/metrics_reporter.py:364-365), one request per start coordinate.
    The prefill gives the first token; each verify then moves the walk by accepted + 1."""
    at = torch.arange(len(nxt))
    made = torch.ones(len(nxt), dtype=torch.long)
    tokens = verifies = 0
    while (live := made < output_len).any():
        run, accepted, p = live.clone(), torch.zeros_like(made), at.clone()
        for _ in range(steps):
            run &= good[p]
            accepted += run
            p = nxt[p]
        tokens += int((accepted + 1)[live].sum())
        verifies += int(live.sum())
        for k in range(steps + 1):  # advance each live request by accepted + 1 tokens
            at = torch.where(live & (k <= accepted), nxt[at], at)
        made += torch.where(live, accepted + 1, 0)
    return tokens / verifies


@dataclass
class Design:
    shape: str
    seed: int
    accept_length: float
    walk_tokens: torch.Tensor  # [n] token id owning coordinate c
    coord: torch.Tensor  # [VOCAB] coordinate of every token
    nxt: torch.Tensor  # [n] the cycle: the token after coordinate c is walk_tokens[nxt[c]]
    good: torch.Tensor  # [n] the draft proposes walk_tokens[nxt[c]] right after coordinate c
    kv_probe_offset: int = 0  # > 0: draft and target outputs need their KV entry that many tokens back

    @property
    def dims(self) -> dict:
        return SHAPES[self.shape]

    def continuation(self, last_token: int, length: int) -> list[int]:
        """The target's greedy output after a prompt ending in ``last_token``: the walk from its
        coordinate (the residual stream is the current token's embedding alone, so nothing
        earlier in the prompt counts, except that with a KV probe the prompt must follow the
        walk). Any server of the pair, speculative or not, must emit it."""
        out, c = [], int(self.coord[last_token])
        for _ in range(length):
            c = int(self.nxt[c])
            out.append(int(self.walk_tokens[c]))
        return out

    def summary(self) -> dict:
        n = len(self.nxt)
        order, c = [], 0
        for _ in range(n):  # the walk in cycle order, starting from coordinate 0
            order.append(int(self.walk_tokens[c]))
            c = int(self.nxt[c])
        return {
            "shape": self.shape, "seed": self.seed, "num_steps": NUM_STEPS,
            "accept_length": self.accept_length, "q": solve_q(self.accept_length),
            "expected_accept_length": expected_accept_length(solve_q(self.accept_length)),
            "good_fraction": self.good.double().mean().item(),
            "mean_accept_length": mean_accept_length(self.good, self.nxt),
            "simulated_serving_accept_length": simulate_serving(self.good, self.nxt),
            "kv_probe_offset": self.kv_probe_offset, "walk_size": n, "walk": order,
            "good_tokens": sorted(int(t) for t in self.walk_tokens[self.good]),
        }


def make_design(shape: str, accept_length: float, seed: int, kv_probe_offset: int = 0) -> Design:
    if not 1.0 <= accept_length <= NUM_STEPS + 1:
        raise ValueError(f"--accept-length must be in [1, {NUM_STEPS + 1}], got {accept_length}")
    if not 0 <= kv_probe_offset < MAX_POSITIONS:
        raise ValueError(f"--kv-probe-offset must be in [0, {MAX_POSITIONS}), got {kv_probe_offset}")
    n = SHAPES[shape]["hidden_size"]
    g = torch.Generator().manual_seed(seed)
    walk_tokens = NUM_SPECIAL + torch.randperm(VOCAB - NUM_SPECIAL, generator=g)[:n]
    coord = torch.randint(0, n, (VOCAB,), generator=g)
    coord[walk_tokens] = torch.arange(n)
    cycle = torch.randperm(n, generator=g)
    nxt = torch.empty(n, dtype=torch.long)
    nxt[cycle] = cycle.roll(-1)
    # One uniform per coordinate; the k smallest are good. The same seed then gives nested good
    # sets across accept lengths, and mean_accept_length grows with k, so bisect k to hit A.
    rank = torch.rand(n, generator=g).argsort().argsort()
    lo, hi = 0, n
    while lo < hi:
        k = (lo + hi) // 2
        lo, hi = (k + 1, hi) if mean_accept_length(rank < k, nxt) < accept_length else (lo, k)
    k = min((max(lo - 1, 0), lo), key=lambda k: abs(mean_accept_length(rank < k, nxt) - accept_length))
    return Design(shape, seed, accept_length, walk_tokens, coord, nxt, rank < k, kv_probe_offset)
