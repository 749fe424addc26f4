"""While speculation is off, the one-token draft extend only has to write the draft's KV cache.

The steps-0 state runs the whole draft forward on every plain step: embedding and fc, the decoder
layer (attention, which writes the KV cache, then the MLP), the final norm and the lm_head. Only
the KV write matters while off. The step's other outputs, the draft's hidden state and next-token
logits, seed the first draft step after speculation returns and nothing else: a steps-0 verify
reads only the bonus tokens (eagle_worker_v2.py:1162-1165, 1240). Run in full, that draft
extend was most of what the off state still cost against a plain server (docs/design.md).

So the one-token draft-extend graph is captured with the last decoder layer's MLP and the lm_head
GEMM replaced by no-ops. The KV cache the graph writes is unchanged: a layer's KV depends only on
that layer's input, which neither skipped op feeds. The first draft step after re-enabling then
drafts from an approximate hidden state and logits the graph did not compute, which costs at
most that one step's acceptance; its own draft extend runs the full speculative graph and
restores both. For the same reason the draft's attention reads one cached token while off
(one_token_decode.py).

The last layer's attention output feeds only that MLP and the hidden state, so where the KV pool
is SGLang's plain one, the attention itself is replaced by the store of the rows' K and V that
the backends make before attending (StoreKVOnly, "kv-store"): that attention, even reading one
entry a row, is a sizeable share of each write's GPU time, and the writes are most of an off
step's GPU cost over a plain step's.

Then the Q columns of its QKV projection feed nothing: where that projection is a plain
unquantized GEMM without a bias, it computes the K and V columns only (KVColumnsOnly). Its output
projection only maps StoreKVOnly's zeros to zeros: without a bias it is replaced by those zeros
(ZeroProjection). And the zero logits were still a fill of rows x vocabulary and a
copy of it into the graph runner's logits buffer: on one rank the graph hands out that buffer as it
is instead (whatever it holds: zeros where the writes hold a buffer of their own, hold_logits_rows
in deferred_draft_kv.py). Together those were about half of each write's GPU time
(docs/design.md).
"""

from __future__ import annotations

import contextlib
import logging

import torch
from sglang.srt.layers.linear import QKVParallelLinear, RowParallelLinear
from sglang.srt.layers.logits_processor import should_apply_lm_head_quant_method
from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

from sglang_specgate.runtime_patches import DRAFT_LAST_ATTENTION, DRAFT_LAST_MLP, LOGITS_PROCESSOR_METHODS, shadowed

logger = logging.getLogger(__name__)

# What the off state's draft extend computes, in gate_state's "off_draft_extend"
FULL = "full"  # the whole draft forward
KV_ONLY = "kv-only"  # without the last layer's MLP and the lm_head GEMM
KV_STORE = "kv-store"  # nor the last layer's attention: it only stores K and V


def _last_layer(draft_model):
    layers = getattr(getattr(draft_model, "model", None), "layers", None)
    return layers[-1] if layers else None


def supports_kv_only(draft_model) -> bool:
    """The draft exposes what is replaced: a last decoder layer with an ``mlp``, and an
    unquantized, non-LoRA lm_head computed by SGLang's LogitsProcessor."""
    layer = _last_layer(draft_model)
    lm_head = getattr(draft_model, "lm_head", None)
    processor = getattr(draft_model, "logits_processor", None)
    return (
        layer is not None
        and isinstance(getattr(layer, "mlp", None), torch.nn.Module)
        and isinstance(getattr(lm_head, "weight", None), torch.Tensor)
        and not hasattr(lm_head, "apply_lora")
        # a quantized head's weight is packed: the GEMM's output shape is not its shape
        and not should_apply_lm_head_quant_method(lm_head, getattr(lm_head, "quant_method", None))
        and hasattr(processor, "_compute_lm_head")
        and hasattr(processor, "_get_logits")
        and hasattr(processor, "do_tensor_parallel_all_gather")
        and hasattr(processor, "vocab_size")
    )


def stores_kv_alone(draft_model, kv_pool, attention_backend) -> bool:
    """The last layer's attention can be replaced by a store of its K and V: a RadixAttention
    over SGLang's plain 16-bit KV pool, without the cases where the backends' stores differ
    from one ``set_kv_buffer`` with the layer's scales (quantized or 8-bit caches, sliding
    windows, cross attention, decode context parallelism; triton_backend.py:1217-1245,
    flashinfer_backend.py:899-902, 1410-1425)."""
    attention = getattr(getattr(_last_layer(draft_model), "self_attn", None), "attn", None)
    return (
        isinstance(attention, RadixAttention)
        and type(kv_pool) is MHATokenToKVPool
        and not kv_pool.is_quantized_kv_cache
        and kv_pool.dtype.itemsize >= 2
        and not attention.is_cross_attention
        and attention.sliding_window_size == -1
        and getattr(attention_backend, "dcp_size", 1) == 1
        and not getattr(attention_backend, "use_sliding_window_kv_pool", False)
    )


class StoreKVOnly(torch.nn.Module):
    """Stands in for the last layer's attention in the off state's write graph: stores the rows'
    K and V where the backend's decode would (``out_cache_loc``), and attends to nothing."""

    def __init__(self, attention: RadixAttention, kv_pool: MHATokenToKVPool):
        super().__init__()
        self.attention = attention
        self.kv_pool = kv_pool

    def forward(self, q, k, v, forward_batch, save_kv_cache: bool = True, **kwargs):
        a = self.attention
        if save_kv_cache:
            self.kv_pool.set_kv_buffer(a, forward_batch.out_cache_loc, k.view(-1, a.tp_k_head_num, a.qk_head_dim),
                                       v.view(-1, a.tp_v_head_num, a.v_head_dim), a.k_scale, a.v_scale)
        return q.new_zeros((q.shape[0], a.tp_q_head_num * a.v_head_dim))


class KVColumnsOnly(torch.nn.Module):
    """Stands in for the last layer's qkv_proj next to StoreKVOnly: one GEMM over the K and V rows
    of this rank's weight (laid out Q, K, V) into their columns of the output; the Q columns are
    left unwritten, as StoreKVOnly reads none of them."""

    def __init__(self, projection: QKVParallelLinear, q_size: int):
        super().__init__()
        self.q_size = q_size
        self.kv_weight = projection.weight[q_size:]  # a view: no copy of the weight

    def forward(self, hidden_states):
        out = hidden_states.new_empty((hidden_states.shape[0], self.q_size + self.kv_weight.shape[0]))
        torch.mm(hidden_states, self.kv_weight.t(), out=out[:, self.q_size:])
        return out, None


def computes_kv_columns_alone(self_attn) -> bool:
    """The attention's QKV projection is SGLang's plain GEMM over Q, K and V rows of this rank,
    without a bias, LoRA or quantization, and the attention says where its K columns start."""
    projection = getattr(self_attn, "qkv_proj", None)
    q_size, kv_size = getattr(self_attn, "q_size", None), getattr(self_attn, "kv_size", None)
    return (
        isinstance(projection, QKVParallelLinear)
        and isinstance(projection.quant_method, UnquantizedLinearMethod)
        and projection.bias is None
        and not hasattr(projection, "set_lora")
        and isinstance(q_size, int) and isinstance(kv_size, int)
        and tuple(projection.weight.shape[:1]) == (q_size + 2 * kv_size,)
    )


class ZeroProjection(torch.nn.Module):
    """Stands in for the last layer's o_proj next to StoreKVOnly: a projection without a bias maps
    its zeros to zeros, so no GEMM (and under tensor parallelism no all-reduce) makes them."""

    def __init__(self, projection: RowParallelLinear):
        super().__init__()
        self.output_size = projection.output_size

    def forward(self, attention_output):
        return attention_output.new_zeros((attention_output.shape[0], self.output_size)), None


def projects_zeros_to_zeros(projection) -> bool:
    """SGLang's output projection with no bias: zeros in, zeros out."""
    return isinstance(projection, RowParallelLinear) and projection.bias is None


@contextlib.contextmanager
def kv_only_draft_forward(draft_model, kv_pool=None, attention_backend=None):
    """While capturing the off state's draft-extend graph: skip the last layer's MLP and the
    lm_head GEMM and hand out the logits buffer as it is, and skip its attention where
    ``stores_kv_alone``, then its output projection where that has no bias and its QKV
    projection's Q columns where ``computes_kv_columns_alone``. Yields what the
    graph computes (FULL, KV_ONLY or KV_STORE); the model is restored on exit."""
    if not supports_kv_only(draft_model):
        logger.warning("spec gate: %s does not expose its last MLP and lm_head; the off state "
                       "keeps the full one-token draft extend", type(draft_model).__name__)
        yield FULL
        return
    layer, processor = _last_layer(draft_model), draft_model.logits_processor
    attention = layer.self_attn.attn if stores_kv_alone(draft_model, kv_pool, attention_backend) else None
    projection = getattr(layer.self_attn, "o_proj", None) if attention is not None else None
    if not projects_zeros_to_zeros(projection):
        projection = None
    qkv = layer.self_attn.qkv_proj if attention is not None and computes_kv_columns_alone(layer.self_attn) else None
    get_logits = processor._get_logits

    def logits_buffer_as_is(hidden_states, lm_head, logits_metadata, embedding_bias=None, use_logits_buffer=True):
        buffer = logits_metadata.next_token_logits_buffer if use_logits_buffer else None
        # Only where upstream would return that buffer, filled: one rank's logits, none gathered
        # from other ranks, one row a hidden state, as wide as the head (up to the vocabulary).
        if (
            buffer is not None
            and not processor.do_tensor_parallel_all_gather
            and not getattr(processor, "do_tensor_parallel_all_gather_dp_attn", False)
            and tuple(buffer.shape) == (hidden_states.shape[0], min(lm_head.weight.shape[0], processor.vocab_size))
        ):
            return buffer
        return get_logits(hidden_states, lm_head, logits_metadata, embedding_bias, use_logits_buffer)

    def zero_logits(hidden_states, lm_head, embedding_bias=None):
        # Where there is no buffer to hand out: the shape and dtype the GEMM would give (one
        # rank's vocabulary shard); gathering across ranks and copying stay upstream's.
        dtype = torch.float32 if getattr(processor, "use_fp32_lm_head", False) else lm_head.weight.dtype
        return hidden_states.new_zeros((hidden_states.shape[0], lm_head.weight.shape[0]), dtype=dtype)

    with contextlib.ExitStack() as stack:
        # The last layer's submodules the graph skips, as the log line names them.
        skipped = ["MLP", "lm_head"]
        stack.enter_context(shadowed(DRAFT_LAST_MLP, layer, mlp=torch.nn.Identity()))
        if attention is not None:
            stack.enter_context(shadowed(DRAFT_LAST_ATTENTION, layer.self_attn, attn=StoreKVOnly(attention, kv_pool)))
            skipped.append("attention")
        if projection is not None:
            stack.enter_context(shadowed(DRAFT_LAST_ATTENTION, layer.self_attn, o_proj=ZeroProjection(projection)))
            skipped.append("o_proj")
        if qkv is not None:
            stack.enter_context(shadowed(DRAFT_LAST_ATTENTION, layer.self_attn,
                                         qkv_proj=KVColumnsOnly(qkv, layer.self_attn.q_size)))
            skipped.append("Q columns")
        stack.enter_context(shadowed(LOGITS_PROCESSOR_METHODS, processor, _get_logits=logits_buffer_as_is,
                                     _compute_lm_head=zero_logits))
        computed = KV_ONLY if attention is None else KV_STORE
        logger.info("spec gate: the off state's draft extend graph is %s, without the last layer's %s",
                    computed, ", ".join(skipped))
        yield computed
