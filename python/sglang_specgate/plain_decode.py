"""While speculation is off, the target decodes as a plain server does (opt-in:
``--speculative-gate-off-step decode``; the default is upstream's one-token verify).

Upstream's steps-0 state verifies a one-node tree every plain step: it builds the trivial tree,
plans verify metadata, replays a TARGET_VERIFY graph and samples through the
tree-acceptance kernels. That is host work a plain server does not do, in every step's launch:
at C = 128 the gate's scheduler had less slack than plain's (py-spy) and its GPU sat idle more
between steps (benchmark/results/2026-12-01-offcost-8b-2.2-c128-hosts). A plain step instead
gives the target the same requests as a DECODE batch: each request's bonus token in, its KV slot
the one spec-v2 already reserved for it at position ``seq_lens``, the target's decode CUDA
graph, ordinary sampling. Its result is shaped as a one-token verify's (accept length 1), which
the spec-v2 scheduler takes unchanged.

The decode graphs are the steps-0 state's own target graphs: while that state is built,
upstream's runner class is replaced by ``PlainDecodeGraphRunner``, so they take the memory the
one-token verify graphs took. Upstream forces TARGET_VERIFY on a speculative server's target
runner and never checks the mode at replay, so the subclass sets the mode and refuses others.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Callable

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
from sglang.srt.speculative import eagle_worker_v2
from sglang.srt.speculative.eagle_info import EagleDraftInput

ONE_TOKEN = 1  # a plain step accepts the bonus token alone


class PlainDecodeGraphRunner(DecodeCudaGraphRunner):
    """Target decode graphs for a speculative server: DECODE mode, with every token's hidden
    states (CaptureHiddenMode.FULL; EAGLE-3's are its auxiliary layers), which the off state
    hands to the draft KV cache."""

    def get_spec_info(self, num_tokens: int):
        return None  # a decode batch carries no speculative input

    def capture(self) -> None:
        # Set here rather than in __init__: upstream's __init__ picks TARGET_VERIFY for any
        # speculative target, then captures.
        self.capture_forward_mode = ForwardMode.DECODE
        self.capture_hidden_mode = CaptureHiddenMode.FULL
        super().capture()

    def can_run_graph(self, forward_batch) -> bool:
        # Replay builds the batch's metadata in the captured mode whatever the batch's: a
        # one-token verify (the fallback of why_not_plain) must run eagerly instead.
        return forward_batch.forward_mode.is_decode() and super().can_run_graph(forward_batch)


@contextlib.contextmanager
def target_decode_graphs(use_plain: Callable[[], bool]):
    """While upstream builds the steps-0 state: its target graph runner is a
    PlainDecodeGraphRunner when ``use_plain()`` says so at construction, after the draft's
    graphs (built first) have settled whether plain steps can defer their draft KV.

    Upstream reads the class by its module name (eagle_worker_v2.py:1330); the scheduler builds
    runtime states on one thread, and nothing else builds one meanwhile."""
    upstream = eagle_worker_v2.DecodeCudaGraphRunner

    def runner(*args, **kwargs):
        return (PlainDecodeGraphRunner if use_plain() else upstream)(*args, **kwargs)

    eagle_worker_v2.DecodeCudaGraphRunner = runner
    try:
        yield
    finally:
        eagle_worker_v2.DecodeCudaGraphRunner = upstream


def why_not_plain(batch) -> str | None:
    """Why this decode batch takes upstream's one-token verify, or None for a plain step: the
    plain result carries no tree-shaped logprobs, and a grammar is advanced through the tree."""
    if batch.forward_mode.is_idle():
        return "an idle batch"
    if batch.spec_info is None or getattr(batch.spec_info, "bonus_tokens", None) is None:
        return "no bonus tokens to decode from"
    if batch.return_logprob:
        return "logprobs requested"
    if batch.has_grammar:
        return "a grammar"
    return None


def decode_view(batch, req_to_token: torch.Tensor):
    """A shallow copy of a spec-v2 decode batch that describes its plain step as a DECODE batch.

    Spec-v2 batches hold each request's length before this step's token, the token itself as
    the draft input's bonus token, and no input ids or KV slots of their own; the slot for the
    token at position ``seq_lens`` is already reserved in ``req_to_token``
    (eagle_prepare_for_decode). A decode batch counts the new token in its lengths, as
    ScheduleBatch.prepare_for_decode does for a plain server."""
    view = copy.copy(batch)
    view.forward_mode = ForwardMode.DECODE
    view.spec_info = None
    view.input_ids = batch.spec_info.bonus_tokens
    view.out_cache_loc = req_to_token[batch.req_pool_indices, batch.seq_lens].to(torch.int64)
    view.seq_lens = batch.seq_lens + ONE_TOKEN
    view.orig_seq_lens = view.seq_lens
    view.seq_lens_cpu = None if batch.seq_lens_cpu is None else batch.seq_lens_cpu + ONE_TOKEN
    view.seq_lens_sum = None  # ForwardBatch.init_new sums seq_lens_cpu where there is one
    return view


def as_one_token_verify(result, batch):
    """The target's decode result, given the fields the spec-v2 scheduler reads from a verify:
    one accepted token per request (the sampled one, also the next step's bonus token)."""
    accepted = torch.full_like(batch.seq_lens, ONE_TOKEN, dtype=torch.int32)
    result.accept_lens = accepted
    result.new_seq_lens = batch.seq_lens + accepted
    result.speculative_num_draft_tokens = ONE_TOKEN
    result.next_draft_input = EagleDraftInput(bonus_tokens=result.next_token_ids.to(torch.int32))
    return result
