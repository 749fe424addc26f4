"""Make a Llama target + EAGLE-3 draft pair whose greedy agreement is set by one number.

    python benchmark/model_pair.py DIR --shape {8b,1b,tiny} --accept-length A --seed N [--device cuda|cpu]

writes DIR/target (LlamaForCausalLM), DIR/draft (LlamaForCausalLMEagle3) and DIR/design.json. SGLang
loads them unchanged (--model-path DIR/target --speculative-draft-model-path DIR/draft
--speculative-algorithm EAGLE3); with 3 steps, topk 1 and 4 draft tokens its measured accept length
is A. Random weights give accept length 1.0 and hide every benefit of speculation.

How (file:line refer to the installed sglang 0.5.17 under sglang/srt/):
- Language. A walk set S of hidden_size tokens (no special token, so EOS is never produced), token
  S[c] owning hidden coordinate c. Every other token shares the coordinate of a random member of S.
  A seeded single cycle `nxt` over the coordinates is the language: after a token on coordinate c
  comes S[nxt[c]].
- Target. Embedding row t is EMBED * e_coord(t); every o_proj and down_proj is 0, so the residual
  stream never changes (models/llama.py:341-363) and each EAGLE-3 aux state, hidden + residual at
  the input of layers [2, L//2, L-3] (models/llama.py:435-437, 885-892), is that same one-hot row.
  q/k/v/gate/up are random, so every GEMM and attention kernel still does its full work. lm_head
  row S[nxt[c]] is e_c: the right token's logit is ~sqrt(hidden_size), every other logit is exactly
  0, so greedy output never rests on a bf16 near-tie.
- Draft, one layer. fc copies the first aux chunk scaled to HID = sqrt(d) (models/llama_eagle3.py:
  229-238); o_proj = 0 so attention and the token embeddings add nothing
  (models/llama_eagle3.py:89-106). The MLP reads RMSNorm(h), always ~sqrt(d) on the one hot
  coordinate c whatever |h| is; unit c fires through gate and up on coordinate c only, and down
  column c is HID * (e_nxt[c] - e_c) / act, so h + mlp(h) = HID * e_nxt[c]: every draft step moves
  the hidden one token along the walk. The next step is fed that pre-norm sum
  (models/llama_eagle3.py:254-260; speculative/eagle_worker_v2.py:692), and since HID = sqrt(d) it
  equals the normed one too. lm_head row S[nxt[c]] reads e_c for "good" coordinates and row
  S[nxt[nxt[c]]] (always wrong) for the others.
- KV probe (--kv-probe-offset D, off by default). The models above ignore their KV caches (o_proj
  = 0), so their outputs cannot tell a server whose attention reads the right entries from one that
  does not. With D > 0 two attention heads of the draft and of the target's last layer read the
  entries D tokens back and at the current token, and cancel exactly when the first holds what the
  walk put there; a stale entry, or a context read one entry short, adds noise that swamps the
  hidden state (add_kv_probe). The draft's probe shows whether a server keeps the draft KV
  current; the target's, whether each forward's attention reads the request's whole context (its
  lengths) and nothing stale in it. The target's aux states, read before its last layer, do not
  change. Prompts must follow the walk.
- Accept length. After a verify the draft hidden sits on the latest token's coordinate c; step k
  proposes the right token iff the k-th coordinate of the walk from c is good. A good set of
  density q gives 1 + q + q^2 + q^3 in expectation; the set actually drawn (nested in q for one
  seed) is tuned so that its exact mean over all starting coordinates is A.

Only the structure (walk, coordinates, good set) decides behaviour; it is drawn on the CPU from the
seed, so it is identical on every device. The random q/k/v/gate/up filler is drawn on --device and
differs between cpu and cuda, which changes no output.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import torch
from safetensors.torch import save_file

VOCAB = 32000
NUM_SPECIAL = 3  # <unk>, <s>, </s>: never in the walk, so the target never ends a request
NUM_STEPS = 3  # --speculative-num-steps the accept length is designed for
EMBED = 1.0  # value of the one-hot target embedding
GATE = 8.0  # pre-activation of a firing draft MLP unit: SiLU(8) ~ 8, away from SiLU's bend
FILL_STD = 0.02  # random filler, Llama's init scale
RMS_EPS = 1e-5
LAYERS_PER_SHARD = 8  # 8b target: 4 shards of ~3.6 GB, bounds host memory while writing
FORMAT_VERSION = 1  # bump when the construction changes: a stale DIR/target is then rebuilt
MAX_POSITIONS = 8192  # max_position_embeddings of both models
ROPE_THETA = 500000.0
# --kv-probe-offset: the logits by which the probed KV entry beats every other position in the
# probe heads' softmax. Every other weight is then below e^-150 (fp32 flushes it to 0 after bf16
# rounding of q and k moves scores by ~10 logits), so the probe heads read that one entry exactly.
PROBE_MARGIN = 200.0

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


def _bf16(x: float) -> float:
    return torch.tensor(x, dtype=torch.bfloat16).item()


def draft_mlp_scales(d: int) -> tuple[float, float, float, float]:
    """(HID, gate, up, down) weights for the one-hot draft MLP, rounded the way SGLang's bf16
    path rounds: RMSNorm in fp32 then bf16 (layers/layernorm.py:653-687), one-term GEMMs,
    SiLU(gate) * up in fp32 then bf16 (layers/activation.py:138-147)."""
    hid = _bf16(math.sqrt(d))  # draft hidden magnitude: RMSNorm leaves HID * e_c (almost) unchanged
    m = _bf16(hid / math.sqrt(hid * hid / d + RMS_EPS))
    gate_w, up_w = _bf16(GATE / m), _bf16(1.0 / m)
    gate, up = _bf16(gate_w * m), _bf16(up_w * m)
    act = _bf16(gate / (1 + math.exp(-gate)) * up)
    return hid, gate_w, up_w, _bf16(hid / act)


def _fill(shape: tuple, gen: torch.Generator, device: str) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, device=device) * FILL_STD).to(torch.bfloat16)


def _zeros(*shape: int, device: str) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.bfloat16, device=device)


def _attention(prefix: str, d_in: int, gen: torch.Generator, device: str, dims: dict) -> dict:
    hd = head_dim(dims)
    q, kv = dims["num_attention_heads"] * hd, dims["num_key_value_heads"] * hd
    return {
        f"{prefix}.q_proj.weight": _fill((q, d_in), gen, device),
        f"{prefix}.k_proj.weight": _fill((kv, d_in), gen, device),
        f"{prefix}.v_proj.weight": _fill((kv, d_in), gen, device),
        f"{prefix}.o_proj.weight": _zeros(dims["hidden_size"], q, device=device),
    }


def _embedding(design: Design, device: str) -> torch.Tensor:
    d = design.dims["hidden_size"]
    emb = _zeros(VOCAB, d, device=device)
    emb[torch.arange(VOCAB, device=device), design.coord.to(device)] = EMBED
    return emb


def target_shards(design: Design, device: str) -> Iterator[dict[str, torch.Tensor]]:
    """The target's tensors under Hugging Face names, one shard at a time."""
    dims, d = design.dims, design.dims["hidden_size"]
    gen = torch.Generator(device).manual_seed(design.seed)
    layers = dims["num_hidden_layers"]
    for first in range(0, layers, LAYERS_PER_SHARD):
        shard = {"model.embed_tokens.weight": _embedding(design, device)} if first == 0 else {}
        for i in range(first, min(first + LAYERS_PER_SHARD, layers)):
            p = f"model.layers.{i}"
            attn = _attention(f"{p}.self_attn", d, gen, device, dims)
            if design.kv_probe_offset and i == layers - 1:  # after the aux layers the draft reads
                add_kv_probe(attn, design, f"{p}.self_attn", device, swamped=EMBED)
            shard |= attn
            shard[f"{p}.mlp.gate_proj.weight"] = _fill((dims["intermediate_size"], d), gen, device)
            shard[f"{p}.mlp.up_proj.weight"] = _fill((dims["intermediate_size"], d), gen, device)
            shard[f"{p}.mlp.down_proj.weight"] = _zeros(d, dims["intermediate_size"], device=device)
            shard[f"{p}.input_layernorm.weight"] = torch.ones(d, dtype=torch.bfloat16, device=device)
            shard[f"{p}.post_attention_layernorm.weight"] = torch.ones(d, dtype=torch.bfloat16, device=device)
        if first + LAYERS_PER_SHARD >= layers:
            head = _zeros(VOCAB, d, device=device)
            n = len(design.nxt)
            head[design.walk_tokens[design.nxt].to(device), torch.arange(n, device=device)] = 1.0
            shard["model.norm.weight"] = torch.ones(d, dtype=torch.bfloat16, device=device)
            shard["lm_head.weight"] = head
        yield shard


def rope_inv_freq(head_dim: int) -> torch.Tensor:
    """Llama's rotary frequencies as SGLang computes them (layers/rotary_embedding/base.py:149-165)."""
    return 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))


def probe_query_key(head_dim: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Position-only query and key (before rotary) whose score peaks when the key sits ``offset``
    tokens before the query, by PROBE_MARGIN logits over every other key position.

    Rotary (neox style) turns each pair (x_i, x_{i+h/2}) into a complex number turned by
    position * theta_i, so q.k = sum_i Re(q_i conj(k_i) e^{i (m - n) theta_i}). With k_i = a and
    q_i = a e^{-i offset theta_i}, the score is a^2 sum_i cos((m - n - offset) theta_i)."""
    inv = rope_inv_freq(head_dim).double()
    lags = torch.arange(MAX_POSITIONS, dtype=torch.double) - offset  # m - n - offset, keys n <= m
    gap = (1 - torch.cos(lags[lags != 0, None] * inv)).sum(-1).min().item()
    a = math.sqrt(PROBE_MARGIN * math.sqrt(head_dim) / gap)  # scores are scaled by 1/sqrt(head_dim)
    key = torch.cat([torch.full_like(inv, a), torch.zeros_like(inv)])
    query = torch.cat([a * torch.cos(offset * inv), -a * torch.sin(offset * inv)])
    return query.float(), key.float()


def add_kv_probe(attn: dict, design: Design, prefix: str, device: str, swamped: float) -> None:
    """Make a layer's output depend on its KV cache ``design.kv_probe_offset`` = D tokens back
    and at the current token; ``swamped`` is the magnitude of the one-hot state it adds to.

    Two heads read only the token embedding (the draft's first input half; the whole input of a
    target layer), whose one hot coordinate is the same value x for every token, so their
    queries and keys depend on position alone:
    - head A (query head 0, KV head 0) reads the entry D tokens back, whose value encodes the token
      embedded there; along the walk that token is D steps behind the one embedded here;
    - head B (the first query head of KV head 1) reads its own entry, whose value encodes this
      token's embedding through the walk D steps back: the same vector, when the context follows
      the walk and the entry D back is what it should be.
    o_proj adds A's output times M and B's times -M, so they cancel to exactly 0 (identical bf16
    values; everything else in the softmax underflows) and the model is the design's. A stale or
    missing entry D back, or a missing current one, gives A or B another value, and their
    difference times M, about 2 * ``swamped`` on every hidden coordinate, swamps the one-hot
    state: the output is noise until those entries are right again. Prompts must follow the walk
    for at least D + 1 tokens."""
    dims, d = design.dims, design.dims["hidden_size"]
    heads, kv_heads = dims["num_attention_heads"], dims["num_key_value_heads"]
    hd, group = head_dim(dims), heads // kv_heads
    x = _bf16(EMBED / math.sqrt(EMBED**2 / d + RMS_EPS))  # the normed embedding's one value
    gen = torch.Generator().manual_seed(design.seed + 2)
    q_a, key = probe_query_key(hd, design.kv_probe_offset)
    q_b, _ = probe_query_key(hd, 0)
    ahead = torch.arange(len(design.nxt))
    for _ in range(design.kv_probe_offset):
        ahead = design.nxt[ahead]  # coordinate D steps along the walk
    value_a = torch.randint(0, 2, (hd, d), generator=gen).to(torch.bfloat16) * 2 - 1
    value_b = torch.empty_like(value_a)
    value_b[:, ahead] = value_a
    # M: two values differ by +-2x on about half their entries, which M turns into ~2 * swamped
    # per hidden coordinate.
    spread = (torch.randn(d, hd, generator=gen) * (swamped / (x * math.sqrt(hd / 2)))).to(torch.bfloat16)

    def put(name: str, rows: slice, block: torch.Tensor) -> None:
        weight = attn[f"{prefix}.{name}.weight"]
        weight[rows] = 0  # the draft's hidden-state half reads nothing either
        weight[rows, :d] = block.to(device=device, dtype=torch.bfloat16)

    head_a, head_b = slice(0, hd), slice(group * hd, (group + 1) * hd)
    kv_a, kv_b = slice(0, hd), slice(hd, 2 * hd)
    put("q_proj", head_a, (q_a / x)[:, None].expand(hd, d))
    put("q_proj", head_b, (q_b / x)[:, None].expand(hd, d))
    put("k_proj", kv_a, (key / x)[:, None].expand(hd, d))
    put("k_proj", kv_b, (key / x)[:, None].expand(hd, d))
    put("v_proj", kv_a, value_a)
    put("v_proj", kv_b, value_b)
    o_proj = attn[f"{prefix}.o_proj.weight"]
    o_proj[:, head_a], o_proj[:, head_b] = spread.to(device), (-spread).to(device)


def draft_tensors(design: Design, device: str) -> dict[str, torch.Tensor]:
    """The draft's tensors under the names of published EAGLE-3 checkpoints ("midlayer." is
    mapped to layers.0 at models/llama_eagle3.py:327-337)."""
    dims, d, inter = design.dims, design.dims["hidden_size"], design.dims["intermediate_size"]
    n, nxt = len(design.nxt), design.nxt.to(device)
    c = torch.arange(n, device=device)
    hid, gate_w, up_w, down_w = draft_mlp_scales(d)
    gen = torch.Generator(device).manual_seed(design.seed + 1)

    fc = _zeros(d, 3 * d, device=device)
    fc[c, c] = hid / EMBED  # first aux chunk only; all three are the same one-hot row
    gate, up = _zeros(inter, d, device=device), _zeros(inter, d, device=device)
    down = _zeros(d, inter, device=device)
    gate[c, c], up[c, c] = gate_w, up_w
    down[nxt, c], down[c, c] = down_w, -down_w
    wrong = design.walk_tokens[design.nxt[design.nxt]]  # two tokens ahead: never the right one
    proposal = torch.where(design.good, design.walk_tokens[design.nxt], wrong).to(device)
    head = _zeros(VOCAB, d, device=device)
    head.index_put_((proposal, c), torch.ones(n, dtype=torch.bfloat16, device=device), accumulate=True)
    ones = torch.ones(d, dtype=torch.bfloat16, device=device)
    attn = _attention("midlayer.self_attn", 2 * d, gen, device, dims)
    if design.kv_probe_offset:
        add_kv_probe(attn, design, "midlayer.self_attn", device, swamped=draft_mlp_scales(d)[0])
    return {
        # SGLang replaces it with the target's (speculative/eagle_worker_v2.py:294-295); kept so
        # that other loaders see a complete checkpoint.
        "embed_tokens.weight": _embedding(design, device),
        "fc.weight": fc,
        **attn,
        "midlayer.hidden_norm.weight": ones,
        "midlayer.input_layernorm.weight": ones.clone(),
        "midlayer.post_attention_layernorm.weight": ones.clone(),
        "midlayer.mlp.gate_proj.weight": gate,
        "midlayer.mlp.up_proj.weight": up,
        "midlayer.mlp.down_proj.weight": down,
        "norm.weight": ones.clone(),
        "lm_head.weight": head,
    }


def model_configs(shape: str) -> tuple[dict, dict]:
    dims = SHAPES[shape]
    base = dict(vocab_size=VOCAB, max_position_embeddings=MAX_POSITIONS, rms_norm_eps=RMS_EPS,
                rope_theta=ROPE_THETA, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                tie_word_embeddings=False, dtype="bfloat16", model_type="llama",
                head_dim=head_dim(dims), **dims)
    target = {**base, "architectures": ["LlamaForCausalLM"]}
    # draft_vocab_size keeps the draft's own lm_head (else it borrows the target's:
    # models/llama_eagle3.py:295-297); no d2t, so draft ids are target ids.
    draft = {**base, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
             "draft_vocab_size": VOCAB, "target_hidden_size": dims["hidden_size"]}
    return target, draft


@lru_cache(maxsize=1)
def tokenizer_json() -> str:
    """A 32k byte-level BPE like the GPU kit's make_models.py, trained on torch's own sources:
    torch 2.11.0 is pinned on every machine, so the tokenizer is the same everywhere (~2 s)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = os.path.dirname(torch.__file__)
    files = sorted(f for sub in ("_dynamo", "_inductor", "nn")
                   for f in glob.glob(f"{root}/{sub}/**/*.py", recursive=True))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((open(f, encoding="utf-8").read() for f in files), trainer)
    if tok.get_vocab_size() != VOCAB:  # the walk may use any id below VOCAB
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, expected {VOCAB}")
    return tok.to_str()


def write_tokenizer(out: str) -> None:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json()),
                                   unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                          "{% endfor %}assistant:")
    fast.save_pretrained(out)


def write_model(out: str, shards: Iterator[dict[str, torch.Tensor]], num_shards: int,
                config: dict) -> None:
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(f"{out}/*.safetensors*"):
        os.remove(old)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        name = (f"model-{i + 1:05d}-of-{num_shards:05d}.safetensors" if num_shards > 1
                else "model.safetensors")
        shard = {k: v.contiguous().cpu() for k, v in shard.items()}
        save_file(shard, f"{out}/{name}", metadata={"format": "pt"})
        weight_map |= dict.fromkeys(shard, name)
        total += sum(v.numel() * v.element_size() for v in shard.values())
    if num_shards > 1:
        with open(f"{out}/model.safetensors.index.json", "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(f"{out}/config.json", "w") as f:
        json.dump(config, f, indent=1)
    with open(f"{out}/generation_config.json", "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    write_tokenizer(out)


def write_pair(root: str, design: Design, device: str) -> dict:
    target_cfg, draft_cfg = model_configs(design.shape)
    # The target depends on shape, seed and KV probe only: a sweep over accept lengths rewrites
    # the draft.
    target_cfg["model_pair"] = {"shape": design.shape, "seed": design.seed,
                                "kv_probe_offset": design.kv_probe_offset, "format": FORMAT_VERSION}
    tdir, ddir = f"{root}/target", f"{root}/draft"
    t0 = time.perf_counter()
    try:
        with open(f"{tdir}/config.json") as f:
            reuse = json.load(f).get("model_pair") == target_cfg["model_pair"]
    except (OSError, ValueError):
        reuse = False
    if reuse:
        print(f"target: kept {tdir} (same shape, seed and KV probe)")
    else:
        num_shards = math.ceil(design.dims["num_hidden_layers"] / LAYERS_PER_SHARD)
        write_model(tdir, target_shards(design, device), num_shards, target_cfg)
        print(f"target: wrote {tdir} in {time.perf_counter() - t0:.1f} s")
    t1 = time.perf_counter()
    write_model(ddir, iter([draft_tensors(design, device)]), 1, draft_cfg)
    print(f"draft: wrote {ddir} in {time.perf_counter() - t1:.1f} s")
    summary = design.summary()
    with open(f"{tdir}/tokenizer.json", "rb") as f:
        summary["tokenizer_sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(f"{root}/design.json", "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="writes DIR/target, DIR/draft and DIR/design.json")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--accept-length", type=float, required=True,
                    help=f"designed SGLang accept length for {NUM_STEPS} steps, topk 1, "
                         f"in [1, {NUM_STEPS + 1}]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-probe-offset", type=int, default=0, metavar="D",
                    help="make the draft's proposals and the target's output need their own KV "
                         "cache entries D tokens back and at the current token (noise when one is "
                         "stale or not read), to check that a server keeps the draft KV current "
                         "and that attention reads each request's whole context; prompts must "
                         "then follow the walk (design.json); 0: off")
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where the tensors are built (default: cuda if available)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:  # the flags' ranges, checked where the design is made: an error line, no traceback
        design = make_design(args.shape, args.accept_length, args.seed, args.kv_probe_offset)
    except ValueError as e:
        ap.error(str(e))
    s = write_pair(args.dir, design, args.device)
    print(f"design: accept length {s['mean_accept_length']:.3f} over all starts "
          f"(asked {args.accept_length}, q={s['q']:.3f}, good {s['good_fraction']:.3f}), "
          f"simulated serving {s['simulated_serving_accept_length']:.3f}; "
          f"walk of {s['walk_size']} tokens; {time.perf_counter() - t0:.1f} s in all")
    return s


if __name__ == "__main__":
    main()
