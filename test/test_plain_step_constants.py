"""A plain step's constant inputs: the same values upstream's steps-0 path builds every step,
without building them every step.

Upstream's own ``_build_trivial_verify_input`` and ``_stub_skipped_draft_extend`` run here on
the CPU as the reference, on stand-ins for the batch and the worker (building the real worker
needs a GPU); only the draft's hidden-state spec, read from its model runner, is stood in.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative import eagle_worker_v2 as upstream
from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

from sglang_specgate.plain_step_constants import PlainStepConstants
from sglang_specgate.worker import GatedEAGLEWorkerV2

DRAFT_HIDDEN = 8
MAX_CONTEXT = 32  # the target backend's max_context_len


def gated_worker(verify_mask=None) -> GatedEAGLEWorkerV2:
    worker = object.__new__(GatedEAGLEWorkerV2)
    worker.topk, worker.device = 1, "cpu"
    backend = SimpleNamespace(verify_mask=verify_mask, max_context_len=MAX_CONTEXT)
    worker._target_worker = SimpleNamespace(model_runner=SimpleNamespace(attn_backend=backend))
    worker.plain_step_constants = PlainStepConstants("cpu", 1, DRAFT_HIDDEN, torch.bfloat16)
    return worker


def decode_batch(seq_lens, *, with_sum=True, with_cpu=True, mode=ForwardMode.DECODE):
    seq_lens = torch.tensor(seq_lens, dtype=torch.int64)
    return SimpleNamespace(
        forward_mode=mode,
        seq_lens=seq_lens,
        seq_lens_sum=int(seq_lens.sum()) if with_sum else None,
        seq_lens_cpu=seq_lens.clone() if with_cpu else None,
        spec_info=SimpleNamespace(bonus_tokens=torch.arange(100, 100 + len(seq_lens), dtype=torch.int32)),
    )


def assert_same_verify_input(ours: EagleVerifyInput, theirs: EagleVerifyInput) -> None:
    for field in dataclasses.fields(EagleVerifyInput):
        a, b = getattr(ours, field.name), getattr(theirs, field.name)
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), field.name
        else:
            assert a == b, field.name


@pytest.mark.parametrize("with_sum, with_cpu", [(True, True), (False, True), (False, False)])
def test_the_one_node_verify_input_is_upstreams(with_sum, with_cpu):
    worker = gated_worker()
    for seq_lens in ([5, 9, 2], [7], [5, 9, 2, 4, 4]):  # the constants grow, then are sliced
        batch = decode_batch(seq_lens, with_sum=with_sum, with_cpu=with_cpu)
        assert_same_verify_input(worker._build_trivial_verify_input(batch),
                                 EAGLEWorkerV2._build_trivial_verify_input(worker, batch))


def test_later_steps_reuse_the_constants():
    worker = gated_worker()
    first = worker._build_trivial_verify_input(decode_batch([5, 9, 2, 4]))
    later = worker._build_trivial_verify_input(decode_batch([6, 10, 3]))
    for name in ("custom_mask", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling"):
        assert getattr(later, name).data_ptr() == getattr(first, name).data_ptr(), name


def test_a_backend_with_its_own_verify_mask_and_an_idle_batch_get_upstreams_input():
    verify_mask = SimpleNamespace(buffer=torch.zeros(64, dtype=torch.bool), fits=lambda bs: True)
    masked = gated_worker(verify_mask)._build_trivial_verify_input(decode_batch([5, 9]))
    assert masked.custom_mask is verify_mask.buffer and bool(verify_mask.buffer.all())
    idle = gated_worker()._build_trivial_verify_input(decode_batch([], mode=ForwardMode.IDLE))
    assert idle.retrieve_index.numel() == 0


def test_the_skipped_draft_outputs_are_upstreams_stubs(monkeypatch):
    monkeypatch.setattr(upstream, "get_draft_recurrent_hidden_state_spec",
                        lambda runner: (DRAFT_HIDDEN, torch.bfloat16))
    worker = gated_worker()
    worker._draft_worker = SimpleNamespace(draft_runner=None)
    for seq_lens in ([5, 9, 2], [7], [5, 9, 2, 4, 4]):
        batch = decode_batch(seq_lens)
        ours, theirs = (SimpleNamespace(next_draft_input=EagleDraftInput(bonus_tokens=batch.spec_info.bonus_tokens))
                        for _ in range(2))
        worker._stub_skipped_draft_extend(batch, ours)
        EAGLEWorkerV2._stub_skipped_draft_extend(worker, batch, theirs)
        for name in ("topk_p", "topk_index", "hidden_states"):
            a, b = getattr(ours.next_draft_input, name), getattr(theirs.next_draft_input, name)
            assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name


def test_a_draft_without_a_hidden_state_gets_none():
    constants = PlainStepConstants("cpu", 1, None, None)
    draft_input = EagleDraftInput(bonus_tokens=torch.zeros(2, dtype=torch.int32))
    constants.stub_draft_outputs(draft_input, 2)
    assert draft_input.hidden_states is None and draft_input.topk_p.shape == (2, 1)
