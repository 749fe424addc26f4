"""The tensors a plain step hands upstream whose values never change, allocated once.

Upstream's steps-0 path allocates and fills, on every plain step, tensors that are the same each
time: the one-node tree of its trivial verify input (``_build_trivial_verify_input``: the retrieve
index, two columns of -1 and an all-True mask over the batch's context) and the zeroed draft
outputs that stand in for the skipped draft extend (``_stub_skipped_draft_extend``). Each is an
allocation and a fill launched from the host, and host time is what binds the plain step the GPU
waits for after a host-bound prefill (their share: docs/design.md). Here each is a slice of a
tensor kept at the largest size asked for.

Nothing writes them: the verify kernels take the tree as input (their outputs are the predicts,
accept index and counts, eagle_utils.py:371-395), the attention backends copy the mask into their
own buffers or pad it into a new tensor (triton_backend.py:514, eagle_info.py:123-130), and the
overlap scheduler copies the stubs into its future buffers (overlap_utils.py:501-523). A slice
keeps its tensor alive, so a tensor replaced by a larger one lives until its last step is done.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative.eagle_info import EagleVerifyInput

from sglang_specgate.runtime_patches import DRAFT_STUBS, assign

NO_NODE = -1  # a tree's "no next token, no sibling"


class PlainStepConstants:
    def __init__(self, device, topk: int, draft_hidden_size: int | None, draft_hidden_dtype):
        self.device = device
        self.topk = topk
        self.draft_hidden_size = draft_hidden_size  # None: the draft carries no hidden state
        self.draft_hidden_dtype = draft_hidden_dtype
        self._tensors: dict[str, torch.Tensor] = {}

    def _leading(self, name: str, rows: int, make: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """The first ``rows`` rows of constant ``name``, made by ``make(n)`` for n at least twice
        the size it had, so a growing batch reallocates it a few times only."""
        tensor = self._tensors.get(name)
        if tensor is None or tensor.shape[0] < rows:
            tensor = make(max(rows, 2 * tensor.shape[0] if tensor is not None else rows))
            self._tensors[name] = tensor
        return tensor[:rows]

    def stub_draft_outputs(self, draft_input, bs: int) -> None:
        """Upstream's stand-ins for the draft outputs a skipped draft extend leaves unset
        (eagle_worker_v2.py:1255-1283): zeros of the shapes the overlap scheduler stashes."""
        assign(DRAFT_STUBS, draft_input, topk_p=self._leading(
            "topk_p", bs, lambda n: torch.zeros((n, self.topk), dtype=torch.float32, device=self.device)))
        assign(DRAFT_STUBS, draft_input, topk_index=self._leading(
            "topk_index", bs, lambda n: torch.zeros((n, self.topk), dtype=torch.int64, device=self.device)))
        if self.draft_hidden_size is not None:
            assign(DRAFT_STUBS, draft_input, hidden_states=self._leading(
                "hidden_states", bs, lambda n: torch.zeros((n, self.draft_hidden_size),
                                                           dtype=self.draft_hidden_dtype, device=self.device)))

    def one_node_verify_input(self, draft_token: torch.Tensor, seq_lens: torch.Tensor,
                              context_tokens: int) -> EagleVerifyInput:
        """The verify input of a one-node tree per request, rooted at its bonus token
        (``draft_token``), over a batch whose requests hold ``context_tokens`` tokens in all:
        what upstream's ``_build_trivial_verify_input`` builds where the target's attention
        backend keeps no verify mask of its own (eagle_worker_v2.py:1200-1253)."""
        bs = seq_lens.shape[0]

        def column(fill):
            return lambda n: torch.full((n, 1), fill, dtype=torch.long, device=self.device)

        return EagleVerifyInput(
            draft_token=draft_token,
            custom_mask=self._leading(
                "mask", context_tokens + bs, lambda n: torch.ones(n, dtype=torch.bool, device=self.device)),
            positions=seq_lens.to(torch.int64),
            retrieve_index=self._leading(
                "retrieve_index", bs, lambda n: torch.arange(n, dtype=torch.long, device=self.device).unsqueeze(1)),
            retrieve_next_token=self._leading("retrieve_next_token", bs, column(NO_NODE)),
            retrieve_next_sibling=self._leading("retrieve_next_sibling", bs, column(NO_NODE)),
            retrieve_cum_len=None,
            spec_steps=0,
            topk=self.topk,
            draft_token_num=1,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=None,
            seq_lens_cpu=None,
        )
