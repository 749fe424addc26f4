"""CPU check of benchmark/model_pair.py on the tiny shape: the target (through transformers) follows
the walk with a wide logit margin, and a torch re-statement of SGLang's EAGLE-3 draft forward, fed
the target's own aux hidden states, drafts 3 steps with the designed accept length.

file:line references are to the installed sglang 0.5.17, under sglang/srt/."""
import hashlib
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmark"))
import model_pair as mp  # noqa: E402

SETTINGS = (1.3, 2.2, 3.2)
SEED = 0
D = mp.SHAPES["tiny"]["hidden_size"]


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


def test_design_json_matches_request(pairs):
    for a, root in pairs.items():
        d = json.loads((root / "design.json").read_text())
        assert abs(d["mean_accept_length"] - a) < 0.01 * a
        assert abs(mp.expected_accept_length(d["q"]) - a) < 1e-6
        assert d["walk_size"] == D and len(set(d["walk"])) == D and min(d["walk"]) >= mp.NUM_SPECIAL


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
    design = mp.make_design("tiny", SETTINGS[0], SEED)
    # one-token prompts: the specials and a seventh of the rest of the vocabulary
    tokens = torch.cat([torch.arange(mp.NUM_SPECIAL), torch.arange(mp.NUM_SPECIAL, mp.VOCAB, 7)])[:, None]
    with torch.no_grad():
        logits = model(tokens).logits[:, -1].float()
    expected = design.walk_tokens[design.nxt[design.coord[tokens[:, 0]]]]
    assert torch.equal(logits.argmax(-1), expected)
    assert not torch.isin(logits.argmax(-1), torch.arange(mp.NUM_SPECIAL)).any()


def test_continuation_is_the_targets_greedy_output(walk_run):
    # What the GPU tests hold every server's greedy output to.
    model = walk_run[0]
    design = mp.make_design("tiny", SETTINGS[0], SEED)
    prompt = torch.tensor([[5, 900, 31999, 17]])
    with torch.no_grad():
        generated = model.generate(prompt, max_new_tokens=12, do_sample=False,
                                   attention_mask=torch.ones_like(prompt))
    assert generated[0, prompt.shape[1]:].tolist() == design.continuation(17, 12)


def test_aux_hidden_states_are_the_embedding(walk_run):
    """SGLang captures hidden + residual at the input of layers [2, L//2, L-3]
    (models/llama.py:435-437, 885-892), i.e. transformers' hidden_states[i] for those i."""
    model, seq, out = walk_run
    layers = mp.SHAPES["tiny"]["num_hidden_layers"]
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
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + mp.RMS_EPS) * w.float()).to(x.dtype)
    return y if residual is None else (y, residual)


def draft_forward(w: dict, embeds: torch.Tensor, hidden: torch.Tensor):
    """One LlamaForCausalLMEagle3 forward per row; returns (logits, hidden for the next step)."""
    p = "midlayer."
    if hidden.shape[-1] != embeds.shape[-1]:  # target aux states: fc (models/llama_eagle3.py:228-238)
        hidden = hidden @ w["fc.weight"].T
    # input layer (models/llama_eagle3.py:89-94): residual is the un-normed hidden
    residual = hidden
    x = torch.cat([rms_norm(embeds, w[p + "input_layernorm.weight"]),
                   rms_norm(hidden, w[p + "hidden_norm.weight"])], dim=-1)
    # attention (models/llama.py:219-264). Each row here attends only to itself, so the attention
    # output is its own v per head; the real kernel's output is some convex mix of v rows instead,
    # and o_proj = 0 sends both to exactly 0.
    v = x @ w[p + "self_attn.v_proj.weight"].T
    heads = mp.SHAPES["tiny"]["num_attention_heads"] // mp.SHAPES["tiny"]["num_key_value_heads"]
    head_dim = D // mp.SHAPES["tiny"]["num_attention_heads"]
    attn = v.unflatten(-1, (-1, head_dim)).repeat_interleave(heads, dim=-2).flatten(-2)
    attn = attn @ w[p + "self_attn.o_proj.weight"].T
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
    design = mp.make_design("tiny", accept_length, SEED)
    embed = model.model.embed_tokens.weight  # the draft shares it (speculative/eagle_worker_v2.py:294-295)
    layers = mp.SHAPES["tiny"]["num_hidden_layers"]
    aux = torch.cat([out.hidden_states[i][0] for i in (2, layers // 2, layers - 3)], dim=-1)

    # A chain for every start j: the target has just produced seq[j + 1]; the draft extend sees the
    # aux state of seq[j] (speculative/eagle_worker_common.py:148, eagle_worker_v2.py:868-877),
    # then each draft step takes the previous proposal and hidden (eagle_worker_v2.py:608-692).
    n = D
    tokens, hidden = seq[1 : n + 1], aux[:n]
    drafts, margins = [], []
    for _ in range(mp.NUM_STEPS):
        logits, hidden = draft_forward(w, embed[tokens], hidden)
        top2 = logits.topk(2, dim=-1)
        margins.append(top2.values[:, 0] - top2.values[:, 1])
        tokens = top2.indices[:, 0]
        drafts.append(tokens)
    drafts = torch.stack(drafts, dim=1)
    truth = torch.stack([seq[2 + k : n + 2 + k] for k in range(mp.NUM_STEPS)], dim=1)
    accepted = (drafts == truth).long().cumprod(dim=1).sum(dim=1)  # leading matches: greedy verify

    assert torch.cat(margins).min() > 0.5 * math.sqrt(D)  # no draft near-ties either
    # every chain accepts exactly the run of good coordinates the design predicts
    c, run = design.coord[seq[1 : n + 1]], torch.ones(n, dtype=torch.bool)
    predicted = torch.zeros(n, dtype=torch.long)
    for _ in range(mp.NUM_STEPS):
        run &= design.good[c]
        predicted += run
        c = design.nxt[c]
    assert torch.equal(accepted, predicted)
    measured = 1 + accepted.double().mean().item()
    q = mp.solve_q(accept_length)
    assert measured == pytest.approx(1 + q + q**2 + q**3, rel=0.02)

    # what SGLang would report serving one request from every start: within a few percent
    pos = {int(t): i for i, t in enumerate(seq[:n])}
    good = torch.zeros(n, dtype=torch.bool)
    good[[pos[int(t)] for t in seq[1 : n + 1][accepted > 0]]] = True
    walk_next = (torch.arange(n) + 1) % n
    assert mp.simulate_serving(good, walk_next) == pytest.approx(accept_length, rel=0.05)


def test_70b_shape_for_tensor_parallel_8():
    # The larger shape of the 8-GPU issue: Llama-3-70B's dimensions, every head count divisible
    # by TP = 8, and the same construction (only the walk grows with the hidden size).
    target, draft = mp.model_configs("70b")
    assert (target["hidden_size"], target["num_hidden_layers"], target["intermediate_size"]) == (
        8192, 80, 28672)
    assert target["num_attention_heads"] % 8 == 0 and target["num_key_value_heads"] % 8 == 0
    assert draft["num_hidden_layers"] == 1 and draft["target_hidden_size"] == 8192
    design = mp.make_design("70b", 2.2, SEED)
    assert len(design.nxt) == 8192
    assert mp.mean_accept_length(design.good, design.nxt) == pytest.approx(2.2, abs=0.02)
