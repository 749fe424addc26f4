"""On a GPU, SGLang's draft-prefill tail write synchronizes the stream and ours does not."""

from __future__ import annotations

import inspect

import pytest
import torch
from sglang.srt.speculative import eagle_utils

from sglang_specgate.chunked_prefill_tail import tail_tokens
from test_chunked_prefill_tail import Batch  # the CPU tests' stand-in (test/ is on sys.path)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def chunked_batch() -> Batch:
    reqs = [object(), object(), object()]
    return Batch(reqs, chunked_req=reqs[1], chunked_req_next_prompt_token=7)


def test_only_sglangs_tail_write_synchronizes():
    sampled = torch.tensor([1, 2, 3], device="cuda")
    ours, sglangs = chunked_batch(), chunked_batch()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        tails = tail_tokens(ours, sampled)  # raises if it synchronizes
        with pytest.raises(RuntimeError, match="synchronizing"):
            inspect.unwrap(eagle_utils._eagle_prefill_tail_tokens)(sglangs, sampled)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert tails.tolist() == [1, 7, 3]
