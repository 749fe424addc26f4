"""The draft-prefill tail tokens: the same values as SGLang's, written without a host copy.

The batch is a stand-in carrying the four ScheduleBatch fields the function reads (a real
ScheduleBatch needs a KV pool and a tree cache). Whether a write synchronizes only shows on a
GPU (test/gpu/test_chunked_prefill_tail_gpu.py); here the recorded ATen ops show the cause: an
item assignment is a copy from a host scalar, which PyTorch follows with a stream synchronize
when the destination is on a GPU.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import pytest
import torch
from sglang.srt.speculative import eagle_utils
from torch.utils._python_dispatch import TorchDispatchMode

from fresh_process import run_python
from sglang_specgate.chunked_prefill_tail import tail_tokens


def sglang_tail_tokens(batch, next_token_ids):
    # Unwrapped at each call: a module global holding the original would itself be rebound to
    # the hook when this process applies the hooks (HookRegistry propagates to every module).
    return inspect.unwrap(eagle_utils._eagle_prefill_tail_tokens)(batch, next_token_ids)


@dataclass
class Batch:
    reqs: list
    input_ids: torch.Tensor = field(default_factory=lambda: torch.zeros(1, dtype=torch.int64))
    chunked_req: object = None
    chunked_req_next_prompt_token: int | None = None


class RecordedOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def batches():
    reqs = [object() for _ in range(4)]
    yield Batch(reqs)
    for row in range(4):
        yield Batch(reqs, chunked_req=reqs[row], chunked_req_next_prompt_token=900 + row)
    yield Batch(reqs, chunked_req=object(), chunked_req_next_prompt_token=999)  # not in this batch
    yield Batch(reqs, input_ids=torch.zeros(1, dtype=torch.int32), chunked_req=reqs[2],
                chunked_req_next_prompt_token=902)


@pytest.mark.parametrize("batch", list(batches()))
def test_same_tail_tokens_as_sglang_and_sampled_tokens_untouched(batch):
    sampled = torch.tensor([11, 12, 13, 14])
    ours = tail_tokens(batch, sampled)
    assert torch.equal(ours, sglang_tail_tokens(batch, sampled.clone()))
    assert ours.dtype == batch.input_ids.dtype
    assert sampled.tolist() == [11, 12, 13, 14]


@pytest.mark.fast_off_path
def test_the_chunk_tail_is_a_kernel_fill_not_a_host_copy():
    reqs = [object() for _ in range(3)]
    batch = Batch(reqs, chunked_req=reqs[1], chunked_req_next_prompt_token=7)
    with RecordedOps() as sglang_ops:
        sglang_tail_tokens(batch, torch.tensor([1, 2, 3]))
    with RecordedOps() as our_ops:
        tail_tokens(batch, torch.tensor([1, 2, 3]))
    assert "aten.copy_.default" in sglang_ops.ops  # upstream still syncs: the hook is needed
    assert "aten.copy_.default" not in our_ops.ops
    assert "aten.fill_.Scalar" in our_ops.ops


def test_sglangs_draft_prefill_writes_the_tail_by_fill_once_plugins_are_loaded():
    # Fresh process: SGLang's loader applies the hook and rebinds eagle_worker_v2's
    # `from eagle_utils import _eagle_prefill_tail_tokens`, whichever module loads first.
    result = run_python(["-c", """
from sglang.srt.plugins import load_plugins
load_plugins()
import torch
from sglang.srt.speculative import eagle_worker_v2
from test_chunked_prefill_tail import Batch, RecordedOps
reqs = [object(), object()]
batch = Batch(reqs, chunked_req=reqs[0], chunked_req_next_prompt_token=7)
with RecordedOps() as recorded:
    tails = eagle_worker_v2._eagle_prefill_tail_tokens(batch, torch.tensor([1, 2]))
print("TAILS", tails.tolist(), "COPY", "aten.copy_.default" in recorded.ops)
"""])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TAILS [7, 2] COPY False" in result.stdout
