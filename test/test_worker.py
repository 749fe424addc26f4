"""The gated worker's CPU-side wiring: worker selection and the policy driving SGLang's real
AdaptiveController (each release's, as its adapter builds it). The GPU worker itself is replaced by a stand-in implementing upstream's
AdaptiveSpecWorker protocol (build_adaptive_runtime_state / apply_runtime_state), since
building one needs a GPU; test/gpu runs the real one."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2

from sglang_specgate import worker as worker_module
from sglang_specgate.args import SpecGateConfigError
from sglang_specgate.deferred_draft_kv import NO_GRAPH
from sglang_specgate.observability import SwitchLog
from sglang_specgate.policy import GateConfig, SpecGatePolicy
from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed, installed_release
from sglang_specgate.worker import (GateController, GatedEAGLEWorkerV2, ThresholdGateParams, fast_off_path_blocker,
                                    select_worker_class)


class Args:
    def __init__(self, threshold):
        self.speculative_disable_batch_threshold = threshold


def test_gate_selects_the_gated_subclass_only_when_enabled():
    assert select_worker_class(EAGLEWorkerV2, SpeculativeAlgorithm.EAGLE3, Args(8)) is GatedEAGLEWorkerV2
    assert select_worker_class(EAGLEWorkerV2, SpeculativeAlgorithm.EAGLE3, Args(0)) is EAGLEWorkerV2
    assert issubclass(GatedEAGLEWorkerV2, EAGLEWorkerV2)


def test_gate_refuses_a_worker_it_cannot_drive():
    with pytest.raises(SpecGateConfigError, match="needs SGLang's EAGLEWorkerV2"):
        select_worker_class(StandaloneWorkerV2, SpeculativeAlgorithm.STANDALONE, Args(8))


@dataclass
class StandInState:
    speculative_num_steps: int
    cuda_graph_runner_for_draft_extend: object = None


class StandInWorker:
    """Upstream's AdaptiveSpecWorker protocol; a state carries only its step count here."""

    def __init__(self, steps):
        self.speculative_num_steps = steps
        self.built = []

    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        self.built.append((speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs))
        return StandInState(speculative_num_steps)

    def apply_runtime_state(self, state):
        self.speculative_num_steps = state.speculative_num_steps


class TargetRunner:
    """Upstream's ModelRunner as an extra state's build calls it: the target's attention backend
    factory (a GPU's), recording which workspace each build asked for."""

    def __init__(self):
        self.asked_new_workspace = []

    def _get_attention_backend(self, init_new_workspace=False):
        self.asked_new_workspace.append(init_new_workspace)
        return type("TritonAttnBackend", (), {})()  # stands in for the verified backend


def gated_worker(draft_worker, target_runner=None) -> GatedEAGLEWorkerV2:
    """A gated worker on the fast off path (its contract is checked on every release) around
    stand-ins for its draft worker and the target's ModelRunner: __init__ builds real models."""
    worker = object.__new__(GatedEAGLEWorkerV2)
    worker.fast_off_path_blocker = None
    worker._draft_worker = draft_worker
    worker._target_worker = SimpleNamespace(model_runner=target_runner or TargetRunner())
    return worker


def controller(threshold=8, dwell=0):
    worker = StandInWorker(steps=3)
    policy = SpecGatePolicy(GateConfig(threshold, threshold, dwell))
    ctrl = GateController(worker, ThresholdGateParams(policy, worker.speculative_num_steps))
    # as EAGLEWorkerV2.init_cuda_graphs registers the running state, its draft extend graphed
    ctrl.register(StandInState(3, cuda_graph_runner_for_draft_extend="upstream's"))
    ctrl.init_states(cuda_graph_bs=[1, 2, 4, 8, 16])
    return worker, ctrl, policy


def test_init_builds_only_the_plain_state_for_every_graph_size(caplog):
    with caplog.at_level(logging.INFO, logger="sglang_specgate.worker"):
        worker, ctrl, _ = controller()
    assert worker.built == [(0, 1, None)]  # None: capture all decode graph sizes
    assert ctrl.states_built["states"] == [0, 3]
    assert ctrl.states_built["draft_extend_eager"] == [0]  # the stand-in built it without a graph
    assert "the draft extend of draft steps [0] has no CUDA graph" in caplog.text
    assert worker.speculative_num_steps == 3  # starts speculating


def test_decode_batches_switch_between_states():
    worker, ctrl, policy = controller(threshold=8, dwell=1)
    seen = []
    for bs in [4, 9, 12, 8, 8, 3]:
        ctrl.activate_step_by_batch(bs)
        seen.append(worker.speculative_num_steps)
    assert seen == [3, 0, 0, 0, 3, 3]
    assert policy.counters.switches == 2


def test_acceptance_feedback_never_moves_the_gate():
    worker, ctrl, _ = controller()
    for bs, accepted in [(4, [0, 0, 0, 0]), (3, [3, 3, 3]), (2, [0, 0])]:
        ctrl.activate_step_by_batch(bs)  # a launched step, so its result is recorded
        ctrl.on_verify_complete(accepted, batch_size=bs)
        assert worker.speculative_num_steps == 3


def test_switch_lines_are_logged_on_switches_only(caplog):
    now = [0.0]
    params = ThresholdGateParams(SpecGatePolicy(GateConfig(8, 4, 0)), 3, SwitchLog(interval_s=0, clock=lambda: now[0]))
    with caplog.at_level(logging.INFO, logger="sglang_specgate"):
        for bs in (2, 9, 9, 6, 3, 3):
            now[0] += 1
            params.get_steps_for_batch(bs)
    assert [r.getMessage() for r in caplog.records] == [
        "spec gate: speculation off (decode batch 9 > 8)",
        "spec gate: speculation on (decode batch 3 <= 8)",
    ]


def test_verify_results_are_paired_with_their_decisions_in_launch_order():
    # Overlap scheduling: the result of step i is processed after step i+1 was decided.
    policy = SpecGatePolicy(GateConfig(4, 4, 0))
    params = ThresholdGateParams(policy, speculative_steps=3)
    decided = [params.get_steps_for_batch(2)]
    for bs, previous_result in [(2, [2, 2]), (9, [2, 2]), (9, [0] * 9), (2, [0] * 9)]:
        decided.append(params.get_steps_for_batch(bs))
        params.on_verify_complete(previous_result, batch_size=len(previous_result))
    params.on_verify_complete([1, 1], batch_size=2)
    assert decided == [3, 3, 0, 0, 3]
    (episode,) = params.reenable_acceptance.snapshot()["recent"]
    assert episode["before"] == 3.0  # the two speculative steps, not the plain ones
    assert episode["after"] == [2.0]


@pytest.mark.fast_off_path
def test_the_plain_state_captures_its_draft_extend_graph_one_token_and_one_split_wide(published_gate_args):
    """While upstream builds the steps-0 state it calls the target runner's
    ``_get_attention_backend`` and the draft worker's ``_capture_cuda_graphs``
    (eagle_worker_v2.py:1313-1321). Both need a GPU, so stand-ins play them here; the
    server args are SGLang's real, resolved ones, whose width the capture reads."""
    from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as draft_extend_graphs
    from test_kv_only_draft import draft as kv_trimmable_draft

    server_args = published_gate_args
    backend_class = type("TritonAttnBackend", (), {})  # stands in for the verified backend
    seen_widths, seen_splits, seen_sizes, seen_logits_rows = [], [], [], []
    # The draft runner as upstream's size list and logits buffer read it; its shared logits
    # buffer holds the widest decode graph, 16 requests of 4 draft tokens.
    shared_logits = GraphSharedOutput(device="cpu", max_rows=64)
    pool_of_16 = SimpleNamespace(server_args=server_args, req_to_token_pool=SimpleNamespace(size=16),
                                 graph_shared_output=shared_logits)
    upstream_sizes = draft_extend_graphs.get_batch_sizes_to_capture

    class DraftWorker:
        draft_runner = type("DraftRunner", (), {"server_args": server_args, "model": kv_trimmable_draft(),
                                                "token_to_kv_pool": None})()
        draft_extend_attn_backend = backend_class()
        draft_extend_attn_backend.kv_indptr = torch.zeros(17, dtype=torch.int32)  # sized at the pool

        def _capture_cuda_graphs(self):
            seen_widths.append(server_args.speculative_num_draft_tokens)
            seen_splits.append(self.draft_extend_attn_backend.max_kv_splits)
            seen_sizes.append(draft_extend_graphs.get_batch_sizes_to_capture(pool_of_16)[0])
            seen_logits_rows.append(pool_of_16.graph_shared_output.max_rows)
            self.cuda_graph_runner_for_draft_extend = "upstream's"  # Triton is on its list

    worker = gated_worker(DraftWorker())
    with worker._one_token_backends_use_decode_kernels():
        target_backend = worker._target_worker.model_runner._get_attention_backend(init_new_workspace=True)
        worker._draft_worker._capture_cuda_graphs()

    assert seen_widths == [1]
    # Batch sizes up to the server's draft width (4) times the largest decode batch: one
    # replay writes four full plain steps' draft KV; then doubled up to 1024 rows (a prompt or more)
    # (deferred_draft_kv.py).
    assert seen_sizes == [upstream_sizes(pool_of_16)[0] + [32, 48, 64, 128, 256, 512, 1024]]
    assert worker.deferral_blocker is None
    assert worker._draft_worker.draft_extend_attn_backend.kv_indptr.shape == (1025,)  # room for the rows
    assert seen_logits_rows == [1024] and pool_of_16.graph_shared_output is shared_logits  # and for their logits
    assert draft_extend_graphs.get_batch_sizes_to_capture is upstream_sizes
    # The draft's attention reads one entry: its graph is captured one KV split wide; the
    # target's verify reads the whole context and keeps the server's split count.
    assert seen_splits == [1]
    assert not hasattr(target_backend, "max_kv_splits")
    assert server_args.speculative_num_draft_tokens == 4  # restored for the speculative state
    assert worker.fast_off_path is True
    assert worker.off_draft_extend == "kv-only"
    for backend in (target_backend, worker._draft_worker.draft_extend_attn_backend):
        assert type(backend).__name__ == "OneTokenDecodeTritonAttnBackend"
    # the stand-ins' own methods are back
    assert "_capture_cuda_graphs" not in vars(worker._draft_worker)
    assert "_get_attention_backend" not in vars(worker._target_worker.model_runner)


@pytest.mark.fast_off_path
@pytest.mark.parametrize("upstream_graphed, graphs_disabled, env_disabled, built", [
    (False, False, False, True),  # FA3: not on upstream's list of draft-extend graph backends
    (True, False, False, False),  # Triton, FlashInfer: upstream's own runner stays
    (False, True, False, False),  # --disable-cuda-graph
    (False, False, True, False),  # SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH
])
def test_the_plain_state_graphs_a_converted_draft_extend_upstream_leaves_eager(
        monkeypatch, published_gate_args, upstream_graphed, graphs_disabled, env_disabled, built):
    """Where upstream's capture leaves the draft extend eager (FA3), the converted one-token draft
    extend is a decode, and gets upstream's own runner, built under the capture upstream's would
    have had: one token wide, up to the deferred writes' rows. The runner needs a GPU: a stand-in
    records what it was built under."""
    from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as draft_extend_graphs
    from test_kv_only_draft import draft as kv_trimmable_draft

    server_args = published_gate_args
    if graphs_disabled:
        server_args.override("test", disable_cuda_graph=True)  # published_gate_args resolves anew for each test
    if env_disabled:
        monkeypatch.setenv("SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "1")
    pool_of_16 = SimpleNamespace(server_args=server_args, req_to_token_pool=SimpleNamespace(size=16),
                                 graph_shared_output=GraphSharedOutput(device="cpu", max_rows=64))
    built_under = []

    class DraftExtendRunner:
        def __init__(self, draft_worker):
            built_under.append((draft_worker, server_args.speculative_num_draft_tokens,
                                max(draft_extend_graphs.get_batch_sizes_to_capture(pool_of_16)[0])))

    monkeypatch.setattr(worker_module, "EAGLEDraftExtendCudaGraphRunner", DraftExtendRunner)

    class DraftWorker:
        draft_runner = type("DraftRunner", (), {"server_args": server_args, "model": kv_trimmable_draft(),
                                                "token_to_kv_pool": None})()
        draft_extend_attn_backend = type("TritonAttnBackend", (), {})()  # stands in for a converted backend
        draft_extend_attn_backend.kv_indptr = torch.zeros(17, dtype=torch.int32)

        def _capture_cuda_graphs(self):
            self.cuda_graph_runner_for_draft_extend = "upstream's" if upstream_graphed else None

    worker = gated_worker(draft_worker := DraftWorker())
    with worker._one_token_backends_use_decode_kernels():
        draft_worker._capture_cuda_graphs()

    runner = draft_worker.cuda_graph_runner_for_draft_extend
    if built:
        assert built_under == [(draft_worker, 1, 1024)] and isinstance(runner, DraftExtendRunner)
    else:
        assert built_under == [] and runner == ("upstream's" if upstream_graphed else None)


@pytest.mark.fast_off_path
def test_an_auto_candidates_state_captures_its_draft_extend_at_its_own_width(monkeypatch, published_gate_args):
    """Upstream builds every candidate's state from the server's static draft width (4 here);
    the 1-step state's draft extend runs 2 wide, so it is captured 2 wide, and the server's
    width is back afterwards. Upstream's build (a GPU's) is a stand-in that captures."""
    server_args = published_gate_args
    seen_widths = []

    class DraftWorker:
        draft_runner = SimpleNamespace(server_args=server_args)

        def _capture_cuda_graphs(self):
            seen_widths.append(server_args.speculative_num_draft_tokens)

    def upstream_build(self, steps, draft_tokens, cuda_graph_bs=None):
        self._draft_worker._capture_cuda_graphs()  # as eagle_worker_v2.py:1315 does
        return ("state", steps, draft_tokens)

    monkeypatch.setattr(EAGLEWorkerV2, "build_adaptive_runtime_state", upstream_build)
    worker = gated_worker(DraftWorker())
    assert worker.build_adaptive_runtime_state(1, 2) == ("state", 1, 2)
    assert seen_widths == [2]
    assert server_args.speculative_num_draft_tokens == 4
    assert "_capture_cuda_graphs" not in vars(worker._draft_worker)


@pytest.mark.parametrize("blocker, graphs", [
    (None, "draft-extend graphs"),
    ("the draft extend syncs its batch across ranks", "draft-extend graphs"),
    (None, None),  # no one-token draft-extend graph to write the rows with
], ids=["deferred", "draft KV not deferred", "no write graph"])
def test_the_steps0_build_defers_draft_kv_only_with_a_write_graph_and_no_blocker(monkeypatch, blocker, graphs):
    """GatedEAGLEWorkerV2.build_adaptive_runtime_state around a stand-in for upstream's build
    (which needs a GPU), which captures the draft's graphs and so settles deferral_blocker."""
    def upstream_build(self, steps, draft_tokens, cuda_graph_bs=None):
        self.deferral_blocker = blocker  # as the shadowed draft capture sets it
        return SimpleNamespace(cuda_graph_runner_for_draft_extend=graphs)

    monkeypatch.setattr(EAGLEWorkerV2, "build_adaptive_runtime_state", upstream_build)
    monkeypatch.setattr(GatedEAGLEWorkerV2, "_one_token_backends_use_decode_kernels",
                        lambda self: contextlib.nullcontext())  # its own test: above
    monkeypatch.setattr(worker_module, "DeferredDraftKV", lambda runner: ("deferred", runner))
    worker = object.__new__(GatedEAGLEWorkerV2)  # __init__ builds real models
    worker.deferral_blocker, worker.deferred_draft_kv, worker.fast_off_path_blocker = None, None, None
    worker._target_worker = SimpleNamespace(model_runner=TargetRunner())
    worker.build_adaptive_runtime_state(worker_module.PLAIN_STEPS, 1)
    assert worker.deferred_draft_kv == (("deferred", graphs) if graphs and not blocker else None)
    assert worker.deferral_blocker == (blocker or (None if graphs else NO_GRAPH))


def test_warns_when_upstream_skips_the_off_state_draft_extend(monkeypatch, caplog):
    from sglang_specgate.worker import warn_if_off_state_skips_draft_extend

    monkeypatch.delenv("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND", raising=False)
    assert not warn_if_off_state_skips_draft_extend()
    assert not caplog.text
    monkeypatch.setenv("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND", "1")
    assert warn_if_off_state_skips_draft_extend()
    assert "stale draft KV cache" in caplog.text


def test_the_fast_off_path_runs_only_on_a_release_it_passed_the_gpu_suite_on():
    blocker = fast_off_path_blocker()
    if installed_release() in FAST_OFF_PATH_RELEASES:
        assert blocker is None
    else:
        assert blocker == f"not verified on a GPU with SGLang {installed_release()} (verified: 0.5.17)"


def test_with_the_fast_off_path_off_the_steps0_state_is_upstreams_own(monkeypatch):
    """The correctness-first path (a release without a GPU run): upstream builds the steps-0
    state unchanged, and plain steps get upstream's verify input and stand-ins."""
    built = []
    monkeypatch.setattr(EAGLEWorkerV2, "build_adaptive_runtime_state",
                        lambda self, steps, tokens, cuda_graph_bs=None: built.append((steps, tokens)) or "upstream's")
    monkeypatch.setattr(EAGLEWorkerV2, "_build_trivial_verify_input", lambda self, batch: "upstream's input")
    monkeypatch.setattr(EAGLEWorkerV2, "_stub_skipped_draft_extend", lambda self, batch, out: built.append("stubs"))
    worker = object.__new__(GatedEAGLEWorkerV2)  # __init__ builds real models
    worker.fast_off_path_blocker = "not verified on a GPU with SGLang 9.9"
    assert worker.build_adaptive_runtime_state(worker_module.PLAIN_STEPS, 1) == "upstream's"
    assert worker._build_trivial_verify_input(SimpleNamespace()) == "upstream's input"
    worker._stub_skipped_draft_extend(SimpleNamespace(), SimpleNamespace())
    assert built == [(0, 1), "stubs"]


@pytest.mark.parametrize("requested", [False, True])
def test_a_worker_the_gates_switching_would_break_is_refused_on_its_release(requested):
    """0.5.23 keeps QSA's MTP index sharing on unless --speculative-adaptive: the gate's state
    switching would break it there. The built worker stands in (building one needs a GPU)."""
    hf_config = SimpleNamespace(index_share_for_mtp_iteration=requested)
    draft_runner = SimpleNamespace(model_config=SimpleNamespace(hf_config=hf_config))
    reason = installed().why_the_gate_cannot_drive(SimpleNamespace(_draft_worker=SimpleNamespace(
        draft_runner=draft_runner)))
    if installed_release() == "0.5.23" and requested:
        assert "index_share_for_mtp_iteration" in reason
    else:
        assert reason is None


@pytest.mark.parametrize("topk, steps, blocker, verified_with", [
    (4, worker_module.PLAIN_STEPS, None, 1),  # a tree server's plain step: its one-node tree as a chain
    (4, 5, None, 4),  # its speculative steps: upstream's tree verify
    (1, worker_module.PLAIN_STEPS, None, 1),  # a chain: upstream's, untouched
    (4, worker_module.PLAIN_STEPS, "not verified on a GPU with SGLang 9.9", 4),  # upstream's steps-0 state
], ids=["tree plain step", "tree speculative step", "chain plain step", "fast off path off"])
def test_a_tree_servers_plain_step_verifies_without_the_trees_path_compaction(monkeypatch, topk, steps, blocker,
                                                                             verified_with):
    """Upstream's own verify runs, on a stand-in worker (building one needs a GPU); its call of
    run_eagle_verify, which compacts the accepted path for topk > 1 only, is recorded instead of
    run (it needs a GPU batch)."""
    from sglang.srt.speculative import eagle_worker_v2

    seen = []
    monkeypatch.setattr(eagle_worker_v2, "run_eagle_verify", lambda batch, **kwargs: seen.append(kwargs["topk"]))
    worker = object.__new__(GatedEAGLEWorkerV2)  # __init__ builds real models
    worker.fast_off_path_blocker, worker.topk, worker.speculative_num_steps = blocker, topk, steps
    worker.speculative_num_draft_tokens, worker.device = 1, "cpu"
    worker._target_worker = worker.req_to_token_pool = worker.token_to_kv_pool_allocator = None
    worker.plan_stream = worker.plan_stream_ctx = None
    worker.verify(SimpleNamespace(), grammar_barrier=None)
    assert seen == [verified_with]
    assert worker.topk == topk and vars(worker)["topk"] == topk  # the server's topk is back


def test_upstream_compacts_the_accepted_path_by_the_topk_its_verify_passes():
    """What ONE_NODE_VERIFY_TOPK relies on: the compaction is gated on run_eagle_verify's topk
    argument, not on the verify input's (eagle_worker_common.py:630 on 0.5.17, :772 on 0.5.23)."""
    import inspect

    from sglang.srt.speculative.eagle_worker_common import run_eagle_verify

    assert "if finalize_tree_path and not batch.forward_mode.is_idle() and topk > 1:" in inspect.getsource(
        run_eagle_verify)


@pytest.mark.fast_off_path
@pytest.mark.parametrize("steps", [worker_module.PLAIN_STEPS, 1], ids=["off state", "auto candidate"])
def test_an_extra_states_target_backend_shares_the_servers_workspace(monkeypatch, steps):
    """Upstream asks for a new workspace for each extra state's target backend
    (eagle_worker_v2.py:1319-1325), 384 MiB a state on FlashInfer; the gated build asks for the
    server's, and the off state's backend is still converted to decode kernels. Upstream's build
    and the runner (a GPU's) are stand-ins."""
    class DraftWorker:  # its capture, shadowed for the build, is not called by this stand-in build
        def _capture_cuda_graphs(self):
            pass

    def upstream_build(self, steps, draft_tokens, cuda_graph_bs=None):
        backend = self._target_worker.model_runner._get_attention_backend(init_new_workspace=True)
        return SimpleNamespace(target_backend=backend, cuda_graph_runner_for_draft_extend=None)

    monkeypatch.setattr(EAGLEWorkerV2, "build_adaptive_runtime_state", upstream_build)
    runner = TargetRunner()
    worker = gated_worker(DraftWorker(), runner)
    worker.deferral_blocker, worker.deferred_draft_kv = None, None
    state = worker.build_adaptive_runtime_state(steps, steps + 1)
    assert runner.asked_new_workspace == [False]
    converted = "OneTokenDecodeTritonAttnBackend" if steps == worker_module.PLAIN_STEPS else "TritonAttnBackend"
    assert type(state.target_backend).__name__ == converted
    assert "_get_attention_backend" not in vars(runner)  # the runner's own method is back
