"""The pair's weights, from its design: the target's one-hot embeddings and zeroed output
projections around random q/k/v/gate/up, the one-layer draft whose MLP steps along the walk,
and with ``--kv-probe-offset`` the attention heads that read a KV entry D tokens back."""

from __future__ import annotations

import math
from typing import Iterator

import torch

from benchmark.pairs.design import MAX_POSITIONS, VOCAB, Design, head_dim

EMBED = 1.0  # value of the one-hot target embedding
GATE = 8.0  # pre-activation of a firing draft MLP unit: SiLU(8) ~ 8, away from SiLU's bend
FILL_STD = 0.02  # random filler, Llama's init scale
RMS_EPS = 1e-5
LAYERS_PER_SHARD = 8  # 8b target: 4 shards of ~3.6 GB, bounds host memory while writing
ROPE_THETA = 500000.0
# --kv-probe-offset: the logits by which the probed KV entry beats every other position in the
# probe heads' softmax. Every other weight is then below e^-150 (fp32 flushes it to 0 after bf16
# rounding of q and k moves scores by ~10 logits), so the probe heads read that one entry exactly.
PROBE_MARGIN = 200.0


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
