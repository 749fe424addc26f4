"""The off state's draft-extend graph is captured without the last MLP and the lm_head GEMM.

Building SGLang's EAGLE-3 draft needs a GPU and its distributed state, so a stand-in with the
same attribute layout (model.layers[-1].mlp, lm_head.weight, logits_processor._compute_lm_head)
plays it here; test/gpu runs the real one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.logits_processor import LogitsProcessor

from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

from sglang_specgate.kv_only_draft import (
    FULL,
    KV_ONLY,
    KV_STORE,
    StoreKVOnly,
    computes_kv_columns_alone,
    kv_only_draft_forward,
    stores_kv_alone,
    supports_kv_only,
)

HIDDEN, VOCAB_SHARD = 8, 24
HEADS, KV_HEADS, HEAD_DIM, SLOTS = 4, 2, 4, 16


class Head(torch.nn.Module):
    def __init__(self, quant_method=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(VOCAB_SHARD, HIDDEN, dtype=torch.bfloat16))
        self.quant_method = quant_method


class Processor:
    use_fp32_lm_head = False
    do_tensor_parallel_all_gather = False
    vocab_size = 1000  # the target's; the draft's head is narrower
    _compute_lm_head = LogitsProcessor._compute_lm_head  # the upstream method being shadowed

    def _get_logits(self, hidden_states, lm_head, logits_metadata, embedding_bias=None, use_logits_buffer=True):
        """Upstream's, with one rank and no buffer: the lm_head's logits (logits_processor.py:707)."""
        return self._compute_lm_head(hidden_states, lm_head, embedding_bias)


def draft(head=None):
    layer = torch.nn.Module()
    layer.mlp = torch.nn.Linear(HIDDEN, HIDDEN)
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.layers = torch.nn.ModuleList([torch.nn.Module(), layer])
    model.lm_head = head or Head()
    model.logits_processor = Processor()
    return model


def test_skips_the_last_mlp_and_the_lm_head_gemm_while_capturing():
    model = draft()
    mlp = model.model.layers[-1].mlp
    hidden = torch.randn(5, HIDDEN, dtype=torch.bfloat16)
    with kv_only_draft_forward(model) as computed:
        assert computed == KV_ONLY
        assert isinstance(model.model.layers[-1].mlp, torch.nn.Identity)
        assert model.model.layers[0] is not model.model.layers[-1]  # earlier layers untouched
        logits = model.logits_processor._compute_lm_head(hidden, model.lm_head)
        assert logits.shape == (5, VOCAB_SHARD) and logits.dtype == torch.bfloat16
        assert not logits.any()
    assert model.model.layers[-1].mlp is mlp
    assert "_compute_lm_head" not in vars(model.logits_processor)


def test_hands_out_the_graphs_logits_buffer_as_it_is():
    model = draft()
    hidden = torch.randn(5, HIDDEN, dtype=torch.bfloat16)
    buffer = torch.full((5, VOCAB_SHARD), 7.0)  # what another graph left there
    processor = model.logits_processor
    with kv_only_draft_forward(model):
        assert processor._get_logits(hidden, model.lm_head, SimpleNamespace(next_token_logits_buffer=buffer)) is buffer
        # no buffer, one of other rows or width, or none asked for: upstream's path, over zero logits
        for metadata, use_buffer in ((SimpleNamespace(next_token_logits_buffer=None), True),
                                     (SimpleNamespace(next_token_logits_buffer=buffer[:4]), True),
                                     (SimpleNamespace(next_token_logits_buffer=buffer[:, :-1]), True),
                                     (SimpleNamespace(next_token_logits_buffer=buffer), False)):
            logits = processor._get_logits(hidden, model.lm_head, metadata, use_logits_buffer=use_buffer)
            assert logits.shape == (5, VOCAB_SHARD) and not logits.any()
        processor.do_tensor_parallel_all_gather = True  # the logits of every rank: gathered upstream
        logits = processor._get_logits(hidden, model.lm_head, SimpleNamespace(next_token_logits_buffer=buffer))
        assert logits is not buffer and not logits.any()
    assert "_get_logits" not in vars(processor)
    assert torch.equal(buffer, torch.full((5, VOCAB_SHARD), 7.0))  # never written


def test_restores_the_model_when_capture_fails():
    model = draft()
    mlp = model.model.layers[-1].mlp
    with pytest.raises(RuntimeError):
        with kv_only_draft_forward(model):
            raise RuntimeError("capture failed")
    assert model.model.layers[-1].mlp is mlp
    assert "_compute_lm_head" not in vars(model.logits_processor)
    assert "_get_logits" not in vars(model.logits_processor)


class PackedInt4:
    """A quantized head's method: its weight is packed, so the GEMM's shape is not its shape."""

    def apply(self, layer, x, bias=None):
        raise AssertionError("not called")


class UnquantizedEmbeddingMethod:  # upstream's name for a plain head's method
    def apply(self, layer, x, bias=None):
        raise AssertionError("not called")


def test_keeps_the_full_forward_for_drafts_it_cannot_trim(caplog):
    lora_head = Head()
    lora_head.apply_lora = lambda *a: None
    for model in (torch.nn.Module(), draft(Head(PackedInt4())), draft(lora_head)):
        assert not supports_kv_only(model)
        with kv_only_draft_forward(model) as computed:
            assert computed == FULL
    assert "keeps the full one-token draft extend" in caplog.text
    assert supports_kv_only(draft(Head(UnquantizedEmbeddingMethod())))


def kv_pool(dtype=torch.bfloat16) -> MHATokenToKVPool:
    """SGLang's plain KV pool, on the CPU: one layer, slot 0 its padding slot."""
    return MHATokenToKVPool(size=SLOTS, page_size=1, dtype=dtype, head_num=KV_HEADS, head_dim=HEAD_DIM,
                            layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)


def attending_draft(**attention_options):
    """``draft()`` whose last layer attends through a real RadixAttention, as SGLang's Llama
    layers do (self_attn.attn)."""
    model = draft()
    model.model.layers[-1].self_attn = torch.nn.Module()
    model.model.layers[-1].self_attn.attn = RadixAttention(
        num_heads=HEADS, head_dim=HEAD_DIM, scaling=0.5, num_kv_heads=KV_HEADS, layer_id=0, **attention_options)
    return model


def test_the_last_attention_only_stores_its_rows_kv_over_a_plain_pool():
    model, pool = attending_draft(), kv_pool()
    attention = model.model.layers[-1].self_attn.attn
    rows = torch.tensor([3, 5, 9])
    q = torch.randn(3, HEADS * HEAD_DIM, dtype=torch.bfloat16)
    k, v = (torch.randn(3, KV_HEADS * HEAD_DIM, dtype=torch.bfloat16) for _ in range(2))
    batch = SimpleNamespace(out_cache_loc=rows)
    with kv_only_draft_forward(model, pool, SimpleNamespace()) as computed:
        assert computed == KV_STORE
        stand_in = model.model.layers[-1].self_attn.attn
        assert isinstance(stand_in, StoreKVOnly)
        out = stand_in(q, k, v, batch)
        assert out.shape == (3, HEADS * HEAD_DIM) and not out.any()  # attends to nothing
        assert torch.equal(pool.get_key_buffer(0)[rows].view(3, -1), k)
        assert torch.equal(pool.get_value_buffer(0)[rows].view(3, -1), v)
        assert not pool.get_key_buffer(0)[[0, 4]].any()  # nothing else written
        stand_in(q, k + 1, v + 1, batch, save_kv_cache=False)  # a fused store already wrote them
        assert torch.equal(pool.get_key_buffer(0)[rows].view(3, -1), k)
    assert model.model.layers[-1].self_attn.attn is attention


def test_the_last_attention_stays_where_the_backends_store_otherwise():
    plain = SimpleNamespace()
    assert stores_kv_alone(attending_draft(), kv_pool(), plain)
    assert stores_kv_alone(attending_draft(), kv_pool(torch.float16), SimpleNamespace(dcp_size=1))
    assert not stores_kv_alone(attending_draft(), kv_pool(torch.float8_e4m3fn), plain)  # scaled on store
    assert not stores_kv_alone(attending_draft(sliding_window_size=8), kv_pool(), plain)
    assert not stores_kv_alone(attending_draft(is_cross_attention=True), kv_pool(), plain)
    assert not stores_kv_alone(attending_draft(), kv_pool(), SimpleNamespace(dcp_size=2))
    assert not stores_kv_alone(attending_draft(), kv_pool(), SimpleNamespace(use_sliding_window_kv_pool=True))
    assert not stores_kv_alone(attending_draft(), None, plain)
    assert not stores_kv_alone(draft(), kv_pool(), plain)  # no self_attn.attn
    model = attending_draft(sliding_window_size=8)
    with kv_only_draft_forward(model, kv_pool(), plain) as computed:
        assert computed == KV_ONLY
        assert isinstance(model.model.layers[-1].self_attn.attn, RadixAttention)


def test_the_qkv_projection_stays_whole_unless_it_is_sglangs_plain_gemm():
    # SGLang's QKVParallelLinear needs its tensor-parallel group: the real one is checked in
    # test_sglangs_eagle3_draft_has_what_the_trim_replaces
    model = attending_draft()
    self_attn = model.model.layers[-1].self_attn
    self_attn.qkv_proj = torch.nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
    self_attn.q_size, self_attn.kv_size = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    assert not computes_kv_columns_alone(self_attn)
    with kv_only_draft_forward(model, kv_pool(), SimpleNamespace()) as computed:
        assert computed == KV_STORE and isinstance(self_attn.qkv_proj, torch.nn.Linear)


REAL_DRAFT = """
import json, sys, types
import torch
# On a machine without CUDA, SGLang's rotary embedding imports vLLM's CPU kernel, which is
# not installed here and never called while building the module: a stand-in name suffices.
sys.modules["vllm"] = types.ModuleType("vllm")
sys.modules["vllm._custom_ops"] = types.SimpleNamespace(rotary_embedding=None)
from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
from sglang.srt.plugins import load_plugins
from sglang.srt.runtime_context import publish
from sglang.srt.server_args import prepare_server_args
from transformers import AutoConfig

load_plugins()
args = prepare_server_args(json.loads(sys.argv[1]))
publish(args, role="test")
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                             distributed_init_method="tcp://127.0.0.1:" + sys.argv[3])
initialize_model_parallel(1)
from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang_specgate.kv_only_draft import kv_only_draft_forward, stores_kv_alone, supports_kv_only
config = AutoConfig.from_pretrained(sys.argv[2])
draft = LlamaForCausalLMEagle3(config)
attention = draft.model.layers[-1].self_attn.attn
pool = MHATokenToKVPool(size=8, page_size=1, dtype=torch.bfloat16, head_num=attention.tp_k_head_num,
                        head_dim=attention.head_dim, layer_num=1, device="cpu", enable_memory_saver=False,
                        start_layer=attention.layer_id, enable_alt_stream=False)
print("supports", supports_kv_only(draft), type(draft.model.layers[-1].mlp).__name__,
      "stores", stores_kv_alone(draft, pool, None))
self_attn = draft.model.layers[-1].self_attn
projection, qkv = self_attn.o_proj, self_attn.qkv_proj
rows = torch.zeros((3, self_attn.attn.tp_q_head_num * self_attn.attn.v_head_dim), dtype=projection.weight.dtype)
torch.nn.init.normal_(qkv.weight)  # built empty
layer_input = torch.randn((3, qkv.weight.shape[1]), dtype=qkv.weight.dtype)
full_qkv = qkv(layer_input)[0]
with kv_only_draft_forward(draft, pool, types.SimpleNamespace()) as computed:
    out, bias = self_attn.o_proj(rows)
    print("computes", computed, type(self_attn.o_proj).__name__, tuple(out.shape), bool(out.any()), bias,
          "full", tuple(projection(rows)[0].shape))
    # the runner's logits buffer is as wide as the draft's vocabulary
    # (eagle_draft_extend_cuda_graph_runner.py:209-229)
    buffer = torch.zeros((3, getattr(config, "draft_vocab_size", None) or config.vocab_size))
    handed_out = draft.logits_processor._get_logits(torch.zeros((3, config.hidden_size)), draft.lm_head,
                                                    types.SimpleNamespace(next_token_logits_buffer=buffer))
    print("logits buffer handed out", handed_out is buffer)
    kv_only, bias = self_attn.qkv_proj(layer_input)
    print("qkv", type(self_attn.qkv_proj).__name__, kv_only.shape == full_qkv.shape, bias,
          torch.allclose(kv_only[:, self_attn.q_size:], full_qkv[:, self_attn.q_size:], rtol=1e-4, atol=1e-4))
print("restored", self_attn.o_proj is projection, self_attn.qkv_proj is qkv, type(self_attn.attn).__name__)
"""


@pytest.mark.fast_off_path
def test_sglangs_eagle3_draft_has_what_the_trim_replaces(eagle_argv, model_dirs):
    # Built on the CPU in a fresh process (it needs SGLang's process-wide config and a
    # one-rank process group): catches an upstream rename of the MLP or the lm_head path.
    import json
    import socket

    from fresh_process import run_python

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_python(["-c", REAL_DRAFT, json.dumps(eagle_argv), model_dirs[1], str(port)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "supports True LlamaMLP stores True" in result.stdout
    # the last layer's o_proj makes the zeros its GEMM would, of its output's shape, while capturing
    hidden = json.loads((Path(model_dirs[1]) / "config.json").read_text())["hidden_size"]
    assert f"computes kv-store ZeroProjection (3, {hidden}) False None full (3, {hidden})" in result.stdout
    # its qkv_proj computes the K and V columns alone, as the full GEMM does
    assert "qkv KVColumnsOnly True None True" in result.stdout
    assert "logits buffer handed out True" in result.stdout
    assert "restored True True RadixAttention" in result.stdout
