"""Plain decode steps while off (plain_decode.py): the DECODE view of a spec-v2 batch, the result
it returns to the scheduler, the graph runner's mode, and the worker's routing.

SGLang's real ScheduleBatch, ForwardBatch.init_new, EagleDraftInput and GenerationBatchResult run
here on CPU tensors. Stand-ins replace what needs a GPU: the target worker's forward, the graph
runner's capture and replay, and the distributed groups ForwardBatch.init_new asks about."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor import forward_batch_info
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
from sglang.srt.speculative import eagle_worker_v2
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_specgate import host_seq_lens
from sglang_specgate.deferred_draft_kv import NO_GRAPH
from sglang_specgate.plain_decode import (
    PlainDecodeGraphRunner,
    as_one_token_verify,
    decode_view,
    target_decode_graphs,
    why_not_plain,
)
from sglang_specgate.worker import PLAIN_STEPS, GatedEAGLEWorkerV2

POOL_ROW = 16  # request-pool row width of the stand-in req_to_token


def spec_decode_batch(**fields) -> ScheduleBatch:
    """Three requests as a spec-v2 decode batch holds them: lengths before this step's token,
    the token as the draft input's bonus token."""
    reqs = [SimpleNamespace(lora_id=None, rid=f"r{i}", token_type_ids=None) for i in range(3)]
    batch = ScheduleBatch(reqs=reqs)
    batch.forward_mode = ForwardMode.DECODE
    batch.spec_algorithm = SpeculativeAlgorithm.EAGLE3
    batch.seq_lens = torch.tensor([5, 9, 2])
    batch.req_pool_indices = torch.tensor([2, 0, 1])
    batch.spec_info = EagleDraftInput(bonus_tokens=torch.tensor([11, 12, 13]))
    for name, value in fields.items():
        setattr(batch, name, value)
    return batch


def req_to_token() -> torch.Tensor:
    return torch.arange(3 * POOL_ROW, dtype=torch.int32).reshape(3, POOL_ROW)


def test_a_plain_step_decodes_each_bonus_token_into_its_reserved_slot(monkeypatch) -> None:
    batch = spec_decode_batch(seq_lens_cpu=torch.tensor([5, 9, 2]))
    view = decode_view(batch, req_to_token())
    # Mocked: init_new asks the distributed groups a server initialises.
    monkeypatch.setattr(forward_batch_info, "enable_num_token_non_padded", lambda: False)
    model_runner = SimpleNamespace(  # what init_new reads of a model runner
        device="cpu", is_draft_worker=False, server_args=SimpleNamespace(enable_lora=False),
        ngram_embedding_manager=SimpleNamespace(enabled=False),
        model_config=SimpleNamespace(model_is_mrope=False, is_encoder_decoder=False))
    forward = ForwardBatch.init_new(view, model_runner, capture_hidden_mode=CaptureHiddenMode.FULL,
                                    return_hidden_states_before_norm=False)
    assert forward.forward_mode == ForwardMode.DECODE and forward.spec_info is None
    assert forward.input_ids.tolist() == [11, 12, 13]
    assert forward.positions.tolist() == [5, 9, 2]  # each token at its request's old length
    # req_to_token[request, position]: the slot spec-v2 reserved for this step's token
    assert forward.out_cache_loc.tolist() == [2 * POOL_ROW + 5, 9, POOL_ROW + 2]
    assert forward.seq_lens.tolist() == [6, 10, 3] and forward.seq_lens_cpu.tolist() == [6, 10, 3]
    assert forward.seq_lens_sum == 19
    assert forward.capture_hidden_mode == CaptureHiddenMode.FULL
    # the scheduler's batch keeps the spec-v2 convention
    assert batch.seq_lens.tolist() == [5, 9, 2] and batch.forward_mode == ForwardMode.DECODE
    assert batch.spec_info is not None and batch.input_ids is None


def test_without_a_host_mirror_of_the_lengths_the_view_has_none_either() -> None:
    # Backends that opt out of seq_lens_cpu (Triton) leave both None (overlap_utils.py:436-446).
    view = decode_view(spec_decode_batch(), req_to_token())
    assert view.seq_lens_cpu is None and view.seq_lens_sum is None


def test_the_result_reads_as_a_one_token_verify() -> None:
    batch = spec_decode_batch()
    result = GenerationBatchResult(next_token_ids=torch.tensor([7, 8, 9]))
    assert as_one_token_verify(result, batch) is result
    assert result.accept_lens.dtype == torch.int32 and result.accept_lens.tolist() == [1, 1, 1]
    assert result.new_seq_lens.tolist() == [6, 10, 3]
    assert result.speculative_num_draft_tokens == 1  # the stride the result processor reads
    assert result.next_draft_input.bonus_tokens.dtype == torch.int32
    assert result.next_draft_input.bonus_tokens.tolist() == [7, 8, 9]


@pytest.mark.parametrize("fields, reason", [
    ({}, None),
    ({"forward_mode": ForwardMode.IDLE}, "an idle batch"),
    ({"spec_info": None}, "no bonus tokens to decode from"),
    ({"return_logprob": True}, "logprobs requested"),
    ({"has_grammar": True}, "a grammar"),
])
def test_batches_a_plain_step_cannot_serve_keep_the_one_token_verify(fields, reason) -> None:
    assert why_not_plain(spec_decode_batch(**fields)) == reason


def test_the_graph_runner_captures_decode_graphs_and_replays_only_decode_batches(monkeypatch) -> None:
    captured = []
    monkeypatch.setattr(DecodeCudaGraphRunner, "capture",
                        lambda self: captured.append((self.capture_forward_mode, self.capture_hidden_mode)))
    monkeypatch.setattr(DecodeCudaGraphRunner, "can_run_graph", lambda self, forward_batch: True)
    runner = object.__new__(PlainDecodeGraphRunner)  # __init__ allocates GPU buffers and captures
    runner.capture_forward_mode = ForwardMode.TARGET_VERIFY  # what upstream's __init__ picks
    runner.capture()
    assert captured == [(ForwardMode.DECODE, CaptureHiddenMode.FULL)]
    assert runner.get_spec_info(8) is None
    assert runner.can_run_graph(SimpleNamespace(forward_mode=ForwardMode.DECODE))
    assert not runner.can_run_graph(SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY))


@pytest.mark.parametrize("plain", [True, False])
def test_the_steps0_state_gets_decode_graphs_only_where_plain_steps_can_run(monkeypatch, plain) -> None:
    built = []
    monkeypatch.setattr(DecodeCudaGraphRunner, "__init__",
                        lambda self, model_runner, **kwargs: built.append((type(self), kwargs)))
    upstream = eagle_worker_v2.DecodeCudaGraphRunner
    with target_decode_graphs(lambda: plain):
        # as build_adaptive_runtime_state constructs it (eagle_worker_v2.py:1330-1340)
        eagle_worker_v2.DecodeCudaGraphRunner("runner", attn_backend="backend", speculative_num_steps=0,
                                              speculative_num_draft_tokens=1)
    assert eagle_worker_v2.DecodeCudaGraphRunner is upstream
    arguments = {"attn_backend": "backend", "speculative_num_steps": 0, "speculative_num_draft_tokens": 1}
    assert built == [(PlainDecodeGraphRunner if plain else DecodeCudaGraphRunner, arguments)]


class ScriptedController:
    """The gate's decisions, one per call, as AdaptiveController applies them."""

    def __init__(self, worker, steps: list[int]) -> None:
        self.worker, self.steps, self.calls = worker, list(steps), 0

    def activate_step_by_batch(self, batch_size: int) -> None:
        self.calls += 1
        self.worker.speculative_num_steps = self.steps.pop(0)


def routed_worker(monkeypatch, decisions: list[int]):
    """A GatedEAGLEWorkerV2 whose GPU parts are stand-ins: the target worker's forward returns
    sampled tokens, upstream's speculative path records that it ran (asking the gate, as
    upstream's does), the draft-extend hook records its result."""
    events = []
    worker = object.__new__(GatedEAGLEWorkerV2)  # __init__ builds real models
    worker.speculative_num_steps = 3
    worker.adaptive_controller = ScriptedController(worker, decisions)
    worker.plain_decode, worker._step_decided = True, False
    worker.skips_off_draft_extend = False
    worker.deferred_draft_kv = None
    worker.req_to_token_pool = SimpleNamespace(req_to_token=req_to_token())

    def target_forward(view, capture_hidden_mode):
        events.append(("target", view.forward_mode, view.input_ids.tolist(), capture_hidden_mode))
        return GenerationBatchResult(next_token_ids=torch.tensor([7, 8, 9]))

    def speculative_path(self, batch, on_publish=None, grammar_barrier=None):
        self.activate_step_by_batch(len(batch.seq_lens))  # upstream's decode path asks too
        events.append(("speculative", self.speculative_num_steps))
        return "verified"

    worker._target_worker = SimpleNamespace(forward_batch_generation=target_forward)
    worker._draft_extend_for_decode = lambda batch, result: events.append(
        ("draft rows", result.accept_lens.tolist()))
    worker._draft_contexts = contextlib.nullcontext
    monkeypatch.setattr(EAGLEWorkerV2, "forward_batch_generation", speculative_path)
    return worker, events


def test_a_plain_step_publishes_its_lengths_before_the_draft_rows(monkeypatch) -> None:
    worker, events = routed_worker(monkeypatch, [PLAIN_STEPS])
    batch = spec_decode_batch()
    result = worker.forward_batch_generation(
        batch, on_publish=lambda lens: events.append(("publish", lens.tolist())))
    assert events == [("target", ForwardMode.DECODE, [11, 12, 13], CaptureHiddenMode.FULL),
                      ("publish", [6, 10, 3]), ("draft rows", [1, 1, 1])]
    assert result.next_token_ids.tolist() == [7, 8, 9]
    assert batch.out_cache_loc.tolist() == [2 * POOL_ROW + 5, 9, POOL_ROW + 2]  # this step's slots
    assert worker.adaptive_controller.calls == 1


def test_a_plain_step_records_its_lengths_in_the_host_mirror(monkeypatch) -> None:
    # FlashInfer's host lengths (host_seq_lens.py): a plain decode step publishes seq_lens + 1,
    # which the host knows, so the scheduler need not wait for the GPU's copy after it.
    monkeypatch.setattr(host_seq_lens, "mirror", None)
    mirror = host_seq_lens.install(3, lambda batch_size: False)
    worker, events = routed_worker(monkeypatch, [PLAIN_STEPS])
    batch = spec_decode_batch(seq_lens_cpu=torch.tensor([5, 9, 2]), req_pool_indices_cpu=torch.tensor([2, 0, 1]))
    worker.forward_batch_generation(batch, on_publish=lambda lens: events.append(("publish", lens.tolist())))
    assert ("publish", [6, 10, 3]) in events
    assert mirror.lookup(torch.tensor([2, 0, 1])).tolist() == [6, 10, 3]


def test_a_speculative_step_asks_the_gate_once(monkeypatch) -> None:
    worker, events = routed_worker(monkeypatch, [3])
    assert worker.forward_batch_generation(spec_decode_batch()) == "verified"
    assert events == [("speculative", 3)]
    assert worker.adaptive_controller.calls == 1  # upstream's own ask was answered by the first
    assert worker._step_decided is False


@pytest.mark.parametrize("fields", [{"return_logprob": True}, {"forward_mode": ForwardMode.EXTEND}])
def test_batches_a_plain_step_cannot_serve_go_to_upstream_undecided(monkeypatch, fields) -> None:
    worker, events = routed_worker(monkeypatch, [PLAIN_STEPS])
    assert worker.forward_batch_generation(spec_decode_batch(**fields)) == "verified"
    assert events == [("speculative", PLAIN_STEPS)]  # upstream decided, and ran its own path
    assert worker.adaptive_controller.calls == 1


def test_without_plain_decode_graphs_every_step_is_upstreams(monkeypatch) -> None:
    worker, events = routed_worker(monkeypatch, [PLAIN_STEPS])
    worker.plain_decode = False
    assert worker.forward_batch_generation(spec_decode_batch()) == "verified"
    assert events == [("speculative", PLAIN_STEPS)]


@pytest.mark.parametrize("off_step, blocker, graphs, plain", [
    ("decode", None, "draft-extend graphs", True),
    ("decode", "the draft extend syncs its batch across ranks", "draft-extend graphs", False),
    ("decode", None, None, False),  # no one-token draft-extend graph to write the rows with
    ("verify", None, "draft-extend graphs", False),  # --speculative-gate-off-step verify: upstream's graphs, deferred KV
], ids=["decode", "draft KV not deferred", "no write graph", "verify asked for"])
def test_the_steps0_build_decodes_plainly_where_asked_and_draft_kv_defers(monkeypatch, off_step, blocker, graphs,
                                                                          plain) -> None:
    """GatedEAGLEWorkerV2.build_adaptive_runtime_state around a stand-in for upstream's build,
    which captures the draft's graphs (settling deferral_blocker) before the target's runner."""
    from sglang_specgate import worker as worker_module

    monkeypatch.setattr(DecodeCudaGraphRunner, "__init__", lambda self, model_runner, **kwargs: None)

    def upstream_build(self, steps, draft_tokens, cuda_graph_bs=None):
        self.deferral_blocker = blocker  # as the shadowed draft capture sets it
        self._draft_worker.cuda_graph_runner_for_draft_extend = graphs
        return SimpleNamespace(target_graph_runner=eagle_worker_v2.DecodeCudaGraphRunner("target"),
                               cuda_graph_runner_for_draft_extend=graphs)

    monkeypatch.setattr(EAGLEWorkerV2, "build_adaptive_runtime_state", upstream_build)
    monkeypatch.setattr(GatedEAGLEWorkerV2, "_one_token_backends_use_decode_kernels",
                        lambda self: contextlib.nullcontext())  # its own test: test_worker.py
    monkeypatch.setattr(worker_module, "DeferredDraftKV", lambda runner: ("deferred", runner))
    worker = object.__new__(GatedEAGLEWorkerV2)  # __init__ builds real models
    worker._draft_worker = SimpleNamespace(cuda_graph_runner_for_draft_extend=None)
    worker.deferral_blocker, worker.deferred_draft_kv, worker.plain_decode = None, None, False
    worker.off_step = off_step
    state = worker.build_adaptive_runtime_state(PLAIN_STEPS, 1)
    assert isinstance(state.target_graph_runner, PlainDecodeGraphRunner) is plain
    assert worker.plain_decode is plain
    assert worker.deferred_draft_kv == (("deferred", graphs) if graphs and not blocker else None)
    assert worker.deferral_blocker == (blocker or (None if graphs else NO_GRAPH))
    assert eagle_worker_v2.DecodeCudaGraphRunner is DecodeCudaGraphRunner
