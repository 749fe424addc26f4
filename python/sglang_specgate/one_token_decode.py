"""Run a one-token speculative forward through the attention backend's decode kernels.

With speculation off, the worker still drives SGLang's steps-0 state: the target verifies a
one-node tree (TARGET_VERIFY, one token per request) and the draft extends one token per
request (DRAFT_EXTEND_V2) to keep its KV cache warm. Both are exactly a decode step, but
backends run them through their extend (prefill-style) kernels, several times slower per call
than their decode kernels: most of what the steps-0 state costs over a plain server
(docs/design.md). This mixin makes one backend *instance* answer those forwards
with its decode path; everything else (graphs, sampling, hidden-state capture) is upstream.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Callable

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from sglang_specgate.args import FA3_OFF_PATH_ENV, FAST_OFF_PATH_FIX, fa3_off_path_enabled
from sglang_specgate.runtime_patches import (FA3_ONE_SPLIT, FA3_ONE_TOKEN_DECODE_CLASS, FLASHINFER_ROWS,
                                             FORWARD_BATCH_AS_DECODE, ONE_TOKEN_DECODE_CLASS, TRITON_ONE_SPLIT,
                                             TRITON_ROWS, assign, assign_item, swap_class)

logger = logging.getLogger(__name__)


def as_decode_batch(forward_batch: ForwardBatch) -> ForwardBatch:
    """A shallow copy that describes the same one-token step as a DECODE batch, for the
    attention metadata (which KV entries each request's query reads).

    The target's verify reads its whole context: decode batches count the new token in
    ``seq_lens``, TARGET_VERIFY batches do not (the spec-v2 convention). The draft's extend
    reads one entry, its first: while off, its attention output feeds nothing but the first
    draft step after re-enabling (a steps-0 verify reads only the bonus tokens,
    eagle_worker_v2.py:1162-1165, 1240), which the KV-only state leaves approximate anyway
    (kv_only_draft.py). What the off state keeps current is the draft KV, and the backend
    writes it to ``out_cache_loc`` (triton_backend.py forward_decode), which the metadata does
    not touch. So the draft stops reading its whole context on every plain step.
    """
    mode = forward_batch.forward_mode
    seq_lens, seq_lens_cpu = forward_batch.seq_lens, forward_batch.seq_lens_cpu
    seq_lens_sum = forward_batch.seq_lens_sum
    if mode.is_target_verify():
        seq_lens = seq_lens + 1
        seq_lens_cpu = None if seq_lens_cpu is None else seq_lens_cpu + 1
        seq_lens_sum = None if seq_lens_sum is None else seq_lens_sum + forward_batch.batch_size
    elif mode.is_draft_extend_v2():
        seq_lens = torch.ones_like(seq_lens)
        # Known on the host whatever the batch carries (the off state's buffered writes carry
        # none): a backend that plans on host lengths (FlashInfer) would copy them from the GPU.
        seq_lens_cpu = torch.ones(forward_batch.batch_size, dtype=torch.int64)
        seq_lens_sum = forward_batch.batch_size
    view = copy.copy(forward_batch)
    assign(FORWARD_BATCH_AS_DECODE, view, seq_lens=seq_lens, seq_lens_cpu=seq_lens_cpu, seq_lens_sum=seq_lens_sum,
           forward_mode=ForwardMode.DECODE, spec_info=None)
    return view


def _triton_reads_one_entry(backend) -> None:
    """Triton launches the split-KV grid ``max_kv_splits`` wide whatever the length read, and
    the extra splits only launch empty blocks, which made the draft's one-entry attention cost a
    large share of a whole target layer's time (docs/design.md).
    Set before the backend allocates its split buffers (graph capture, or each eager forward's
    metadata): the kernel asserts they are ``max_kv_splits`` wide."""
    assign(TRITON_ONE_SPLIT, backend, max_kv_splits=1)


def _plans_from_host_lengths(backend) -> None:
    """FlashInfer plans each decode forward's splits from the host lengths (``as_decode_batch``
    gives the draft extend's as ones, flashinfer_backend.py:1684-1689), so a one-entry read is
    planned one split wide already."""


def _triton_take_rows(backend, rows: int) -> None:
    """Triton's per-request index buffers (TRITON_ROWS), sized at the request pool when the
    backend is built (triton_backend.py:272-297); a batch of bs requests uses bs + 1 entries."""
    for name in TRITON_ROWS.attributes:
        buffer = getattr(backend, name, None)
        if buffer is not None and buffer.shape[0] < rows + 1:
            assign(TRITON_ROWS, backend, **{name: buffer.new_zeros(rows + 1)})


def _flashinfer_take_rows(backend, rows: int) -> None:
    """FlashInfer's decode path reads one indptr per wrapper, from a list its indices
    updaters share, and a last-page-length buffer (all ones, one token a page) that each
    updater holds by reference; all are sized at the CUDA-graph batch limit
    (flashinfer_backend.py:438-458, 1488-1489, 1759-1760)."""
    for i, indptr in enumerate(backend.kv_indptr):
        if indptr.shape[0] < rows + 1:
            assign_item(FLASHINFER_ROWS, backend, "kv_indptr", i, indptr.new_zeros(rows + 1))
    if backend.kv_last_page_len.shape[0] < rows:
        assign(FLASHINFER_ROWS, backend, kv_last_page_len=backend.kv_last_page_len.new_ones(rows))
        for name in ("indices_updater_decode", "indices_updater_prefill"):
            updater = getattr(backend, name, None)
            if updater is not None:
                assign(FLASHINFER_ROWS, updater, kv_last_page_len=backend.kv_last_page_len)


def _fa3_reads_one_entry(backend) -> None:
    """FA3 plans a graph's split count for the longest length a replay may read
    (max_context_len: it plans graphs without host lengths), and a split-KV launch carries a
    combine kernel and its accumulators, for a read of one entry. One split is what
    deterministic inference runs everywhere. The same backend also runs the draft's prefill
    extend while off, when its rows are not deferred: one split is correct there too, if
    slower. Set before its graphs are captured."""
    assign(FA3_ONE_SPLIT, backend, num_splits=1)


def _sizes_its_buffers_at_capture(backend, rows: int) -> None:
    """FA3 allocates its per-request metadata buffers in init_cuda_graph_state, at the largest
    batch the graph runner captures (flashattention_backend.py:2052-2369), which already counts
    the write sizes (deferred_draft_kv.capture_write_sizes): nothing to grow."""


# FA3's draft-extend backend holds four page tables (decode, draft decode, target verify, draft
# extend), each an int32 entry per page of context for every row its graphs take, and for a
# tree two more of an entry per token (the tree's draft decode and verify;
# flashattention_backend.py:2061-2290); the converted path reads one. The deferred writes' rows
# may make them this large at most, which caps the rows by context length.
FA3_PAGE_TABLES = 4
FA3_TREE_TABLES = 2
FA3_WRITE_TABLES_BYTES = 256 << 20


def _fa3_most_write_rows(backend) -> int:
    tree_entries = FA3_TREE_TABLES * backend.max_context_len if backend.topk > 1 else 0
    return FA3_WRITE_TABLES_BYTES // (4 * (FA3_PAGE_TABLES * backend.max_num_pages + tree_entries))


def _fa3_unsupported(backend) -> str | None:
    if not fa3_off_path_enabled():
        return (f"{FA3_OFF_PATH_ENV}=0 turned FA3's decode path for them off; unset it to turn it on, "
                f"or start with {FAST_OFF_PATH_FIX}")
    if backend.fa_impl_ver != 3:
        return "FA3's decode path serves FA3 itself, not FA4"
    if (backend.use_mla or backend.has_local_attention or backend.has_swa or backend.is_prefill_aware_swa
            or backend.is_encoder_decoder or backend.use_sliding_window_kv_pool or backend.attn_cp_size > 1):
        return ("FA3's decode path is written for plain multi-head attention, not MLA, local or "
                "sliding-window attention, cross attention or context parallelism")
    return None


def _swap(backend, cls: type) -> None:
    swap_class(ONE_TOKEN_DECODE_CLASS, backend, cls)


def _swap_fa3(backend, cls: type) -> None:
    swap_class(FA3_ONE_TOKEN_DECODE_CLASS, backend, cls)


@dataclass(frozen=True)
class DecodePathSupport:
    """What the off state does to a backend instance besides routing one-token forwards to its
    decode path: make the draft extend's decode read one cached entry, and give the draft
    extend's buffers room for more rows than requests (deferred_draft_kv.py)."""

    read_one_entry: Callable[[Any], None]
    take_rows: Callable[[Any, int], None]
    # The class swap, through its runtime_patches entry (GPU or CPU verified per release).
    swap: Callable[[Any, type], None] = _swap
    # Why an instance keeps upstream's kernels (a configuration or switch), or None.
    unsupported: Callable[[Any], str | None] = lambda backend: None
    # The most rows the deferred writes may take on this backend (its memory for them), or None.
    most_write_rows: Callable[[Any], int | None] = lambda backend: None


# Backends, by class name, with a decode path for the off state. Each has served it on a GPU
# through real SGLang with test/gpu passing, the probe pair's target checking its own attention
# (FlashInfer with the gate's host lengths and without; runs linked in docs/design.md); FA3's
# runs unless args.fa3_off_path_enabled says no. Others keep upstream's extend kernels, with a
# warning. The --attention-backend values that build them:
# args.fast_off_path_attention_backends.
DECODE_PATHS = {
    "TritonAttnBackend": DecodePathSupport(_triton_reads_one_entry, _triton_take_rows),
    "FlashInferAttnBackend": DecodePathSupport(_plans_from_host_lengths, _flashinfer_take_rows),
    "FlashAttentionBackend": DecodePathSupport(_fa3_reads_one_entry, _sizes_its_buffers_at_capture,
                                               _swap_fa3, _fa3_unsupported, most_write_rows=_fa3_most_write_rows),
}


def read_one_entry(backend) -> None:
    """Launch a converted backend's decode one split wide: for the off state's draft extend,
    which reads one KV entry per request (``as_decode_batch``)."""
    type(backend).decode_path_support.read_one_entry(backend)


def take_rows(backend, rows: int) -> None:
    """Let a converted backend's one-token forwards hold ``rows`` rows, more than the request
    pool when each row is a (request, decode step) pair (deferred_draft_kv.py). Only for a
    backend built for the off state's draft extend alone, before its graph is captured."""
    type(backend).decode_path_support.take_rows(backend, rows)


def most_write_rows(backend) -> int | None:
    """The most rows a converted backend's one-token forwards may take for the deferred writes,
    or None: no limit beyond the write sizes' own."""
    return type(backend).decode_path_support.most_write_rows(backend)


def is_one_token_spec_forward(forward_batch: ForwardBatch) -> bool:
    """The forwards the steps-0 state runs with one token per request. The same backend
    instance also serves that state's prefills (EXTEND), which must keep their kernels."""
    mode = forward_batch.forward_mode
    return mode.is_target_verify() or mode.is_draft_extend_v2()


def _one_token_decode_class(base: type) -> type:
    """A subclass of ``base`` answering one-token speculative forwards with decode kernels.

    Built per backend class with ``base`` as its only base: ``__class__`` assignment (below)
    refuses classes whose layout differs, which a mixin base would cause.
    """

    def decode_view(forward_batch):
        return as_decode_batch(forward_batch) if is_one_token_spec_forward(forward_batch) else forward_batch

    class OneTokenDecode(base):
        # read_one_entry and take_rows dispatch on it: they are only called on converted backends.
        decode_path_support = DECODE_PATHS[base.__name__]

        def init_forward_metadata(self, forward_batch: ForwardBatch):
            super().init_forward_metadata(decode_view(forward_batch))

        def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
            super().init_forward_metadata_out_graph(decode_view(forward_batch), in_capture)

        def init_forward_metadata_in_graph(self, forward_batch: ForwardBatch):
            super().init_forward_metadata_in_graph(decode_view(forward_batch))

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            if is_one_token_spec_forward(forward_batch):
                return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)

    OneTokenDecode.__name__ = OneTokenDecode.__qualname__ = f"OneTokenDecode{base.__name__}"
    return OneTokenDecode


_decode_classes: dict[type, type] = {}


def use_decode_kernels(backend) -> bool:
    """Switch ``backend`` (an instance built for the one-token state) to its decode path.

    Returns False, leaving the backend untouched, for backends not yet verified.
    """
    cls = type(backend)
    if cls in _decode_classes.values():
        return True
    support = DECODE_PATHS.get(cls.__name__)
    if support is None:
        logger.warning(
            "spec gate: attention backend %s is not verified for the fast off path; "
            "speculation-off steps use upstream's steps-0 kernels (slower). For the fast path, "
            "start with %s.",
            cls.__name__,
            FAST_OFF_PATH_FIX,
        )
        return False
    unsupported = support.unsupported(backend)
    if unsupported:
        logger.warning("spec gate: attention backend %s: speculation-off steps use upstream's steps-0 "
                       "kernels (slower): %s.", cls.__name__, unsupported)
        return False
    if cls not in _decode_classes:
        _decode_classes[cls] = _one_token_decode_class(cls)
    # Same instance, same buffers; only the method lookup changes, so isinstance checks
    # against the upstream class still hold.
    support.swap(backend, _decode_classes[cls])
    return True
