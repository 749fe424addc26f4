"""Every way sglang-specgate changes SGLang, in one place.

Each entry says what it hooks, why, how, which upstream code it depends on and when it can
go, and on which SGLang releases it has been verified (``verified_on``: on a GPU, or by the CPU
suite alone); a hook is registered only on the releases it names. ``register_hooks`` is the only
code that hands these to SGLang's ``HookRegistry`` (and, on 0.5.23, to its resolution pipeline's
``register_resolution_hook``); the test suite checks that every entry of the installed release
is applied in a fresh SGLang process and that nothing else is patched. What the gate changes on
SGLang objects while it runs is registered in runtime_patches.py, and start-up checks those
names too (``unresolved_targets``). Start-up fails loudly (see plugin.py) if the SGLang version
is not a supported release or if any target no longer resolves.

Implementations are named as ``module:attribute`` and resolved on first call, so loading
the plugin in the launcher does not import the GPU worker code; class replacements are
resolved at registration because SGLang substitutes the class object itself.
"""

from __future__ import annotations

import functools
import pkgutil
from dataclasses import dataclass, field

from sglang_specgate import runtime_patches
from sglang_specgate.sglang_versions import (ADAPTERS, CPU_0_5_23, GPU_0_5_17, GPU_0_5_17_CPU_0_5_23,
                                             installed_release)

# A hook kind of SGLang 0.5.23's resolution pipeline, not of HookRegistry: the target is the
# pipeline step a wrapper is registered for (register_resolution_hook, by its name).
RESOLUTION = "RESOLUTION"


@dataclass(frozen=True)
class Hook:
    target: str  # dotted path handed to HookRegistry (for RESOLUTION: the wrapped step)
    kind: str  # HookType name: REPLACE, AROUND, AFTER; or RESOLUTION
    implementation: str  # "module:attribute" of ours; {adapter}: the release's sglang_versions module
    why: str
    how: str
    upstream: str  # the SGLang code it relies on, per release
    removal: str  # when it can go
    verified_on: dict = field(compare=False)  # release -> sglang_versions.GPU or CPU; registered on these releases only

    def implementation_for(self, release: str) -> str:
        return self.implementation.format(adapter=ADAPTERS[release])


HOOKS: tuple[Hook, ...] = (
    Hook(
        target="sglang.srt.server_args.ServerArgs",
        kind="REPLACE",
        implementation="sglang_specgate.sglang_versions.{adapter}:GateServerArgs",
        why="Make --speculative-disable-batch-threshold (and the dwell/re-enable knobs) real "
        "ServerArgs fields instead of a text patch of server_args.py (the seeds' crash).",
        how="A subclass with the three A[..., Arg, NS('spec')] fields of args.GATE_FIELDS: a "
        "dataclass on 0.5.17, a msgspec Struct on 0.5.23. SGLang's class REPLACE rebinds every "
        "module-level `ServerArgs` name, so add_cli_args, prepare_server_args, from_cli_args, "
        "--config and pickling use it unchanged; 0.5.23's config bags find the fields by their "
        "NS marker.",
        upstream="0.5.17: srt/server_args.py:438 (dataclass), :8214 add_cli_args, :9344 "
        "prepare_server_args; srt/arg_groups/arg_utils.py:58-98 (A, Arg, NS). 0.5.23: "
        "srt/server_args.py:231-563 (the defstruct, add_cli_args :351, from_cli_args :446, "
        "__setattr__'s seal :474, __reduce__ :498), :668 prepare_server_args; "
        "arg_groups/arg_utils.py:59-103 (A, Arg, NS), :106 namespace_of (NS markers); "
        "runtime_context.py:869-907 (config bags).",
        removal="When SGLang ships a native batch-threshold flag (no upstream PR merged as "
        "of 0.5.23; #13376 was closed).",
        verified_on=GPU_0_5_17_CPU_0_5_23,
    ),
    Hook(
        target="sglang.srt.entrypoints.engine.Engine.server_args_class",
        kind="REPLACE",
        implementation="sglang_specgate.sglang_versions.{adapter}:GateServerArgs",
        why="sglang.Engine(**kwargs) builds its args from a class attribute, which SGLang's "
        "class REPLACE does not rebind (it only rebinds module globals).",
        how="Set the attribute to GateServerArgs so Engine(speculative_disable_batch_threshold=N) "
        "is accepted and validated like the CLI flag.",
        upstream="srt/entrypoints/engine.py:211 (server_args_class), :235 (construction); "
        "0.5.23: :264, :297.",
        removal="When HookRegistry propagates class replacements to class attributes, or "
        "with the ServerArgs hook.",
        verified_on=GPU_0_5_17_CPU_0_5_23,
    ),
    Hook(
        target="sglang.srt.server_args.prepare_server_args",
        kind="AROUND",
        implementation="sglang_specgate.args:exit_on_config_error",
        why="A gate misconfiguration found during resolution (e.g. the threshold without "
        "EAGLE) would otherwise reach the user as a Python traceback.",
        how="Catch SpecGateConfigError, print it argparse-style and exit with status 2; "
        "other errors pass through untouched. 0.5.23 resolves later, in run_server's "
        "resolve_once: the record it returns is marked to end the same way there "
        "(GateServerArgs.resolve_once).",
        upstream="srt/server_args.py:9344 prepare_server_args (launch_server.py:68, "
        "cli/serve.py:139); 0.5.23: server_args.py:668, launch_server.py:29 and :81 "
        "(resolve_once in run_server), cli/serve.py:105-106.",
        removal="With the ServerArgs hook, or when SGLang reports ValueErrors from "
        "resolution without a traceback.",
        verified_on=GPU_0_5_17_CPU_0_5_23,
    ),
    Hook(
        target="sglang.srt.arg_groups.speculative_hook.handle_speculative_decoding",
        kind=RESOLUTION,
        implementation="sglang_specgate.sglang_versions.v0_5_23:resolve_gate",
        why="0.5.23's resolution never writes the record and runs after prepare_server_args: "
        "the gate's fields must be resolved (environment precedence) and validated inside "
        "its pipeline, where 0.5.17 did it in __post_init__.",
        how="SGLang's own plugin API for a resolution step: a wrapper of the speculative step "
        "declares the gate's fields (declare_resolution) from the raw flags and the "
        "environment, calls the step, then validates the combination on what it resolved.",
        upstream="0.5.23: srt/arg_groups/resolution_hooks.py:14-146 (register_resolution_hook, "
        "the whitelist :81), pipeline.py:304-306 (the step), overrides.py:110-135 "
        "(declare_resolution), model_override_base.py:94-122 (resolving_view).",
        removal="When SGLang ships a native batch-threshold flag.",
        verified_on=CPU_0_5_23,
    ),
    Hook(
        target="sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker",
        kind="AFTER",
        implementation="sglang_specgate.worker:select_worker_class",
        why="The gate lives in the EAGLE worker: it picks speculative or plain decoding per "
        "decode step (with auto, how many draft steps) and owns the fast off path.",
        how="When the threshold is set and SGLang picked EAGLEWorkerV2, return "
        "GatedEAGLEWorkerV2 (a subclass); when SGLang picked any other worker, raise, so a "
        "server asked for the gate never runs without it. Its controller (upstream's "
        "AdaptiveController with the gate's params, controller_params.py; on 0.5.23 passed to it "
        "as its AdaptiveSpecPolicy) builds a state per draft step count the gate can choose (the "
        "server's and 0; with auto, every candidate) and, with auto, times each state's captured "
        "graphs at every decode batch size and takes rank 0's table (step_cost_calibration.py). "
        "On 0.5.23 it refuses a draft that asks for QSA's MTP index sharing, which upstream keeps "
        "off under adaptive state switching only (eagle_worker_v2.py:427-446). On a release "
        "whose fast off path has not run on a GPU (0.5.23), the rest of this is off and plain "
        "steps run upstream's own steps-0 state (worker.fast_off_path_blocker). While upstream "
        "builds the "
        "steps-0 state, it gives that state's attention backends decode kernels for one-token "
        "forwards (one_token_decode.py) and captures its draft extend one token wide, writing "
        "only the draft's KV cache (kv_only_draft.py) at the sizes of several decode steps; "
        "while off, plain steps and prefills buffer their draft rows, written through that "
        "graph (deferred_draft_kv.py). What it changes on SGLang's objects for these is "
        "registered in runtime_patches.py. activate_step_by_batch and the draft-extend "
        "methods write the buffer before any draft forward that reads the cache. The subclass "
        "overrides "
        "_stub_skipped_draft_extend and, where the target's backend has no verify_mask, "
        "_build_trivial_verify_input to hand out the same values as slices of tensors "
        "built once (plain_step_constants.py), and verify, so that a tree server's plain steps "
        "verify their one-node tree with topk 1 (runtime_patches.ONE_NODE_VERIFY_TOPK, CPU-verified "
        "only). It overrides apply_runtime_state, upstream's "
        "swap that the controller calls on every switch, to keep only the newest "
        "adaptive_spec.restore entry of the RuntimeContext's override log, and mutes that "
        "swap's unthrottled 'Switch adaptive runtime state' INFO line with a filter on its "
        "module's logger (state_switch.py).",
        upstream="srt/speculative/spec_info.py:284-298 (create_worker), "
        "speculative/eagle_worker_v2.py:1007 (EAGLEWorkerV2), :1299-1375 "
        "(build_adaptive_runtime_state), :339 (_capture_cuda_graphs), :1377-1422 "
        "(apply_runtime_state: its log line and override), :1072-1101 (init_cuda_graphs: "
        "register, then init_states); speculative/adaptive_runtime_state.py:94-115 (init_states "
        "builds every candidate, then activates the server's steps), :18-43 (SpecRuntimeState's "
        "runners); model_executor/runner_backend/full_cuda_graph_backend.py:58, :123-130 "
        "(_graphs by ShapeKey, replay); distributed/parallel_state.py:1414 (broadcast_object); "
        "runtime_context.py:902 (the override "
        "log's append), :934 (resolved_server_args_dict overlays it in order), "
        "speculative/draft_worker_common.py:111-112 (so does the draft's copy); "
        "model_executor/model_runner.py:1226 (_get_attention_backend), :763-767 "
        "(max_decode_logits_rows, the shared logits buffer's size); "
        "model_executor/runner/base_cuda_graph_runner.py:61-99 (get_batch_sizes_to_capture, "
        "the request-pool clamp); model_executor/input_buffers.py:16 (runners share input "
        "buffers of equal size); "
        "speculative/eagle_draft_extend_cuda_graph_runner.py:129 (capture sizes, read by name), "
        ":133 (capture width), :226-229 (logits rows from the runner's graph_shared_output), :285 "
        "(can_run_graph), :468-598 (execute: the buffers it fills, padding, the read-done event); "
        "speculative/eagle_worker_v2.py:727-838 (_draft_extend_for_prefill: the tokens shifted "
        "with _eagle_prefill_tail_tokens, its output a next-step EagleDraftInput), :1131-1142 "
        "(called with the target's FULL hidden states, inside the draft's contexts); "
        "mem_cache/memory_pool.py:1626-1627 (KVCache size, page_size: size + page_size slots), "
        ":2968 (slot 0, the padding slot); eagle_info.py:146 (EagleDraftInput); "
        "speculative/eagle_worker_v2.py:854 (_draft_extend_for_decode), :1143 (activate_step_by_batch), :1182-1196 "
        "(where decode steps call it), :1200-1253 (_build_trivial_verify_input), :1255-1283 "
        "(_stub_skipped_draft_extend); speculative/eagle_utils.py:371-395 (the verify kernels "
        "read the tree), :481 (get_draft_recurrent_hidden_state_spec); "
        "managers/overlap_utils.py:501-523 (stash copies the stubs); "
        "managers/scheduler.py:1663-1680 (_apply_war_barrier); "
        "layers/attention/triton_backend.py (forward_decode, "
        "init_forward_metadata*, :218 max_kv_splits, init_cuda_graph_state); "
        "sglang/kernels/ops/attention/decode_attention.py:991 (max_kv_splits must equal "
        "the split buffers' width); layers/attention/flashinfer_backend.py:438-458 (kv_indptr, "
        "kv_last_page_len sized at the CUDA-graph batch limit), :691-792 "
        "(init_forward_metadata_out_graph: decode wrappers per captured size), :1398 "
        "(forward_decode), :1488-1489 and :1759-1760 (the updaters' references), :1684-1689 "
        "(host lengths planned without a device copy); layers/logits_processor.py:707-754 (_get_logits, "
        "_compute_lm_head); models/llama_eagle3.py:81-110 (decoder layer: mlp last); "
        "models/llama.py:209-216 and :262-263 (self_attn.attn, called as attn(q, k, v, "
        "forward_batch), its output through o_proj); layers/linear.py:921 (QKVParallelLinear: "
        "weight rows Q, K, V), :1380 (RowParallelLinear: output_size, bias); "
        "models/llama.py:178-179, 221 (q_size, kv_size, the split); mem_cache/memory_pool.py:2305-2350 "
        "(MHATokenToKVPool.set_kv_buffer); triton_backend.py:1217-1245 and "
        "flashinfer_backend.py:899-902, 1410-1425 (the decode paths' stores).",
        removal="When upstream's adaptive steps-0 state runs at plain-decode speed and "
        "accepts a policy object (0.5.23 AdaptiveSpecPolicy), a policy alone suffices.",
        verified_on=GPU_0_5_17_CPU_0_5_23,
    ),
    Hook(
        target="sglang.srt.speculative.eagle_utils._eagle_prefill_tail_tokens",
        kind="REPLACE",
        implementation="sglang_specgate.chunked_prefill_tail:tail_tokens",
        why="For a prefill batch that ends in a prompt chunk, upstream writes the draft's tail "
        "token with a tensor item assignment: a copy from a host scalar and a stream "
        "synchronize, blocking the scheduler (15.7 % of its time at 8B, C = 64, gate off). "
        "The gate runs the speculative prefill whatever its state, so off paid it and plain "
        "did not.",
        how="The same tail tokens, with the chunked request's row written by fill_ with a "
        "Python number (a kernel argument, no copy). SGLang's REPLACE also rebinds "
        "eagle_worker_v2's imported name. Applies to every EAGLE server, gated or not.",
        upstream="srt/speculative/eagle_utils.py:84-97 (_eagle_prefill_tail_tokens, PR "
        "#26329); speculative/eagle_worker_v2.py:72 (import), :745 (_draft_extend_for_prefill); "
        "managers/schedule_batch.py:1953 (chunked_req_next_prompt_token).",
        removal="When upstream writes that row without a host copy: "
        "test_the_chunk_tail_is_a_kernel_fill_not_a_host_copy fails then, by design.",
        verified_on=GPU_0_5_17,
    ),
    Hook(
        target="sglang.srt.mem_cache.allocation.alloc_for_spec_decode",
        kind="AROUND",
        implementation="sglang_specgate.spec_decode_alloc:alloc_with_host_lengths",
        why="Every EAGLE decode step, gated off or speculating, ends its KV allocation by "
        "recording each request's allocated length from int(nxt_kv_lens_cpu[i]), a host "
        "tensor indexed once per request: 3.1 % of the gated scheduler's time at 8B, C = 128, "
        "gate off, work a plain server does not do.",
        how="With one token per page, where that loop is the tensor's only reader, call the "
        "original with the same lengths as a Python list; paged allocators get the tensor "
        "unchanged. SGLang's AROUND rebinds eagle_utils' and dflash_info_v2's imported name. "
        "Applies to every EAGLE server, gated or not.",
        upstream="srt/mem_cache/allocation.py:674-724 (alloc_for_spec_decode: page_size 1 "
        "allocates with alloc_token_slots, writes req_to_token from nxt_kv_lens, then the "
        "per-request loop); speculative/eagle_utils.py:17 (import), :879-952 "
        "(eagle_prepare_for_decode builds the tensor from a list).",
        removal="When upstream records the lengths from a list: "
        "test_sglangs_loop_indexes_the_tensor_per_request fails then, by design.",
        verified_on=GPU_0_5_17,
    ),
    Hook(
        target="sglang.srt.managers.overlap_utils.FutureMap.resolve_seq_lens_cpu",
        kind="AROUND",
        implementation="sglang_specgate.host_seq_lens:resolve_with_host_lengths",
        why="With a backend that plans on host lengths (FlashInfer), spec-v2 copies each "
        "step's new sequence lengths back from the GPU and waits for them before preparing "
        "the next step; off, no draft work hides that wait, and the GPU idled 41 % of each off "
        "step (8B, C = 64). After a plain "
        "step or a prefill the host knows those lengths.",
        how="Where the scheduler's own decision (decide_needs_cpu_seq_lens on the worker's "
        "backends) asks for host lengths, the gated worker (init_attention_backends) installs "
        "a per-process mirror of the lengths each forward publishes, recorded through the "
        "on_publish callback it wraps (forward_batch_generation): a prefill's own, a plain "
        "step's plus one, a speculative step's unknown; prefill or not is decided before the "
        "forward, since verify relabels decode batches TARGET_VERIFY, an extend mode. For a "
        "batch whose slots are all known and whose step the gate will not speculate "
        "(SpecGatePolicy.speculates_next, a peek that records nothing), call the original with "
        "needs_cpu_seq_lens off (upstream's GPU-only path: stream wait, device gather) and set "
        "seq_lens_cpu and seq_lens_sum from the mirror; otherwise the original unchanged. "
        "One batch served in 8 is compared with the GPU's lengths on the device; once the "
        "host sees a disagreement (at the next check, without a wait) the mirror stands down. "
        "Inactive without the gate, under PD disaggregation, with "
        "SGLANG_SPEC_GATE_HOST_SEQ_LENS=0, and for backends that need no host lengths (Triton, "
        "FA3).",
        upstream="srt/managers/overlap_utils.py:412-468 (resolve_seq_lens_cpu: the GPU-only "
        "branch :436-446, the copy and its wait :448-466), :470-490 (publish); managers/scheduler.py:"
        "3561 (resolve before each forward), :3580-3595 (on_publish into the worker); "
        "speculative/eagle_worker_v2.py:1117-1122 (a prefill publishes batch.seq_lens), "
        ":1179-1181 (a decode step publishes after verify), eagle_utils.py:542-543 (verify "
        "relabels the batch TARGET_VERIFY), eagle_worker_common.py:589 "
        "(new_seq_lens = seq_lens + accept_lens); speculative/base_spec_worker.py:191-193 "
        "(init_attention_backends, after the pools), managers/scheduler.py:981-984 (pools, "
        "then backends), :1414-1426 (the FutureMap's needs_cpu_seq_lens); "
        "managers/schedule_batch.py:2218, :2314-2323 (a prefill's host "
        "lengths), :3075, :3134-3136 (filter and merge keep them).",
        removal="When spec-v2 keeps host lengths itself for steps whose accept lengths are "
        "known (the steps-0 state), or publishes them without a blocking copy.",
        verified_on=GPU_0_5_17,
    ),
    Hook(
        target="sglang.srt.managers.scheduler.Scheduler.get_internal_state",
        kind="AFTER",
        implementation="sglang_specgate.observability:add_gate_state",
        why="Operators and the benchmark suite read the gate's counters from /server_info "
        "(sglang.benchmark.serving embeds server_info in every result row).",
        how="Add internal_state['spec_gate'] = GatedEAGLEWorkerV2.gate_state(): state, N, "
        "counters, whether the fast off path is active, accept length around re-enables.",
        upstream="srt/managers/scheduler.py:4165 get_internal_state; "
        "entrypoints/http_server.py:781-806 (/server_info); 0.5.23: scheduler.py:5549 (delegates to "
        "scheduler_components/internal_state.py:45-63, which returns the same output record).",
        removal="When SGLang's internal-state contributors (0.5.23: SchedulerInternalStateController) "
        "take plugin contributions.",
        verified_on=GPU_0_5_17_CPU_0_5_23,
    ),
    Hook(
        target="sglang.srt.managers.scheduler_components.metrics_reporter."
        "SchedulerMetricsReporter.report_decode_stats",
        kind="AFTER",
        implementation="sglang_specgate.observability:export_gate_metrics",
        why="With --enable-metrics, operators alert on the gate's state and switch rate next to "
        "SGLang's own spec_accept_length gauges.",
        how="On ranks that export scheduler metrics, create sglang:spec_gate_active, "
        "sglang:spec_gate_switches_total and sglang:spec_gate_decode_steps_total{mode} lazily "
        "(after PROMETHEUS_MULTIPROC_DIR is set) and feed them the policy's counters.",
        upstream="srt/managers/scheduler_components/metrics_reporter.py:695 "
        "report_decode_stats; observability/metrics_collector.py:240-259 (labels). 0.5.23: "
        "metrics_reporter.py:901 (report_decode_stats), :229-232 (scheduler, metrics_collector "
        "fields), :241 (current_scheduler_metrics_enabled); metrics_collector.py:354 (labels).",
        removal="When SGLang exposes a metrics extension point for plugins.",
        verified_on=GPU_0_5_17_CPU_0_5_23,
    ),
)


def hooks_for(release: str) -> tuple[Hook, ...]:
    """The hooks registered on ``release``."""
    return tuple(h for h in HOOKS if release in h.verified_on)


def unresolved_targets(release: str | None = None) -> list[str]:
    """Hook targets and runtime-patched names of ``release`` (the installed one by default)
    that do not resolve in the installed SGLang (importing their modules)."""
    release = release or installed_release()
    missing = []
    for hook in hooks_for(release):
        try:
            pkgutil.resolve_name(hook.target)
            if hook.kind == RESOLUTION:
                from sglang.srt.arg_groups.resolution_hooks import _OVERRIDABLE_HOOKS

                if hook.target.rpartition(".")[2] not in _OVERRIDABLE_HOOKS:
                    raise LookupError("not an overridable resolution step")
        except Exception as e:  # importing a changed SGLang module can fail in any way
            missing.append(f"{hook.target} ({type(e).__name__}: {e})")
    return missing + runtime_patches.unresolved_names(release)


@functools.cache
def _implementation(path: str):
    return pkgutil.resolve_name(path)


def _deferred(path: str):
    """A hook function that imports its implementation on first call (some run per step)."""

    def call(*args, **kwargs):
        return _implementation(path)(*args, **kwargs)

    call.__qualname__ = call.__name__ = path
    return call


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    release = installed_release()
    for hook in hooks_for(release):
        implementation = hook.implementation_for(release)
        if hook.kind == RESOLUTION:
            from sglang.srt.arg_groups.resolution_hooks import register_resolution_hook

            register_resolution_hook(hook.target.rpartition(".")[2])(_deferred(implementation))
            continue
        kind = HookType[hook.kind]
        # SGLang substitutes a replacement class itself, so it must be resolved now.
        impl = _implementation(implementation) if kind is HookType.REPLACE else _deferred(implementation)
        HookRegistry.register(hook.target, impl, kind)


def inactive_targets() -> list[str]:
    """Registered targets SGLang has not applied (its loader only logs such failures)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    release = installed_release()
    inactive = []
    for hook in hooks_for(release):
        if hook.kind == RESOLUTION:
            from sglang.srt.arg_groups.resolution_hooks import _HOOKS

            step = hook.target.rpartition(".")[2]
            applied = any(fn.__qualname__ == hook.implementation_for(release) for fn in _HOOKS.get(step, ()))
        else:
            applied = hook.target in HookRegistry._patched  # the registry's record (hook_registry.py:160)
        if not applied:
            inactive.append(hook.target)
    return inactive
