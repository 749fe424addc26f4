"""The pair's design: a walk through ``hidden_size`` tokens that is the target's language, the
"good" coordinates where the draft proposes the right next token, and the accept length they
give, drawn from a seed on the CPU so that every device builds the same pair.

With several accept lengths the walk is cut into as many domains, each a cycle of its own with
its own accept length: a request stays in the domain of its prompt's last token, so a workload
can shift between an easy and a hard domain for the draft on one server."""

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


def mean_accept_length(good: torch.Tensor, nxt: torch.Tensor, steps: int = NUM_STEPS,
                       starts: torch.Tensor | None = None) -> float:
    """Accept length averaged over ``starts`` (default: every coordinate) as the start of a draft
    chain."""
    at = torch.arange(len(nxt)) if starts is None else starts
    run, total = torch.ones(len(at), dtype=torch.bool), 1.0
    for _ in range(steps):
        run &= good[at]
        total += run.double().mean().item()
        at = nxt[at]
    return total


def simulate_serving(good: torch.Tensor, nxt: torch.Tensor, output_len: int = 256,
                     steps: int = NUM_STEPS, starts: torch.Tensor | None = None) -> float:
    """What SGLang reports: sum of (correct drafts + 1) over all verifies / number of verifies
    (managers/scheduler_components/metrics_reporter.py:364-365), one request per start coordinate
    (default: every one). The prefill gives the first token; each verify then moves the walk by
    accepted + 1."""
    at = torch.arange(len(nxt)) if starts is None else starts.clone()
    made = torch.ones(len(at), dtype=torch.long)
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
    kv_probe_offset: int  # > 0: draft and target outputs need their KV entry that many tokens back
    # Each domain's accept length, and each coordinate's domain (its own cycle of nxt).
    domain_accept_lengths: tuple[float, ...]
    domain: torch.Tensor  # [n]

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

    def domain_tokens(self, domain: int) -> list[int]:
        """The walk's tokens in ``domain``: a prompt ending in one is continued in that domain."""
        return [int(t) for t in self.walk_tokens[self.domain == domain]]

    def summary(self) -> dict:
        n = len(self.nxt)
        order = []
        for d in range(len(self.domain_accept_lengths)):  # each domain's cycle, from its first coordinate
            start = c = int((self.domain == d).nonzero()[0])
            while True:
                order.append(int(self.walk_tokens[c]))
                c = int(self.nxt[c])
                if c == start:
                    break
        starts = [(self.domain == d).nonzero()[:, 0] for d in range(len(self.domain_accept_lengths))]
        domains = [{"accept_length": a, "size": len(starts[d]), "tokens": self.domain_tokens(d),
                    "mean_accept_length": mean_accept_length(self.good, self.nxt, starts=starts[d]),
                    "simulated_serving_accept_length": simulate_serving(self.good, self.nxt, starts=starts[d])}
                   for d, a in enumerate(self.domain_accept_lengths)] if len(starts) > 1 else []
        return {
            "shape": self.shape, "seed": self.seed, "num_steps": NUM_STEPS,
            "accept_length": self.accept_length, "q": solve_q(self.accept_length),
            "expected_accept_length": expected_accept_length(solve_q(self.accept_length)),
            "good_fraction": self.good.double().mean().item(),
            "mean_accept_length": mean_accept_length(self.good, self.nxt),
            "simulated_serving_accept_length": simulate_serving(self.good, self.nxt),
            "kv_probe_offset": self.kv_probe_offset, "walk_size": n, "walk": order,
            "good_tokens": sorted(int(t) for t in self.walk_tokens[self.good]),
            "domains": domains,
        }


def make_design(shape: str, accept_length: float | tuple[float, ...], seed: int,
                kv_probe_offset: int = 0) -> Design:
    """``accept_length``: one, or one per domain (the walk cut into that many cycles)."""
    accept_lengths = tuple(accept_length) if isinstance(accept_length, (tuple, list)) else (accept_length,)
    for a in accept_lengths:
        if not 1.0 <= a <= NUM_STEPS + 1:
            raise ValueError(f"--accept-length must be in [1, {NUM_STEPS + 1}], got {a}")
    if not 0 <= kv_probe_offset < MAX_POSITIONS:
        raise ValueError(f"--kv-probe-offset must be in [0, {MAX_POSITIONS}), got {kv_probe_offset}")
    n = SHAPES[shape]["hidden_size"]
    domains = len(accept_lengths)
    if not 1 <= domains <= n // 64:
        raise ValueError(f"--accept-length takes 1 to {n // 64} domains for {shape}, got {domains}")
    g = torch.Generator().manual_seed(seed)
    walk_tokens = NUM_SPECIAL + torch.randperm(VOCAB - NUM_SPECIAL, generator=g)[:n]
    coord = torch.randint(0, n, (VOCAB,), generator=g)
    coord[walk_tokens] = torch.arange(n)
    cycle = torch.randperm(n, generator=g)
    # The cycle cut into consecutive segments, each closed on itself: one domain each (one
    # domain: the whole cycle, as the pair was before domains).
    nxt = torch.empty(n, dtype=torch.long)
    domain = torch.empty(n, dtype=torch.long)
    for d, segment in enumerate(cycle.tensor_split(domains)):
        nxt[segment] = segment.roll(-1)
        domain[segment] = d
    rank = torch.rand(n, generator=g).argsort().argsort()
    good = torch.zeros(n, dtype=torch.bool)
    for d, a in enumerate(accept_lengths):
        members = (domain == d).nonzero()[:, 0]
        good[members] = _good_set(rank[members].argsort().argsort(), nxt, members, a)  # ranks within the domain
    overall = accept_lengths[0] if domains == 1 else mean_accept_length(good, nxt)
    return Design(shape, seed, overall, walk_tokens, coord, nxt, good, kv_probe_offset, accept_lengths, domain)


def _good_set(rank: torch.Tensor, nxt: torch.Tensor, members: torch.Tensor, accept_length: float) -> torch.Tensor:
    """Which of ``members`` are good: one uniform per coordinate (its ``rank``), the k smallest
    good. The same seed then gives nested good sets across accept lengths, and the domain's mean
    accept length grows with k, so bisect k to hit ``accept_length``."""
    def accept(k: int) -> float:
        good = torch.zeros(len(nxt), dtype=torch.bool)
        good[members] = rank < k
        return mean_accept_length(good, nxt, starts=members)

    lo, hi = 0, len(members)
    while lo < hi:
        k = (lo + hi) // 2
        lo, hi = (k + 1, hi) if accept(k) < accept_length else (lo, k)
    k = min((max(lo - 1, 0), lo), key=lambda k: abs(accept(k) - accept_length))
    return rank < k
