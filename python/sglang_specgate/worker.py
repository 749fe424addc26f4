"""GPU plumbing: the EAGLE worker that asks the gate policy, once per decode step,
whether to speculate.

Speculating steps are upstream EAGLEWorkerV2 unchanged. Plain steps reuse upstream's
adaptive "steps 0" runtime state (a one-token verify plus a one-token draft extend that keeps
the draft KV cache current, so re-enabling is warm), changed in two ways while it is built:
its attention backends answer those one-token forwards with their decode kernels
(one_token_decode.py; upstream runs them through prefill-style kernels, most of its steps-0
cost), and its draft extend is captured as a CUDA graph one token wide, the width it runs at,
that only writes the draft's KV cache (kv_only_draft.py) and reads one entry (one KV split).
Plain steps then hand their draft-extend rows to a buffer written in one replay every few
steps (deferred_draft_kv.py) instead of replaying that graph each step, and so do prefills while
off, one row per prompt token, instead of running the draft over the prompt; for that the graph
is also captured at batch sizes above the decode batch's largest. The tensors upstream builds
for every plain step whose values never change (its one-node verify tree, the stand-ins for the
skipped draft outputs) are built once (plain_step_constants.py), and on a tree server
(topk > 1) a plain step verifies its one-node tree as a chain, without the tree's accepted-path
compaction (verify). Switching is upstream's ``AdaptiveController`` swapping pre-captured runtime
states, driven by our policy instead of its acceptance EMA; what each swap leaves behind is kept
bounded (state_switch.py). For backends that plan on host sequence lengths (FlashInfer), the
worker records the lengths each forward publishes where the host knows them, so the scheduler
need not wait for the GPU's copy after a plain step (host_seq_lens.py). A plain step stays
upstream's one-token verify: the target's own decode step in its place was built and measured no
faster (docs/design.md, which also has what the off state costs against a plain server).

On a release where that fast off path has not run on a GPU (sglang_versions.FAST_OFF_PATH_RELEASES),
none of it is used: plain steps run upstream's own steps-0 state, driven by the same policy.
"""

from __future__ import annotations

import contextlib
import logging
import time
from types import SimpleNamespace

import torch

from sglang.srt.environ import envs
from sglang.srt.layers.moe.utils import speculative_moe_a2a_backend_context, speculative_moe_backend_context
from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens
from sglang.srt.runtime_context import get_context
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

from sglang_specgate import host_seq_lens
from sglang_specgate.args import (THRESHOLD_FLAG, SpecGateConfigError, auto_gate_config, gate_config, gate_is_auto,
                                  host_seq_lens_enabled)
from sglang_specgate.controller_params import PLAIN_STEPS, AutoGateParams, ThresholdGateParams
from sglang_specgate.deferred_draft_kv import NO_GRAPH, DeferredDraftKV, capture_write_sizes, why_not_deferred
from sglang_specgate.drafting import drafting_of
from sglang_specgate.graph_plan import decode_graph_sizes, described, graph_plan
from sglang_specgate.kv_only_draft import kv_only_draft_forward
from sglang_specgate.one_token_decode import read_one_entry, use_decode_kernels
from sglang_specgate.plain_step_constants import PlainStepConstants
from sglang_specgate.policy import SpecGatePolicy
from sglang_specgate.runtime_patches import (DRAFT_EXTEND_ROUTING, DRAFT_GRAPH_CAPTURE, FA3_DRAFT_EXTEND_GRAPH,
                                             ONE_NODE_VERIFY_TOPK, SHARED_TARGET_WORKSPACE, TARGET_BACKEND_FACTORY,
                                             assign, shadowed, unresolved_names)
from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed, installed_release
from sglang_specgate.state_switch import drop_superseded_restores, mute_upstream_switch_line

logger = logging.getLogger(__name__)

GRAPH_WIDTH_OVERRIDE = "spec_gate.draft_extend_graph_width"  # provenance in ServerArgs.override


def select_worker_class(worker_cls, algorithm, server_args):
    """AFTER hook on ``SpeculativeAlgorithm.create_worker``."""
    threshold = getattr(installed().resolved(server_args), "speculative_disable_batch_threshold", None)
    if not threshold:
        return worker_cls
    if worker_cls is not EAGLEWorkerV2:
        raise SpecGateConfigError(
            f"{THRESHOLD_FLAG} {threshold} needs SGLang's EAGLEWorkerV2, but "
            f"{algorithm} selected {worker_cls.__name__}. Drop {THRESHOLD_FLAG} or use "
            "--speculative-algorithm EAGLE or EAGLE3."
        )
    return GatedEAGLEWorkerV2


def warn_if_off_state_skips_draft_extend() -> bool:
    """Upstream's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND also applies under the gate: off steps
    get cheaper but the draft KV cache goes stale, so say what the user traded."""
    skipped = envs.SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND.get()
    if skipped:
        logger.warning(
            "spec gate: SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1, so speculation-off steps skip "
            "the draft extend. They run closer to plain speed, but requests that live through "
            "an off period resume speculating against a stale draft KV cache (lower accept "
            "length; see reenable_acceptance in /server_info). Unset it for a warm re-enable."
        )
    return skipped


class GateController(AdaptiveController):
    """Upstream's controller driven by the gate's params (the release's adapter says how it
    takes them); it builds every candidate's state at start-up and tells the params, which for
    the auto gate then measure what a step of each costs."""

    def __init__(self, worker, params: ThresholdGateParams | AutoGateParams):
        installed().init_adaptive_controller(self, worker, params)
        self.params = params  # where the release's controller took none (0.5.17), it replaces its own
        self.states_built: dict | None = None  # what the extra states cost to build, for /server_info

    def init_states(self, cuda_graph_bs=None) -> None:
        started, free = time.perf_counter(), _free_gpu_bytes()
        super().init_states(cuda_graph_bs)
        # Reported, never decided on: ranks' clocks and memory differ.
        # Upstream graphs the draft extend only on the attention backends it lists (FA3 not among
        # them): the states it left eager launch it every step, which graph_plan cannot know.
        eager = sorted(k for k, state in self._states.items() if state.cuda_graph_runner_for_draft_extend is None)
        self.states_built = {"states": sorted(self._states), "seconds": time.perf_counter() - started,
                             "gpu_bytes": None if free is None else free - _free_gpu_bytes(),
                             "draft_extend_eager": eager}
        logger.info("spec gate: built the states for draft steps %s in %.1f s (%s GPU bytes)",
                    self.states_built["states"], self.states_built["seconds"], self.states_built["gpu_bytes"])
        if eager:  # a warning where auto decides on graph replays, which leave those launches out
            auto = isinstance(self.params, AutoGateParams)
            (logger.warning if auto else logger.info)(
                "spec gate: the draft extend of draft steps %s has no CUDA graph on this attention backend: "
                "those steps launch it eagerly%s", eager,
                "; auto's step cost table, which replays graphs, leaves that out until live step times correct it"
                if auto else "")
        self.params.states_built(self._states)


def _free_gpu_bytes() -> int | None:
    return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None


@contextlib.contextmanager
def draft_extend_graph_width(server_args, width: int):
    """Upstream sizes every state's draft-extend graph from the server's static draft width
    (resolve_num_tokens_per_req reads server_args.speculative_num_draft_tokens,
    eagle_draft_extend_cuda_graph_runner.py:133), while a state's draft extend runs at its own
    width, steps + 1; can_run_graph (:285-295) refuses the replay of any other, so a state
    captured at the server's width would launch its draft extend eagerly on every step."""
    static = server_args.speculative_num_draft_tokens
    server_args.override(GRAPH_WIDTH_OVERRIDE, speculative_num_draft_tokens=width)
    try:
        yield
    finally:
        server_args.override(GRAPH_WIDTH_OVERRIDE, speculative_num_draft_tokens=static)


def draft_extend_left_ungraphed(draft_worker, server_args) -> bool:
    """Whether upstream's capture left the draft extend eager where decode steps are graphed and
    SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH does not ask for that (eagle_worker_v2.py:407-447)."""
    return (draft_worker.cuda_graph_runner_for_draft_extend is None
            and bool(decode_graph_sizes(installed().resolved(server_args)))
            and not envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.get())


def fast_off_path_blocker() -> str | None:
    """Why this SGLang runs the gate's off steps through upstream's own steps-0 state instead of
    the fast off path, or None. Correctness first: the fast off path changes how upstream builds
    and runs that state, so it runs only on a release where it passed the GPU suite, and only
    while every name it changes on SGLang's objects resolves there (runtime_patches)."""
    release = installed_release()
    if release not in FAST_OFF_PATH_RELEASES:
        return (f"not verified on a GPU with SGLang {release} (verified: {', '.join(FAST_OFF_PATH_RELEASES)})")
    missing = unresolved_names(release)
    return f"SGLang lacks {'; '.join(missing)}" if missing else None


class GatedEAGLEWorkerV2(EAGLEWorkerV2):
    # Why the fast off path is off (fast_off_path_blocker()), or None; set in __init__.
    fast_off_path_blocker: str | None = None

    def __init__(self, server_args, *args, **kwargs):
        super().__init__(server_args, *args, **kwargs)
        refused = installed().why_the_gate_cannot_drive(self)
        if refused:
            raise SpecGateConfigError(f"{THRESHOLD_FLAG}: {refused}. Drop {THRESHOLD_FLAG} for this model.")
        resolved = installed().resolved(server_args)
        if gate_is_auto(resolved):
            tp_group = self._target_worker.model_runner.tp_group
            self.gate_params = AutoGateParams(auto_gate_config(resolved),
                                              lambda table: tp_group.broadcast_object(table, src=0))
        else:
            self.gate_params = ThresholdGateParams(SpecGatePolicy(gate_config(resolved)), self.speculative_num_steps)
        # Set before the scheduler calls init_cuda_graphs, which registers the speculative
        # state and builds the others through build_adaptive_runtime_state.
        self.adaptive_controller = GateController(self, self.gate_params)
        mute_upstream_switch_line()  # the gate logs its switches itself, rate-limited
        self.fast_off_path_blocker = fast_off_path_blocker()
        # Known once the steps-0 state is built, unless the fast off path is off from the start.
        self.fast_off_path = None if self.fast_off_path_blocker is None else False
        self.off_draft_extend = None  # kv_only_draft's FULL, KV_ONLY or KV_STORE, known then too
        self.skips_off_draft_extend = warn_if_off_state_skips_draft_extend()
        self.deferred_draft_kv: DeferredDraftKV | None = None  # set when the steps-0 state is built
        self.deferral_blocker: str | None = None  # why plain steps extend the draft every step
        if self.fast_off_path_blocker is None:
            self.plain_step_constants = PlainStepConstants(
                self.device, self.topk, *get_draft_recurrent_hidden_state_spec(self.draft_worker.draft_runner))
            # Instance attributes: upstream's decode path calls the draft worker's methods by name.
            self._draft_extend_every_step = self._draft_worker._draft_extend_for_decode
            self._draft_extend_whole_prompt = self._draft_worker._draft_extend_for_prefill
            assign(DRAFT_EXTEND_ROUTING, self._draft_worker, _draft_extend_for_decode=self._draft_extend_for_decode,
                   _draft_extend_for_prefill=self._draft_extend_for_prefill)
        verified = ("yes" if installed_release() in FAST_OFF_PATH_RELEASES else
                    "no (its CPU suite passes; off steps run upstream's steps-0 state)")
        if gate_is_auto(resolved):
            logger.info("spec gate active (auto): draft steps chosen per decode step from %s; SGLang %s, "
                        "verified on a GPU: %s", self.gate_params.candidate_steps, installed_release(), verified)
        else:
            config = self.gate_params.policy.config
            logger.info("spec gate active: speculate (%d steps) while decode batch <= %d; resume "
                        "after %d steps <= %d; SGLang %s, verified on a GPU: %s", self.speculative_num_steps,
                        config.threshold, config.dwell_steps, config.reenable_threshold, installed_release(),
                        verified)
        if self.fast_off_path_blocker:
            logger.warning("spec gate: fast off path off, %s: off steps run upstream's steps-0 state",
                           self.fast_off_path_blocker)
        self.drafting = drafting_of(resolved)
        self.graph_plan = graph_plan(self.drafting, decode_graph_sizes(resolved), self.gate_params.candidate_steps,
                                     deferred_writes=self.fast_off_path_blocker is None)
        logger.info("spec gate: %s drafting (%s, chosen by %s), KV reserved %d tokens a request; planned graphs: %s",
                    self.drafting.shape, self.drafting.flags(), self.drafting.chosen_by,
                    self.graph_plan["kv_reserved_tokens_per_request"], " | ".join(described(self.graph_plan)))

    def gate_state(self) -> dict:
        """What /server_info shows under internal_states[i].spec_gate."""
        return {
            **self.gate_params.snapshot(),
            "drafting": self.drafting.snapshot(),
            "graph_plan": self.graph_plan,
            "states_built": self.adaptive_controller.states_built,
            "fast_off_path": self.fast_off_path,
            "fast_off_path_blocker": self.fast_off_path_blocker,
            "off_draft_extend": "skipped" if self.skips_off_draft_extend else self.off_draft_extend,
            "deferred_draft_kv": self.deferred_draft_kv.snapshot() if self.deferred_draft_kv else None,
            "reenable_acceptance": self.gate_params.reenable_acceptance.snapshot(),
            "host_seq_lens": host_seq_lens.mirror.snapshot() if host_seq_lens.mirror else None,
        }

    def build_adaptive_runtime_state(
        self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None
    ):
        if self.fast_off_path_blocker:
            return super().build_adaptive_runtime_state(
                speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs
            )
        if speculative_num_steps != PLAIN_STEPS:  # an auto candidate between plain and the server's
            with self._target_backend_on_shared_workspace(), \
                    self._draft_graphs_captured_at_width(speculative_num_draft_tokens):
                return super().build_adaptive_runtime_state(
                    speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs
                )
        with self._target_backend_on_shared_workspace(), self._one_token_backends_use_decode_kernels():
            state = super().build_adaptive_runtime_state(
                speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs
            )
        runner = state.cuda_graph_runner_for_draft_extend
        if runner is None and not self.deferral_blocker:
            self.deferral_blocker = NO_GRAPH
        if self.deferral_blocker:
            logger.info("spec gate: plain steps extend the draft every step: %s", self.deferral_blocker)
        else:
            self.deferred_draft_kv = DeferredDraftKV(runner)
        return state

    def apply_runtime_state(self, state) -> None:
        """Upstream's swap of captured states, which the controller calls on every switch;
        the override it records each time must not pile up (state_switch.py)."""
        super().apply_runtime_state(state)
        drop_superseded_restores(get_context())

    def init_attention_backends(self) -> None:
        super().init_attention_backends()
        # Unless turned off (args.host_seq_lens_enabled), and only where the scheduler copies host
        # lengths back, by its own decision on these backends (scheduler.py:1414-1426);
        # elsewhere recording them would be per-step waste. PD disaggregation publishes lengths
        # outside the worker (eagle_disaggregation.py:75), which the mirror would miss: it keeps
        # upstream's copy.
        if (
            self.fast_off_path_blocker is None
            and host_seq_lens_enabled()
            and self.server_args.disaggregation_mode == "null"
            and decide_needs_cpu_seq_lens(self.server_args, self.spec_v2_attn_backends)
        ):
            host_seq_lens.install(self.req_to_token_pool.req_to_token.shape[0], self.gate_params.speculates_next)

    def forward_batch_generation(self, batch, on_publish=None, **kwargs):
        prefill = host_seq_lens.is_prefill(batch)  # before verify relabels the batch
        if prefill:
            self.gate_params.prefill_launched()  # the auto gate times decode steps without it
        mirror = host_seq_lens.mirror
        if on_publish is not None and mirror is not None:
            publish = on_publish

            def on_publish(new_seq_lens):
                publish(new_seq_lens)
                # Read when upstream publishes, after activate_step_by_batch chose the step.
                plain = self.speculative_num_steps == PLAIN_STEPS
                mirror.published(batch.req_pool_indices_cpu,
                                 host_seq_lens.published_lengths(batch, prefill, plain))

        return super().forward_batch_generation(batch, on_publish=on_publish, **kwargs)

    def activate_step_by_batch(self, batch_size: int) -> None:
        super().activate_step_by_batch(batch_size)
        if self.speculative_num_steps != PLAIN_STEPS:
            self._write_deferred_draft_kv()  # the draft is about to read its cache

    def _draft_extend_for_decode(self, batch, batch_result) -> None:
        """The draft worker's per-step draft extend; plain steps defer theirs when they can.
        Upstream calls it inside the draft's contexts."""
        deferred = self.deferred_draft_kv
        if deferred is not None:
            if self.speculative_num_steps == PLAIN_STEPS and deferred.defer(batch, batch_result):
                # Upstream's stand-ins for the draft outputs a plain step never reads.
                self._stub_skipped_draft_extend(batch, batch_result)
                return
            deferred.write_all()  # rows this step cannot join go first
        self._draft_extend_every_step(batch, batch_result)

    def _draft_extend_for_prefill(self, batch, target_hidden_states, next_token_ids, mm_input_embeds=None):
        """The draft worker's prefill extend; while off, the prompt's rows join the buffer
        (deferred_draft_kv.defer_prefill). Its other outputs seed the first draft step after the
        prefill: while off that step is a plain one, which replaces them with the stubs,
        so the stubs stand in here too; if the gate turns on first, those requests' first
        speculative step drafts from them, as after any off step."""
        deferred = self.deferred_draft_kv
        if deferred is None:
            return self._draft_extend_whole_prompt(batch, target_hidden_states, next_token_ids, mm_input_embeds)
        if (
            self.speculative_num_steps == PLAIN_STEPS
            and mm_input_embeds is None
            and not batch.forward_mode.is_idle()
            and deferred.defer_prefill(batch, target_hidden_states, next_token_ids)
        ):
            draft_input = EagleDraftInput(
                bonus_tokens=next_token_ids, num_tokens_per_req=1, num_tokens_for_logprob_per_req=1
            )
            self._stub_skipped_draft_extend(batch, SimpleNamespace(next_draft_input=draft_input))
            return draft_input
        # The draft's prefill reads the cache and writes slots buffered rows may hold; upstream
        # runs it inside the draft's contexts, so the write needs none of its own.
        deferred.write_all()
        return self._draft_extend_whole_prompt(batch, target_hidden_states, next_token_ids, mm_input_embeds)

    def _build_trivial_verify_input(self, batch):
        """Upstream's one-node verify input for a plain step, its tree and mask constants
        (plain_step_constants.py) where the target's backend keeps no verify mask of its own."""
        if self.fast_off_path_blocker:
            return super()._build_trivial_verify_input(batch)
        attn_backend = self._target_worker.model_runner.attn_backend
        if batch.forward_mode.is_idle() or attn_backend.verify_mask is not None:
            return super()._build_trivial_verify_input(batch)
        # The mask covers the batch's context as upstream sizes it (eagle_worker_v2.py:1229-1235).
        if batch.seq_lens_sum is not None:
            context_tokens = batch.seq_lens_sum
        elif batch.seq_lens_cpu is not None:
            context_tokens = int(batch.seq_lens_cpu.sum())
        else:
            context_tokens = batch.seq_lens.shape[0] * attn_backend.max_context_len
        return self.plain_step_constants.one_node_verify_input(
            batch.spec_info.bonus_tokens, batch.seq_lens, context_tokens)

    def verify(self, batch, *args, **kwargs):
        """Upstream's verify; a plain step of a tree server verifies its one-node tree as the
        chain it is (ONE_NODE_VERIFY_TOPK): with the server's topk upstream would compact the
        accepted path, an identity there, by moving target KV over every layer."""
        if self.fast_off_path_blocker or self.topk == 1 or self.speculative_num_steps != PLAIN_STEPS:
            return super().verify(batch, *args, **kwargs)
        with shadowed(ONE_NODE_VERIFY_TOPK, self, topk=1):
            return super().verify(batch, *args, **kwargs)

    def _stub_skipped_draft_extend(self, batch, batch_output) -> None:
        """Upstream's stand-ins for the draft outputs a plain step leaves unset, as constants."""
        if self.fast_off_path_blocker:
            return super()._stub_skipped_draft_extend(batch, batch_output)
        self.plain_step_constants.stub_draft_outputs(batch_output.next_draft_input, batch.seq_lens.shape[0])

    def _write_deferred_draft_kv(self) -> None:
        """Write the buffered rows in the contexts upstream runs every draft forward in
        (eagle_worker_v2.py:1189-1195). Every speculative step asks, and most have nothing
        buffered: they enter no context."""
        deferred = self.deferred_draft_kv
        if deferred is None or not deferred.rows:
            return
        draft = self._draft_worker
        with (
            draft.draft_tp_context(draft.draft_runner.tp_group),
            speculative_moe_backend_context(),
            speculative_moe_a2a_backend_context(),
        ):
            deferred.write_all()

    def _target_backend_on_shared_workspace(self):
        """While upstream builds an extra state, its target backend uses the server's attention
        workspace (SHARED_TARGET_WORKSPACE) instead of a new one."""
        target_runner = self._target_worker.model_runner
        make_target_backend = target_runner._get_attention_backend

        def make_on_shared_workspace(init_new_workspace: bool = False):  # upstream asks for True
            return make_target_backend(init_new_workspace=False)

        return shadowed(SHARED_TARGET_WORKSPACE, target_runner, _get_attention_backend=make_on_shared_workspace)

    def _draft_graphs_captured_at_width(self, width: int):
        """While upstream builds an auto candidate's state, capture its draft extend at the width
        that state runs at (draft_extend_graph_width)."""
        draft_worker = self._draft_worker
        capture = draft_worker._capture_cuda_graphs

        def capture_at_width():
            with draft_extend_graph_width(draft_worker.draft_runner.server_args, width):
                capture()

        return shadowed(DRAFT_GRAPH_CAPTURE, draft_worker, _capture_cuda_graphs=capture_at_width)

    @contextlib.contextmanager
    def _one_token_backends_use_decode_kernels(self):
        """While upstream builds the steps-0 state, switch the attention backends it creates
        for the target verify and the draft extend to their decode kernels."""
        target_runner = self._target_worker.model_runner
        draft_worker = self._draft_worker
        make_target_backend = target_runner._get_attention_backend
        converted = []

        def make_target_backend_for_decode(*args, **kwargs):
            backend = make_target_backend(*args, **kwargs)
            converted.append(use_decode_kernels(backend))
            return backend

        capture_draft_graphs = draft_worker._capture_cuda_graphs

        def capture_one_token_draft_graphs():
            draft_backend = draft_worker.draft_extend_attn_backend
            draft_converted = draft_backend is not None and use_decode_kernels(draft_backend)
            if draft_backend is not None:
                converted.append(draft_converted)
            if draft_converted:
                read_one_entry(draft_backend)
            draft_runner = draft_worker.draft_runner
            server_args = draft_runner.server_args
            self.deferral_blocker = why_not_deferred(server_args, draft_worker, draft_converted)
            width = server_args.speculative_num_draft_tokens
            # Steps <= 1 captures no draft-decode graph.
            with (
                draft_extend_graph_width(server_args, 1),
                kv_only_draft_forward(draft_runner.model, draft_runner.token_to_kv_pool, draft_backend) as computed,
                contextlib.nullcontext() if self.deferral_blocker else capture_write_sizes(width, draft_backend),
            ):
                capture_draft_graphs()
                if draft_converted and draft_extend_left_ungraphed(draft_worker, server_args):
                    # Upstream graphs the draft extend only on the backends it lists, FA3 not among
                    # them; converted, it runs decode kernels, which FA3 graphs.
                    assign(FA3_DRAFT_EXTEND_GRAPH, draft_worker,
                           cuda_graph_runner_for_draft_extend=EAGLEDraftExtendCudaGraphRunner(draft_worker))
            self.off_draft_extend = computed

        # Instance attributes shadow the methods for this build only.
        with (
            shadowed(TARGET_BACKEND_FACTORY, target_runner, _get_attention_backend=make_target_backend_for_decode),
            shadowed(DRAFT_GRAPH_CAPTURE, draft_worker, _capture_cuda_graphs=capture_one_token_draft_graphs),
        ):
            yield
        self.fast_off_path = bool(converted) and all(converted)
