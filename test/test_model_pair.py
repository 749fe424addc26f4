"""CPU check of benchmark/model_pair.py on the tiny shape: the target (through transformers) follows
the walk with a wide logit margin, and a torch re-statement of SGLang's EAGLE-3 draft forward, fed
the target's own aux hidden states, drafts 3 steps with the designed accept length.

file:line references are to the installed sglang 0.5.17, under sglang/srt/."""
import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from benchmark.pairs import model_pair as mp
from benchmark.pairs.design import (MAX_POSITIONS, NUM_SPECIAL, NUM_STEPS, SHAPES, VOCAB,
                                    expected_accept_length, head_dim, make_design,
                                    mean_accept_length, simulate_serving, solve_q)
from benchmark.pairs.weights import PROBE_MARGIN, RMS_EPS, probe_query_key, rope_inv_freq

SETTINGS = (1.3, 2.2, 3.2)
SEED = 0
D = SHAPES["tiny"]["hidden_size"]
HEAD_DIM = D // SHAPES["tiny"]["num_attention_heads"]
GROUP = SHAPES["tiny"]["num_attention_heads"] // SHAPES["tiny"]["num_key_value_heads"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[float, Path]:
    root = tmp_path_factory.mktemp("pairs")
    for a in SETTINGS:
        mp.main([str(root / str(a)), "--shape", "tiny", "--accept-length", str(a),
                 "--seed", str(SEED), "--device", "cpu"])
    return {a: root / str(a) for a in SETTINGS}


@pytest.fixture(scope="module")
def walk_run(pairs):
    """The target run by transformers over the whole cycle (plus a few tokens to wrap)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(pairs[SETTINGS[0]] / "target", dtype=torch.bfloat16)
    walk = torch.tensor(json.loads((pairs[SETTINGS[0]] / "design.json").read_text())["walk"])
    seq = torch.cat([walk, walk[:5]])
    with torch.no_grad():
        out = model(seq[None], output_hidden_states=True)
    return model, seq, out


def test_each_shape_has_its_head_dim():  # FlashInfer's kernels are built per head dim
    assert head_dim(SHAPES["1b"]) == 64
    assert head_dim(SHAPES["8b"]) == 128


def test_design_json_matches_request(pairs):
    for a, root in pairs.items():
        d = json.loads((root / "design.json").read_text())
        assert abs(d["mean_accept_length"] - a) < 0.01 * a
        assert abs(expected_accept_length(d["q"]) - a) < 1e-6
        assert d["walk_size"] == D and len(set(d["walk"])) == D and min(d["walk"]) >= NUM_SPECIAL


def test_target_depends_on_seed_only(pairs):
    digests = {hashlib.sha256((root / "target" / "model.safetensors").read_bytes()).hexdigest()
               for root in pairs.values()}
    assert len(digests) == 1


def test_target_follows_walk_with_margin(walk_run):
    model, seq, out = walk_run
    logits = out.logits[0, :-1].float()
    top2 = logits.topk(2, dim=-1)
    assert torch.equal(top2.indices[:, 0], seq[1:])
    assert (top2.values[:, 0] - top2.values[:, 1]).min() > 0.5 * math.sqrt(D)


def test_target_maps_every_token(pairs, walk_run):
    """Any token, specials included, continues the walk from its coordinate; EOS never comes."""
    model = walk_run[0]
    design = make_design("tiny", SETTINGS[0], SEED)
    # one-token prompts: the specials and a seventh of the rest of the vocabulary
    tokens = torch.cat([torch.arange(NUM_SPECIAL), torch.arange(NUM_SPECIAL, VOCAB, 7)])[:, None]
    with torch.no_grad():
        logits = model(tokens).logits[:, -1].float()
    expected = design.walk_tokens[design.nxt[design.coord[tokens[:, 0]]]]
    assert torch.equal(logits.argmax(-1), expected)
    assert not torch.isin(logits.argmax(-1), torch.arange(NUM_SPECIAL)).any()


def test_continuation_is_the_targets_greedy_output(walk_run):
    # What the GPU tests hold every server's greedy output to.
    model = walk_run[0]
    design = make_design("tiny", SETTINGS[0], SEED)
    prompt = torch.tensor([[5, 900, 31999, 17]])
    with torch.no_grad():
        generated = model.generate(prompt, max_new_tokens=12, do_sample=False,
                                   attention_mask=torch.ones_like(prompt))
    assert generated[0, prompt.shape[1]:].tolist() == design.continuation(17, 12)


def test_aux_hidden_states_are_the_embedding(walk_run):
    """SGLang captures hidden + residual at the input of layers [2, L//2, L-3]
    (models/llama.py:435-437, 885-892), i.e. transformers' hidden_states[i] for those i."""
    model, seq, out = walk_run
    layers = SHAPES["tiny"]["num_hidden_layers"]
    emb = model.model.embed_tokens.weight[seq]
    assert len({2, layers // 2, layers - 3}) == 3
    for i in (2, layers // 2, layers - 3):
        assert torch.equal(out.hidden_states[i][0], emb)


def rms_norm(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None):
    """RMSNorm.forward_native (layers/layernorm.py:644-691): fp32 math; with a residual, the fused
    add is done first and the sum (in the input dtype) becomes the new residual."""
    xf = x.float()
    if residual is not None:
        xf = xf + residual.float()
        residual = xf.to(x.dtype)
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w.float()).to(x.dtype)
    return y if residual is None else (y, residual)


def own_value_attention(w: dict, x: torch.Tensor) -> torch.Tensor:
    """Each row attends only to itself, so the output is its own v per head. The real kernel's
    output is some convex mix of v rows instead; without a KV probe, o_proj = 0 sends both to 0."""
    v = x @ w["midlayer.self_attn.v_proj.weight"].T
    return v.unflatten(-1, (-1, HEAD_DIM)).repeat_interleave(GROUP, dim=-2).flatten(-2)


def rotary(x: torch.Tensor, positions: torch.Tensor, head_dim: int = HEAD_DIM) -> torch.Tensor:
    """Neox-style rotary per head (layers/rotary_embedding/base.py), in fp32 (fp64 for fp64 x)."""
    dtype = torch.promote_types(x.dtype, torch.float32)
    angles = positions[:, None].to(dtype) * rope_inv_freq(head_dim).to(dtype)
    cos, sin = angles.cos()[:, None], angles.sin()[:, None]
    x1, x2 = x.to(dtype).unflatten(-1, (-1, head_dim)).chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype).flatten(-2)


def keys_values(w: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What the draft writes to its KV cache for rows at positions 0..T-1."""
    p = "midlayer.self_attn."
    return rotary(x @ w[p + "k_proj.weight"].T, torch.arange(len(x))), x @ w[p + "v_proj.weight"].T


def causal_attention(w: dict, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Row t (position t) attends to cache rows 0..t: the draft extend over a whole sequence."""
    q = rotary(x @ w["midlayer.self_attn.q_proj.weight"].T, torch.arange(len(x)))
    q = q.float().unflatten(-1, (-1, HEAD_DIM))
    k, v = (t.float().unflatten(-1, (-1, HEAD_DIM)).repeat_interleave(GROUP, dim=-2) for t in cache)
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(HEAD_DIM)
    scores = scores.masked_fill(torch.ones(len(x), len(x), dtype=torch.bool).triu(1), -math.inf)
    out = torch.einsum("hts,shd->thd", scores.softmax(-1), v)
    return out.to(x.dtype).flatten(-2)


def draft_forward(w: dict, embeds: torch.Tensor, hidden: torch.Tensor, attention=own_value_attention):
    """One LlamaForCausalLMEagle3 forward per row; returns (logits, hidden for the next step).
    ``attention(w, x)`` gives the per-head attention output for the layer input x."""
    p = "midlayer."
    if hidden.shape[-1] != embeds.shape[-1]:  # target aux states: fc (models/llama_eagle3.py:228-238)
        hidden = hidden @ w["fc.weight"].T
    # input layer (models/llama_eagle3.py:89-94): residual is the un-normed hidden
    residual = hidden
    x = torch.cat([rms_norm(embeds, w[p + "input_layernorm.weight"]),
                   rms_norm(hidden, w[p + "hidden_norm.weight"])], dim=-1)
    # attention (models/llama.py:219-264)
    attn = attention(w, x) @ w[p + "self_attn.o_proj.weight"].T
    # fused residual add + norm, then LlamaMLP (models/llama_eagle3.py:106-109, models/llama.py:111-119)
    x, residual = rms_norm(attn, w[p + "post_attention_layernorm.weight"], residual)
    gate, up = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
    # SiluAndMul (layers/activation.py:138-140), then down_proj
    x = (torch.nn.functional.silu(gate.float()) * up.float()).to(x.dtype)
    x = x @ w[p + "mlp.down_proj.weight"].T
    # final norm: logits from the normed sum, the next step gets the pre-norm sum
    # (models/llama_eagle3.py:254-260, norm_output unset)
    normed, pre_norm = rms_norm(x, w["norm.weight"], residual)
    return (normed @ w["lm_head.weight"].T).float(), pre_norm


@pytest.mark.parametrize("accept_length", SETTINGS)
def test_draft_accept_length(pairs, walk_run, accept_length):
    model, seq, out = walk_run
    root = pairs[accept_length]
    w = load_file(root / "draft" / "model.safetensors")
    design = make_design("tiny", accept_length, SEED)
    embed = model.model.embed_tokens.weight  # the draft shares it (speculative/eagle_worker_v2.py:294-295)
    layers = SHAPES["tiny"]["num_hidden_layers"]
    aux = torch.cat([out.hidden_states[i][0] for i in (2, layers // 2, layers - 3)], dim=-1)

    # A chain for every start j: the target has just produced seq[j + 1]; the draft extend sees the
    # aux state of seq[j] (speculative/eagle_worker_common.py:148, eagle_worker_v2.py:868-877),
    # then each draft step takes the previous proposal and hidden (eagle_worker_v2.py:608-692).
    n = D
    tokens, hidden = seq[1 : n + 1], aux[:n]
    drafts, margins = [], []
    for _ in range(NUM_STEPS):
        logits, hidden = draft_forward(w, embed[tokens], hidden)
        top2 = logits.topk(2, dim=-1)
        margins.append(top2.values[:, 0] - top2.values[:, 1])
        tokens = top2.indices[:, 0]
        drafts.append(tokens)
    drafts = torch.stack(drafts, dim=1)
    truth = torch.stack([seq[2 + k : n + 2 + k] for k in range(NUM_STEPS)], dim=1)
    accepted = (drafts == truth).long().cumprod(dim=1).sum(dim=1)  # leading matches: greedy verify

    assert torch.cat(margins).min() > 0.5 * math.sqrt(D)  # no draft near-ties either
    # every chain accepts exactly the run of good coordinates the design predicts
    c, run = design.coord[seq[1 : n + 1]], torch.ones(n, dtype=torch.bool)
    predicted = torch.zeros(n, dtype=torch.long)
    for _ in range(NUM_STEPS):
        run &= design.good[c]
        predicted += run
        c = design.nxt[c]
    assert torch.equal(accepted, predicted)
    measured = 1 + accepted.double().mean().item()
    q = solve_q(accept_length)
    assert measured == pytest.approx(1 + q + q**2 + q**3, rel=0.02)

    # what SGLang would report serving one request from every start: within a few percent
    pos = {int(t): i for i, t in enumerate(seq[:n])}
    good = torch.zeros(n, dtype=torch.bool)
    good[[pos[int(t)] for t in seq[1 : n + 1][accepted > 0]]] = True
    walk_next = (torch.arange(n) + 1) % n
    assert simulate_serving(good, walk_next) == pytest.approx(accept_length, rel=0.05)


def test_domains_are_cycles_of_their_own_accept_length():
    design = make_design("tiny", (3.2, 1.3), SEED)
    assert design.domain_accept_lengths == (3.2, 1.3)
    walk = set(design.walk_tokens.tolist())
    assert set(design.domain_tokens(0)) | set(design.domain_tokens(1)) == walk
    assert not set(design.domain_tokens(0)) & set(design.domain_tokens(1))
    for d, a in enumerate((3.2, 1.3)):
        members = (design.domain == d).nonzero()[:, 0]
        assert len(members) == D // 2
        assert torch.all(design.domain[design.nxt[members]] == d)  # the walk never leaves its domain
        assert mean_accept_length(design.good, design.nxt, starts=members) == pytest.approx(a, rel=0.02)
        assert simulate_serving(design.good, design.nxt, starts=members) == pytest.approx(a, rel=0.05)
        # A request whose prompt ends in the domain is continued in it, whatever came before.
        assert set(design.continuation(design.domain_tokens(d)[0], 3 * D)) == set(design.domain_tokens(d))


def test_a_domain_pairs_target_follows_each_domains_cycle(tmp_path):
    from transformers import LlamaForCausalLM

    summary = mp.main([str(tmp_path), "--shape", "tiny", "--accept-length", "3.2,1.3", "--seed", str(SEED),
                       "--device", "cpu"])
    domains = json.loads((tmp_path / "design.json").read_text())["domains"]
    assert summary["domains"] == domains and [x["accept_length"] for x in domains] == [3.2, 1.3]
    assert [x["size"] for x in domains] == [D // 2, D // 2]
    model = LlamaForCausalLM.from_pretrained(tmp_path / "target", dtype=torch.bfloat16)
    walk, start = summary["walk"], 0  # each domain's cycle in turn
    for domain in domains:
        cycle = torch.tensor(walk[start:start + domain["size"]])
        start += domain["size"]
        assert set(cycle.tolist()) == set(domain["tokens"])
        seq = torch.cat([cycle, cycle[:1]])
        with torch.no_grad():
            predicted = model(seq[None]).logits[0].argmax(dim=-1)
        assert torch.equal(predicted[:-1], seq[1:])  # every step to the next token of its own cycle


PROBE_OFFSET = 16


@pytest.mark.parametrize("flags, message", [
    (["--accept-length", "9"], "--accept-length must be in [1, 4], got 9.0"),
    (["--accept-length", "2.2", "--kv-probe-offset", "-3"], "--kv-probe-offset must be in [0, 8192), got -3"),
    (["--accept-length", "3.2,x"], "accept lengths separated by commas, such as 3.2,1.3; got '3.2,x'"),
    (["--accept-length", "3.2,1.3,2,2,2"], "--accept-length takes 1 to 4 domains for tiny, got 5"),
    (["--accept-length", "3.2,0.5"], "--accept-length must be in [1, 4], got 0.5"),
])
def test_out_of_range_flags_are_usage_errors(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        mp.main([str(tmp_path / "pair"), "--shape", "tiny", *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "pair").exists()  # nothing written


@pytest.fixture(scope="module")
def probe_pair(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("probe")
    mp.main([str(root), "--shape", "tiny", "--accept-length", "3.2", "--seed", str(SEED),
             "--device", "cpu", "--kv-probe-offset", str(PROBE_OFFSET)])
    assert json.loads((root / "design.json").read_text())["kv_probe_offset"] == PROBE_OFFSET
    return root


@pytest.fixture(scope="module")
def probe_draft(probe_pair) -> dict:
    return load_file(probe_pair / "draft" / "model.safetensors")


def first_proposals(w: dict, walk_run, stale: tuple[slice, slice] | None = None) -> torch.Tensor:
    """The draft extend over the walk sequence: row p embeds seq[p + 1] with the aux state of
    seq[p] and proposes the token after seq[p + 1]. ``stale = (rows, source)`` replaces the KV
    entries at rows with those of source, as a cache left unwritten would hold old entries."""
    model, seq, out = walk_run
    layers = SHAPES["tiny"]["num_hidden_layers"]
    aux = torch.cat([out.hidden_states[i][0] for i in (2, layers // 2, layers - 3)], dim=-1)

    def attend(w, x):
        k, v = keys_values(w, x)
        if stale is not None:
            rows, source = stale
            k[rows], v[rows] = k[source].clone(), v[source].clone()
        return causal_attention(w, x, (k, v))

    n = len(seq) - 1
    logits, _ = draft_forward(w, model.model.embed_tokens.weight[seq[1 : n + 1]], aux[:n], attend)
    return logits.argmax(-1)


def test_kv_probe_draft_keeps_the_design_and_needs_its_kv_entry(probe_draft, walk_run):
    seq = walk_run[1]
    design = make_design("tiny", 3.2, SEED, PROBE_OFFSET)
    c = design.coord[seq[1:]]
    designed = torch.where(design.good[c], design.walk_tokens[design.nxt[c]],
                           design.walk_tokens[design.nxt[design.nxt[c]]])
    # With every entry current, the probe heads cancel: the design's proposal at every position
    # that has an entry PROBE_OFFSET back.
    warm = first_proposals(probe_draft, walk_run)
    assert torch.equal(warm[PROBE_OFFSET:], designed[PROBE_OFFSET:])
    # Entries 100..139 hold positions 0..39's: positions reading them PROBE_OFFSET back propose
    # noise; those whose entry is current again are exact.
    cold = first_proposals(probe_draft, walk_run, stale=(slice(100, 140), slice(0, 40)))
    assert torch.equal(cold[PROBE_OFFSET:100], designed[PROBE_OFFSET:100])
    reads_stale = slice(140, 140 + PROBE_OFFSET)
    assert (cold[reads_stale] != designed[reads_stale]).float().mean() >= 0.9
    assert torch.equal(cold[140 + PROBE_OFFSET:], designed[140 + PROBE_OFFSET:])


def test_kv_probe_target_keeps_the_design_and_needs_its_whole_context(probe_pair, walk_run, pairs):
    from transformers import LlamaForCausalLM

    # Eager attention: a custom mask below hides single entries from single positions.
    model = LlamaForCausalLM.from_pretrained(probe_pair / "target", dtype=torch.bfloat16,
                                             attn_implementation="eager")

    def predictions(seq: torch.Tensor, hidden: tuple[tuple[int, int], ...] = ()) -> torch.Tensor:
        """Greedy next token at every position; ``hidden`` (position, key) pairs are left out of
        that position's attention, as a forward planned on a wrong length would leave them."""
        allowed = torch.ones(len(seq), len(seq), dtype=torch.bool).tril()
        for position, key in hidden:
            allowed[position, key] = False
        mask = torch.zeros(1, 1, *allowed.shape, dtype=torch.bfloat16).masked_fill(~allowed, -math.inf)
        with torch.no_grad():
            return model(seq[None], attention_mask=mask).logits[0].argmax(-1)

    seq = walk_run[1]
    designed = seq[1:]  # the walk's next token at every position but the last
    # Whole context along the walk: the design, wherever an entry PROBE_OFFSET back exists.
    assert torch.equal(predictions(seq)[PROBE_OFFSET:-1], designed[PROBE_OFFSET:])
    # Position 150 misses its own entry, 200 the one PROBE_OFFSET back: both give noise, the
    # others stay exact.
    short = predictions(seq, hidden=((150, 150), (200, 200 - PROBE_OFFSET)))
    assert short[150] != designed[150] and short[200] != designed[200]
    exact = torch.ones(len(seq) - 1, dtype=torch.bool)
    exact[:PROBE_OFFSET] = exact[150] = exact[200] = False
    assert torch.equal(short[:-1][exact], designed[exact])
    # A token off the walk at 100: the positions whose probe reads it (100 and PROBE_OFFSET
    # later) give noise; in between, the context they read still follows the walk.
    off_walk = seq.clone()
    off_walk[100] = seq[50]
    cold = predictions(off_walk)
    after = 100 + PROBE_OFFSET
    assert cold[100] != seq[51] and cold[after] != designed[after]
    assert torch.equal(cold[101:after], designed[101:after])
    assert torch.equal(cold[after + 1 : -1], designed[after + 1 :])
    # The probe sits after the aux layers: the draft's inputs are the plain target's.
    probed = load_file(probe_pair / "target" / "model.safetensors")
    plain = load_file(pairs[SETTINGS[0]] / "target" / "model.safetensors")
    last = f"model.layers.{SHAPES['tiny']['num_hidden_layers'] - 1}."
    assert {k for k in plain if not torch.equal(plain[k], probed[k])} <= {
        last + f"self_attn.{name}.weight" for name in ("q_proj", "k_proj", "v_proj", "o_proj")}


@pytest.mark.parametrize("head_dim", [64, 128])  # the tiny and 1b heads, the 8b and 70b heads
@pytest.mark.parametrize("offset", [0, PROBE_OFFSET])  # the probe's two heads
def test_kv_probe_scores_peak_at_the_offset(head_dim, offset):
    q0, k0 = (v.double() for v in probe_query_key(head_dim, offset))
    m = torch.tensor([offset, 300, 2000, MAX_POSITIONS - 1])  # query positions
    keys = torch.arange(MAX_POSITIONS)
    q = rotary(q0.expand(len(m), -1), m, head_dim)
    k = rotary(k0.expand(len(keys), -1), keys, head_dim)
    scores = q @ k.T / math.sqrt(head_dim)
    probed = scores.gather(1, (m - offset)[:, None])[:, 0]
    others = scores.masked_fill((keys[None] > m[:, None]) | (keys[None] == (m - offset)[:, None]),
                                -math.inf)
    assert (probed - others.max(-1).values).min() >= PROBE_MARGIN - 1e-6


def test_70b_shape_for_tensor_parallel_8():
    # The larger shape of the 8-GPU issue: Llama-3-70B's dimensions, every head count divisible
    # by TP = 8, and the same construction (only the walk grows with the hidden size).
    target, draft = mp.model_configs("70b")
    assert (target["hidden_size"], target["num_hidden_layers"], target["intermediate_size"]) == (
        8192, 80, 28672)
    assert target["num_attention_heads"] % 8 == 0 and target["num_key_value_heads"] % 8 == 0
    assert draft["num_hidden_layers"] == 1 and draft["target_hidden_size"] == 8192
    design = make_design("70b", 2.2, SEED)
    assert len(design.nxt) == 8192
    assert mean_accept_length(design.good, design.nxt) == pytest.approx(2.2, abs=0.02)
