"""The spec-decode allocator's bookkeeping from a host list: the same lengths as SGLang's
loop, without one tensor op per request.

SGLang's real ``alloc_for_spec_decode`` runs here with ``num_needed_tokens=0``: its slot
allocation and table write launch a Triton kernel (a GPU), but that branch never reads the
lengths the hook changes; the loop that does runs on the CPU. The tree cache and requests are
stand-ins carrying the fields the function reads (a real tree cache needs a KV pool).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.mem_cache import allocation

from fresh_process import run_python
from sglang_specgate.spec_decode_alloc import alloc_with_host_lengths
from test_chunked_prefill_tail import RecordedOps

ALLOCATED = [5, 40, 12, 33]  # each request's kv_allocated_len before the step
NEXT = [13, 36, 20, 41]  # the lengths eagle_prepare_for_decode asks for (one below: max keeps 40)


def sglang_alloc(*args, **kwargs):
    # Unwrapped at each call: the hooks may be applied in this process (plugins_loaded).
    return inspect.unwrap(allocation.alloc_for_spec_decode)(*args, **kwargs)


def tree_cache(page_size: int):
    return SimpleNamespace(token_to_kv_pool_allocator=SimpleNamespace(page_size=page_size))


def requests():
    return [SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=n)) for n in ALLOCATED]


def alloc_arguments(reqs):
    lengths = torch.tensor(NEXT, dtype=torch.int32)
    current = torch.tensor(ALLOCATED, dtype=torch.int32)
    return dict(reqs=reqs, req_pool_indices=torch.arange(len(reqs)), cur_kv_lens=current,
                cur_kv_lens_cpu=current, nxt_kv_lens=lengths, nxt_kv_lens_cpu=lengths,
                num_needed_tokens=0)


def allocated(reqs):
    return [r.kv.kv_allocated_len for r in reqs]


@pytest.mark.fast_off_path
def test_sglangs_loop_indexes_the_tensor_per_request():
    reqs = requests()
    with RecordedOps() as recorded:
        sglang_alloc(tree_cache(1), None, **alloc_arguments(reqs))
    assert allocated(reqs) == [13, 40, 20, 41]
    # One view of the host tensor per request: the cost the hook removes. When upstream reads
    # a list instead, this fails, and the hook can go (hooks.py removal plan).
    assert recorded.ops.count("aten.select.int") == len(reqs)


@pytest.mark.fast_off_path
def test_the_hook_records_the_same_lengths_with_no_tensor_op_per_request():
    reqs = requests()
    with RecordedOps() as recorded:
        alloc_with_host_lengths(sglang_alloc, tree_cache(1), None, **alloc_arguments(reqs))
    assert allocated(reqs) == [13, 40, 20, 41]
    assert "aten.select.int" not in recorded.ops


def test_paged_allocators_get_the_lengths_tensor_itself():
    seen = {}

    def paged_alloc(tree_cache, req_to_token_pool, **kwargs):
        seen.update(kwargs)

    arguments = alloc_arguments(requests())
    alloc_with_host_lengths(paged_alloc, tree_cache(16), None, **arguments)
    assert seen["nxt_kv_lens_cpu"] is arguments["nxt_kv_lens_cpu"]
    assert seen.keys() == arguments.keys()


def test_eagles_decode_preparation_calls_the_hook_once_plugins_are_loaded():
    # Fresh process: SGLang's loader applies the AROUND hook and rebinds the name that
    # eagle_utils (eagle_prepare_for_decode) and dflash_info_v2 imported from allocation.
    result = run_python(["-c", """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.speculative import dflash_info_v2, eagle_utils
from test_chunked_prefill_tail import RecordedOps
from test_spec_decode_alloc import alloc_arguments, allocated, requests, tree_cache
reqs = requests()
with RecordedOps() as recorded:
    eagle_utils.alloc_for_spec_decode(tree_cache(1), None, **alloc_arguments(reqs))
print("LENGTHS", allocated(reqs), "SELECTS", recorded.ops.count("aten.select.int"),
      "SAME", dflash_info_v2.alloc_for_spec_decode is eagle_utils.alloc_for_spec_decode)
"""])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LENGTHS [13, 40, 20, 41] SELECTS 0 SAME True" in result.stdout
