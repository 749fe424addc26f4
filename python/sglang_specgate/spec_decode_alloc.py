"""The speculative decode allocator's per-request bookkeeping, read from a host list.

Every decode step of an EAGLE server, speculative or (under the gate) not, allocates its KV
slots through SGLang's ``alloc_for_spec_decode``, which ends by recording each request's
allocated length: ``max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))``, one element of a
host tensor at a time. Indexing a tensor from Python builds a view and dispatches an ATen op
per element: with many concurrent requests that loop is the largest single line of upstream's
spec-v2 bookkeeping that a plain server does not pay, and the same lengths as a Python list cost
a small fraction of it (docs/design.md).

With one token per page, ``nxt_kv_lens_cpu`` is read nowhere but that loop (the slots come
from ``alloc_token_slots``, the table write reads the device copy), so the hook hands the
original a list of the same values. Paged allocators read the tensor itself: it passes
through unchanged.
"""

from __future__ import annotations


def alloc_with_host_lengths(original, tree_cache, *args, nxt_kv_lens_cpu, **kwargs):
    """AROUND hook on ``sglang.srt.mem_cache.allocation.alloc_for_spec_decode``."""
    if tree_cache.token_to_kv_pool_allocator.page_size == 1:
        nxt_kv_lens_cpu = nxt_kv_lens_cpu.tolist()
    return original(tree_cache, *args, nxt_kv_lens_cpu=nxt_kv_lens_cpu, **kwargs)
