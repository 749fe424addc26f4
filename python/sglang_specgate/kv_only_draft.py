"""While speculation is off, the one-token draft extend only has to write the draft's KV cache.

The steps-0 state runs the whole draft forward on every plain step: embedding and fc, the decoder
layer (attention, which writes the KV cache, then the MLP), the final norm and the lm_head. Only
the KV write matters while off. The step's other outputs, the draft's hidden state and next-token
logits, seed the first draft step after speculation returns and nothing else: a steps-0 verify
reads only the bonus tokens (eagle_worker_v2.py:1162-1165, 1240). On the 8B shape that draft
extend was most of what the off state still cost against a plain server
(benchmark/results/2026-11-30-offpath-8b-skip-draft-extend).

So the one-token draft-extend graph is captured with the last decoder layer's MLP and the lm_head
GEMM replaced by no-ops. The KV cache the graph writes is unchanged: a layer's KV depends only on
that layer's input, which neither skipped op feeds. The first draft step after re-enabling then
drafts from an approximate hidden state and zero logits, which costs at most that one step's
acceptance; its own draft extend runs the full speculative graph and restores both. For the
same reason the draft's attention reads one cached token while off (one_token_decode.py).
"""

from __future__ import annotations

import contextlib
import logging

import torch
from sglang.srt.layers.logits_processor import should_apply_lm_head_quant_method

logger = logging.getLogger(__name__)


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
    )


@contextlib.contextmanager
def kv_only_draft_forward(draft_model):
    """While capturing the off state's draft-extend graph: skip the last layer's MLP and the
    lm_head GEMM. Yields whether they were skipped; the model is restored on exit."""
    if not supports_kv_only(draft_model):
        logger.warning("spec gate: %s does not expose its last MLP and lm_head; the off state "
                       "keeps the full one-token draft extend", type(draft_model).__name__)
        yield False
        return
    layer, processor = _last_layer(draft_model), draft_model.logits_processor
    mlp = layer.mlp

    def zero_logits(hidden_states, lm_head, embedding_bias=None):
        # The shape and dtype the GEMM would give (one rank's vocabulary shard); gathering
        # across ranks and copying to the logits buffer stay upstream's.
        dtype = torch.float32 if getattr(processor, "use_fp32_lm_head", False) else lm_head.weight.dtype
        return hidden_states.new_zeros((hidden_states.shape[0], lm_head.weight.shape[0]), dtype=dtype)

    layer.mlp = torch.nn.Identity()
    processor._compute_lm_head = zero_logits  # instance attribute: shadows the method
    try:
        yield True
    finally:
        layer.mlp = mlp
        del processor._compute_lm_head
