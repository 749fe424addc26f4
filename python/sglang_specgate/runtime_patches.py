"""Every change sglang-specgate makes to SGLang objects at run time, outside the hook registry.

hooks.HOOKS lists what SGLang's HookRegistry patches at plugin load. The gate also assigns
attributes on SGLang objects while it runs: it shadows methods on single instances, swaps a
backend instance's class, grows buffers, and fills fields of SGLang's own records. Each of
those is an entry here (what it touches, why, how, the upstream code it relies on and when it
can go), and the code makes them only through ``assign``, ``assign_item``, ``shadowed`` and
``swap_class``, which refuse a name its entry does not list. test_runtime_patches.py fails on
any other attribute assignment outside this module onto an object other than ``self``/``cls``
or a function or class its module defines.

At start-up (hooks.unresolved_targets, called by plugin.register and the doctor) every name is
checked on the installed SGLang without a GPU, by the entry's ``check``:
- CLASS_ATTRIBUTE: the class or a base defines it (a method, a class-level value);
- DECLARED_FIELD: the class or a base annotates it (dataclass and msgspec fields) or lists it
  in ``__slots__``;
- SET_IN_A_METHOD: a method of the class or a base assigns ``self.<name>`` (read from the
  source's syntax tree), for attributes only ``__init__`` or a setup method creates;
- MODULE_ATTRIBUTE: the module has it;
- OURS: none of the first three finds it: a name of ours, which must not collide with SGLang's.

Owners are resolved at that check only; making a change imports nothing. An owner whose module
cannot be imported where the check runs (FA3's loads CUDA libraries) is checked in its class
statement: no object of it can exist there to change.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import inspect
import pathlib
import pkgutil
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable, Optional

from sglang_specgate.sglang_versions import CPU_0_5_17, GPU_0_5_17, GPU_0_5_17_CPU_0_5_23

CLASS_ATTRIBUTE = "class attribute"
DECLARED_FIELD = "declared field"
SET_IN_A_METHOD = "set in a method"
MODULE_ATTRIBUTE = "module attribute"
OURS = "ours"


@dataclass(frozen=True)
class RuntimePatch:
    owners: tuple[str, ...]  # dotted paths of the SGLang classes (or module) whose objects change
    attributes: tuple[str, ...]  # the names set, replaced or filled on them
    check: str  # how start-up verifies the names: one of the constants above
    by: str  # our module that makes the change
    why: str
    how: str
    upstream: str  # the SGLang code it relies on, per release
    removal: str  # when it can go
    # release -> sglang_versions.GPU or CPU: where the names are checked at start-up and the change
    # may be made. A fast-off-path change is made only on FAST_OFF_PATH_RELEASES.
    verified_on: dict = field(compare=False)
    # For a change behind an environment switch (args): whether it is on. While off, its names
    # are not checked, and its owners (which may need a GPU to import) are not imported.
    switched_on: Optional[Callable[[], bool]] = field(default=None, compare=False)


_RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
_DRAFT_WORKER = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker"
_TRITON = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend"
_FLASHINFER = "sglang.srt.layers.attention.flashinfer_backend"
_FA3 = "sglang.srt.layers.attention.flashattention_backend.FlashAttentionBackend"


def _fa3_off_path_enabled() -> bool:
    # args imports SGLang's argument machinery. A garbage value counts as off here: the
    # argument check (and the doctor) refuse it, naming the variable and the fix.
    from sglang_specgate.args import SpecGateConfigError, fa3_off_path_enabled

    try:
        return fa3_off_path_enabled()
    except SpecGateConfigError:
        return False

TARGET_BACKEND_FACTORY = RuntimePatch(
    owners=(_RUNNER,),
    attributes=("_get_attention_backend",),
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.worker",
    why="The steps-0 state's target verify must run on decode kernels, and upstream builds its "
    "backend inside build_adaptive_runtime_state with no way to pass one in.",
    how="For that build only, an instance attribute on the target's ModelRunner shadows the "
    "method: it calls the one it shadows (SHARED_TARGET_WORKSPACE's) and converts the backend "
    "(ONE_TOKEN_DECODE_CLASS); deleted afterwards so the class's method shows through again.",
    upstream="srt/model_executor/model_runner.py:1226 (_get_attention_backend); "
    "speculative/eagle_worker_v2.py:1321 (called by the steps-0 build).",
    removal="When build_adaptive_runtime_state accepts a backend factory, or with the "
    "create_worker hook.",
    verified_on=GPU_0_5_17,
)

SHARED_TARGET_WORKSPACE = RuntimePatch(
    owners=(_RUNNER,),
    attributes=("_get_attention_backend",),
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.worker",
    why="Upstream builds each extra state's target attention backend on a workspace of its own, "
    "384 MiB a state on FlashInfer, while every other backend of the server (the target's, the "
    "draft's, two-batch overlap's pair) shares one; the states never run at once.",
    how="For each extra state's build (the off state, auto's candidates), an instance attribute on "
    "the target's ModelRunner shadows the method and asks for the shared workspace "
    "(init_new_workspace=False); TARGET_BACKEND_FACTORY's conversion wraps it. Deleted afterwards.",
    upstream="srt/speculative/eagle_worker_v2.py:1319-1325 (init_new_workspace=True); "
    "layers/attention/flashinfer_backend.py:421-435 (the shared buffer, or a new one); "
    "model_executor/model_runner_components/attention_backend_setup.py:102-106 (the server's own).",
    removal="When upstream builds its adaptive states on the shared workspace.",
    verified_on=GPU_0_5_17,
)

DRAFT_GRAPH_CAPTURE = RuntimePatch(
    owners=(_DRAFT_WORKER,),
    attributes=("_capture_cuda_graphs",),
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.worker",
    why="The steps-0 draft-extend graph must be captured one token wide, on decode kernels, "
    "without the draft's last MLP and lm_head, and at the deferred writes' sizes, and an auto "
    "candidate's k + 1 wide; upstream captures every state's from the server's draft width "
    "inside its build, so those never replay.",
    how="For that build only, an instance attribute on the draft worker shadows the method: for "
    "steps 0 it converts the draft-extend backend, overrides speculative_num_draft_tokens to 1 "
    "and enters kv_only_draft_forward and capture_write_sizes around the original; for a "
    "candidate of k steps it overrides the width to k + 1; deleted afterwards.",
    upstream="srt/speculative/eagle_worker_v2.py:339 (_capture_cuda_graphs), :1315 (called by "
    "the steps-0 build); eagle_draft_extend_cuda_graph_runner.py:133 (capture width).",
    removal="When upstream captures the steps-0 draft extend at the width it runs at, or with "
    "the create_worker hook.",
    verified_on=GPU_0_5_17,
)

DRAFT_EXTEND_ROUTING = RuntimePatch(
    owners=(_DRAFT_WORKER,),
    attributes=("_draft_extend_for_decode", "_draft_extend_for_prefill"),
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.worker",
    why="Plain steps and prefills while off buffer their draft rows instead of running the "
    "draft (deferred_draft_kv.py); upstream calls these draft-worker methods by name.",
    how="For the gated worker's lifetime, instance attributes on its draft worker route to the "
    "gated worker's methods, which keep the originals and call them when not deferring.",
    upstream="srt/speculative/eagle_worker_v2.py:727 (_draft_extend_for_prefill), :854 "
    "(_draft_extend_for_decode), :1134 and :1196 (called by name).",
    removal="With the create_worker hook.",
    verified_on=GPU_0_5_17,
)

ONE_NODE_VERIFY_TOPK = RuntimePatch(
    owners=("sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2",),
    attributes=("topk",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.worker",
    why="A tree server's verify passes the server's topk whatever the state, so each plain step "
    "would run the tree's accepted-path compaction: a KV move over every target layer and two clones.",
    how="Around upstream's verify of a plain step on a tree server, the gated worker's own topk is 1 "
    "(shadowed), so the one-node tree's accepted path, already at the front, is not compacted.",
    upstream="srt/speculative/eagle_worker_v2.py:1495-1510 (verify passes topk=self.topk); "
    "eagle_worker_common.py:630-640 (the compaction runs for topk > 1), :406-458 (what it moves).",
    removal="When upstream's verify skips the compaction for a one-node tree, or with the create_worker "
    "hook.",
    verified_on=CPU_0_5_17,
)

DRAFT_STUBS = RuntimePatch(
    owners=("sglang.srt.speculative.eagle_info.EagleDraftInput",),
    attributes=("topk_p", "topk_index", "hidden_states"),
    check=DECLARED_FIELD,
    by="sglang_specgate.plain_step_constants",
    why="A plain step leaves the draft outputs unset, and the overlap scheduler stashes them; "
    "upstream fills them with new zero tensors on every step.",
    how="Set the fields upstream's _stub_skipped_draft_extend sets, to slices of zero tensors "
    "allocated once.",
    upstream="srt/speculative/eagle_info.py:142-156 (the fields); eagle_worker_v2.py:1255-1283 "
    "(_stub_skipped_draft_extend); managers/overlap_utils.py:501-523 (stash).",
    removal="When upstream's stubs stop allocating per step.",
    verified_on=GPU_0_5_17,
)

LOGITS_PROCESSOR_METHODS = RuntimePatch(
    owners=("sglang.srt.layers.logits_processor.LogitsProcessor",),
    attributes=("_get_logits", "_compute_lm_head"),
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.kv_only_draft",
    why="The off state's draft-extend graph reads no logits, so it computes no lm_head GEMM and "
    "copies no logits.",
    how="While that graph is captured, instance attributes on the draft's LogitsProcessor shadow "
    "the methods: _compute_lm_head returns zeros, _get_logits hands out the runner's logits "
    "buffer as it is where upstream would fill it; deleted afterwards.",
    upstream="srt/layers/logits_processor.py:707-754 (_get_logits, _compute_lm_head).",
    removal="When upstream's draft extend can skip its logits.",
    verified_on=GPU_0_5_17,
)

DRAFT_LAST_MLP = RuntimePatch(
    owners=("sglang.srt.models.llama_eagle3.LlamaDecoderLayer",),
    attributes=("mlp",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.kv_only_draft",
    why="The off state's draft-extend graph only writes the draft's KV cache, which the last "
    "layer's MLP does not feed.",
    how="While that graph is captured, the last decoder layer's mlp submodule is an Identity; "
    "the original is put back afterwards.",
    upstream="srt/models/llama_eagle3.py:75 (mlp), :81-110 (forward: the MLP last); "
    "models/llama.py:329.",
    removal="When upstream's draft extend can skip what does not feed the KV cache.",
    verified_on=GPU_0_5_17,
)

DRAFT_LAST_ATTENTION = RuntimePatch(
    owners=("sglang.srt.models.llama.LlamaAttention",),
    attributes=("attn", "o_proj", "qkv_proj"),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.kv_only_draft",
    why="Over SGLang's plain KV pool, the last layer's attention output feeds only the skipped "
    "MLP: the write graph needs its K and V stored, nothing else.",
    how="While that graph is captured: attn stores K and V with the pool's set_kv_buffer and "
    "returns zeros (StoreKVOnly), o_proj without a bias returns zeros (ZeroProjection), and a "
    "plain unquantized qkv_proj computes the K and V columns only (KVColumnsOnly); the originals "
    "are put back afterwards.",
    upstream="srt/models/llama.py:184 (qkv_proj), :193 (o_proj), :209-216 (attn), :262-263 (the "
    "attention output through o_proj); models/llama_eagle3.py:57 (the draft's qkv_proj).",
    removal="With DRAFT_LAST_MLP: when upstream's draft extend can skip what does not feed the KV "
    "cache.",
    verified_on=GPU_0_5_17,
)

DRAFT_EXTEND_CAPTURE_SIZES = RuntimePatch(
    owners=("sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner",),
    attributes=("get_batch_sizes_to_capture",),
    check=MODULE_ATTRIBUTE,
    by="sglang_specgate.deferred_draft_kv",
    why="The deferred draft-KV writes replay the off state's draft-extend graph with several "
    "decode steps' rows; upstream captures it at decode batch sizes only.",
    how="While that graph is captured, the runner module's imported name returns upstream's "
    "sizes plus multiples of the largest and doubled sizes up to MIN_WRITE_ROWS; put back "
    "afterwards.",
    upstream="srt/speculative/eagle_draft_extend_cuda_graph_runner.py:28 (import), :129 (read by "
    "name); model_executor/runner/base_cuda_graph_runner.py:61-99.",
    removal="When the draft-extend runner accepts its capture sizes.",
    verified_on=GPU_0_5_17,
)

DRAFT_LOGITS_BUFFER = RuntimePatch(
    owners=(_RUNNER,),
    attributes=("graph_shared_output",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.deferred_draft_kv",
    why="The write graph's runner takes one logits row per captured row from the runner's shared "
    "buffer, which upstream sizes for the widest decode graph only.",
    how="Where the write sizes exceed it, the draft runner holds a GraphSharedOutput of that many "
    "rows while the graph is captured; the shared one is put back afterwards.",
    upstream="srt/model_executor/model_runner.py:812, model_runner_components/cuda_graph_setup.py"
    ":115 (the shared buffer); speculative/eagle_draft_extend_cuda_graph_runner.py:226-229.",
    removal="With DRAFT_EXTEND_CAPTURE_SIZES.",
    verified_on=GPU_0_5_17,
)

WAR_READ_DONE_EVENT = RuntimePatch(
    owners=(_RUNNER,),
    attributes=("war_fastpath_read_done_event",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.deferred_draft_kv",
    why="The scheduler's next writes to a batch's shared buffers wait on the event the step's "
    "last read of them publishes; a buffered plain step's last read is the buffer's copy.",
    how="Publish a recorded event after buffering a step, as upstream's draft-extend replay does; "
    "around a write, keep the event published before it.",
    upstream="srt/model_executor/model_runner.py:376; speculative/"
    "eagle_draft_extend_cuda_graph_runner.py:594-596 (upstream publishes); managers/scheduler.py"
    ":1674-1675 (_apply_war_barrier reads and clears it).",
    removal="With the deferred draft-KV writes.",
    verified_on=GPU_0_5_17,
)

FUTURE_MAP_HOST_LENGTHS = RuntimePatch(
    owners=("sglang.srt.managers.overlap_utils.FutureMap",),
    attributes=("needs_cpu_seq_lens",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.host_seq_lens",
    why="For a batch whose lengths the host knows, the device lengths must come from upstream's "
    "GPU-only path, without its copy back and wait.",
    how="Off around the original resolve_seq_lens_cpu call for that batch, then restored.",
    upstream="srt/managers/overlap_utils.py:251 (set at construction), :436-446 (the GPU-only "
    "branch).",
    removal="With the resolve_seq_lens_cpu hook.",
    verified_on=GPU_0_5_17,
)

SCHEDULE_BATCH_HOST_LENGTHS = RuntimePatch(
    owners=("sglang.srt.managers.schedule_batch.ScheduleBatch",),
    attributes=("seq_lens_cpu", "seq_lens_sum"),
    check=DECLARED_FIELD,
    by="sglang_specgate.host_seq_lens",
    why="Upstream's GPU-only path leaves the host lengths unset; the mirror knows them.",
    how="Set both from the mirror after that path, as upstream's copy path would.",
    upstream="srt/managers/schedule_batch.py:2063, :2070 (the fields); managers/overlap_utils.py"
    ":464-465 (upstream sets them there).",
    removal="With the resolve_seq_lens_cpu hook.",
    verified_on=GPU_0_5_17,
)

FORWARD_BATCH_AS_DECODE = RuntimePatch(
    owners=("sglang.srt.model_executor.forward_batch_info.ForwardBatch",),
    attributes=("seq_lens", "seq_lens_cpu", "seq_lens_sum", "forward_mode", "spec_info"),
    check=DECLARED_FIELD,
    by="sglang_specgate.one_token_decode",
    why="A converted backend plans a one-token speculative forward as the decode step it is.",
    how="On a shallow copy of the ForwardBatch (upstream's own is untouched): DECODE mode, no "
    "spec_info, and the lengths a decode step reads (the verify's plus one, one for the draft "
    "extend).",
    upstream="srt/model_executor/forward_batch_info.py:412-507 (the fields).",
    removal="With ONE_TOKEN_DECODE_CLASS.",
    verified_on=GPU_0_5_17,
)

ONE_TOKEN_DECODE_CLASS = RuntimePatch(
    owners=(_TRITON, f"{_FLASHINFER}.FlashInferAttnBackend"),
    attributes=("init_forward_metadata", "init_forward_metadata_out_graph",
                "init_forward_metadata_in_graph", "forward_extend"),
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.one_token_decode",
    why="Upstream runs the steps-0 state's one-token forwards through extend (prefill) kernels, "
    "most of that state's cost; they are decode steps.",
    how="The backend instances built for that state get a subclass of their class (__class__ "
    "assignment) that overrides these methods: one-token forwards plan and run as decode "
    "(FORWARD_BATCH_AS_DECODE), everything else is upstream's.",
    upstream="srt/layers/attention/triton_backend.py:572, :714, :1250, :1714; "
    "flashinfer_backend.py:691, :904, :1240, :1398; base_attn_backend.py:80 "
    "(init_forward_metadata_in_graph).",
    removal="When upstream's steps-0 state runs on decode kernels.",
    verified_on=GPU_0_5_17,
)

TRITON_ONE_SPLIT = RuntimePatch(
    owners=(_TRITON,),
    attributes=("max_kv_splits",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.one_token_decode",
    why="The off state's draft extend reads one KV entry, and Triton launches its split grid "
    "max_kv_splits wide whatever the length read.",
    how="Set to 1 on the draft-extend backend before its split buffers are allocated (the "
    "kernel asserts they are that wide).",
    upstream="srt/layers/attention/triton_backend.py:218-263; kernels/ops/attention/"
    "decode_attention.py:293-305 (the split count).",
    removal="With ONE_TOKEN_DECODE_CLASS.",
    verified_on=GPU_0_5_17,
)

TRITON_ROWS = RuntimePatch(
    owners=(_TRITON,),
    attributes=("kv_indptr", "window_kv_indptr", "qo_indptr", "mask_indptr"),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.one_token_decode",
    why="The write graph holds more rows than requests; Triton sizes its per-request index "
    "buffers at the request pool.",
    how="On the draft-extend backend, before its graph is captured, each buffer shorter than the "
    "rows plus one is replaced by a zeroed one that long.",
    upstream="srt/layers/attention/triton_backend.py:272-297.",
    removal="With DRAFT_EXTEND_CAPTURE_SIZES.",
    verified_on=GPU_0_5_17,
)

FA3_ONE_TOKEN_DECODE_CLASS = RuntimePatch(
    owners=(_FA3,),
    attributes=ONE_TOKEN_DECODE_CLASS.attributes,
    check=CLASS_ATTRIBUTE,
    by="sglang_specgate.one_token_decode",
    why="As ONE_TOKEN_DECODE_CLASS, on FA3, SGLang's default backend on Hopper: there the steps-0 "
    "state's decode step costs more than a plain one (docs/benchmarks.md): the target verify plans as a "
    "verify, without decode's precomputed scheduler metadata, and the draft extends every step.",
    how="As ONE_TOKEN_DECODE_CLASS, with FA3 itself (not FA4, MLA, local or sliding-window attention, "
    "cross attention or context parallelism), for chains and trees alike: the one-token view carries "
    "no spec_info, and FA3 reads its topk only where spec_info is set; unless "
    "SGLANG_SPEC_GATE_FA3_OFF_PATH=0.",
    upstream="srt/layers/attention/flashattention_backend.py:378 (init_forward_metadata_in_graph: "
    "no-op for DECODE), :420 (out_graph: decode modes share _init_full_cg_decode_metadata), :632, "
    ":1122, :1712 (forward_decode reads forward_batch's out_cache_loc, encoder_out_cache_loc, "
    "batch_size and _attn_output, the same in the view, and spec_info only for topk > 1), "
    ":650-770, :2386-2470, :2632-2720 (a decode's metadata, eager and graphed, reads topk only "
    "under spec_info), "
    ":2052 (buffers sized at the graph runner's largest batch).",
    removal="With ONE_TOKEN_DECODE_CLASS.",
    verified_on=GPU_0_5_17,
    switched_on=_fa3_off_path_enabled,
)
FA3_ONE_SPLIT = RuntimePatch(
    owners=(_FA3,),
    attributes=("num_splits",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.one_token_decode",
    why="The off state's draft extend reads one KV entry, and FA3 plans a graph's split count for "
    "the longest length a replay may read (max_context_len: replays pass no host lengths); a "
    "split launch adds a combine kernel and its accumulators.",
    how="Set to 1 on the draft-extend backend (what --enable-deterministic-inference sets), before "
    "its graphs are captured.",
    upstream="srt/layers/attention/flashattention_backend.py:292-296 (num_splits), :327-354 "
    "(scheduler metadata), :529-531 and :2755-2763 (replays plan with max_context_len).",
    removal="With FA3_ONE_TOKEN_DECODE_CLASS.",
    verified_on=GPU_0_5_17,
    switched_on=_fa3_off_path_enabled,
)
FA3_DRAFT_EXTEND_GRAPH = RuntimePatch(
    owners=(_DRAFT_WORKER,),
    attributes=("cuda_graph_runner_for_draft_extend",),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.worker",
    why="Upstream captures the draft-extend graph only on the backends it lists, FA3 not among them, "
    "so on FA3 every plain step would launch the draft extend eagerly and no buffered write could "
    "replay; converted to FA3's decode path, the off state's draft extend is a decode, which FA3 "
    "captures.",
    how="In the steps-0 capture, after upstream's, where upstream left no draft-extend graph although "
    "decode steps are graphed and SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH is unset: upstream's own "
    "EAGLEDraftExtendCudaGraphRunner is built for the draft worker, under the same one-token width, "
    "KV-only forward and write sizes, and the state takes it as upstream's would.",
    upstream="srt/speculative/eagle_worker_v2.py:407-447 (graph_supported_backend_types, TODO for more "
    "backends), :1364 (the state takes the draft worker's runner); "
    "eagle_draft_extend_cuda_graph_runner.py:81-180 (the runner needs only the worker).",
    removal="When upstream lists FlashAttentionBackend for draft-extend graphs, or with "
    "FA3_ONE_TOKEN_DECODE_CLASS.",
    verified_on=GPU_0_5_17,
    switched_on=_fa3_off_path_enabled,
)
FLASHINFER_ROWS = RuntimePatch(
    owners=(f"{_FLASHINFER}.FlashInferAttnBackend", f"{_FLASHINFER}.FlashInferIndicesUpdaterDecode",
            f"{_FLASHINFER}.FlashInferIndicesUpdaterPrefill"),
    attributes=("kv_indptr", "kv_last_page_len"),
    check=SET_IN_A_METHOD,
    by="sglang_specgate.one_token_decode",
    why="As TRITON_ROWS: FlashInfer sizes its indptr list and last-page lengths at the CUDA-graph "
    "batch limit.",
    how="Replace the short entries of the backend's kv_indptr list in place (its updaters share "
    "the list), and its kv_last_page_len with ones, re-pointing the updaters' references.",
    upstream="srt/layers/attention/flashinfer_backend.py:438-458, :1488-1489, :1759-1760.",
    removal="With DRAFT_EXTEND_CAPTURE_SIZES.",
    verified_on=GPU_0_5_17,
)

GATE_METRICS_SLOT = RuntimePatch(
    owners=("sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter",),
    attributes=("_spec_gate_metrics",),
    check=OURS,
    by="sglang_specgate.observability",
    why="The gate's Prometheus metrics are created once per exporting scheduler, after "
    "PROMETHEUS_MULTIPROC_DIR is set, and fed on every decode batch.",
    how="Kept on the scheduler's SchedulerMetricsReporter, created on first use.",
    upstream="srt/managers/scheduler_components/metrics_reporter.py:91-92 (the reporter), :695 "
    "(report_decode_stats).",
    removal="With the report_decode_stats hook.",
    verified_on=GPU_0_5_17_CPU_0_5_23,
)

INTERNAL_STATE = RuntimePatch(
    owners=("sglang.srt.managers.io_struct.GetInternalStateReqOutput",),
    attributes=("internal_state",),
    check=DECLARED_FIELD,
    by="sglang_specgate.observability",
    why="/server_info shows each scheduler's internal_state dict; the gate's state goes there.",
    how="Add the 'spec_gate' key to the dict get_internal_state returns.",
    upstream="srt/managers/io_struct.py:1952-1956; managers/scheduler.py:4165. 0.5.23: io_struct.py:2341-2345.",
    removal="With the get_internal_state hook.",
    verified_on=GPU_0_5_17_CPU_0_5_23,
)

OVERRIDE_LOG = RuntimePatch(
    owners=("sglang.srt.runtime_context.RuntimeContext",),
    attributes=("_overrides_log",),
    check=DECLARED_FIELD,
    by="sglang_specgate.state_switch",
    why="Upstream's runtime-state swap appends an entry on every gate switch, which nothing "
    "trims and every /server_info walks.",
    how="After each swap, drop the restore entries the newest one supersedes, in place.",
    upstream="srt/runtime_context.py:741 (slot), :902 (append), :934 (read in order).",
    removal="When upstream bounds the log or the gate switches through a policy (0.5.23).",
    verified_on=GPU_0_5_17_CPU_0_5_23,
)

RUNTIME_PATCHES: tuple[RuntimePatch, ...] = (
    TARGET_BACKEND_FACTORY,
    SHARED_TARGET_WORKSPACE,
    DRAFT_GRAPH_CAPTURE,
    DRAFT_EXTEND_ROUTING,
    ONE_NODE_VERIFY_TOPK,
    DRAFT_STUBS,
    LOGITS_PROCESSOR_METHODS,
    DRAFT_LAST_MLP,
    DRAFT_LAST_ATTENTION,
    DRAFT_EXTEND_CAPTURE_SIZES,
    DRAFT_LOGITS_BUFFER,
    WAR_READ_DONE_EVENT,
    FUTURE_MAP_HOST_LENGTHS,
    SCHEDULE_BATCH_HOST_LENGTHS,
    FORWARD_BATCH_AS_DECODE,
    ONE_TOKEN_DECODE_CLASS,
    TRITON_ONE_SPLIT,
    TRITON_ROWS,
    FLASHINFER_ROWS,
    FA3_ONE_TOKEN_DECODE_CLASS,
    FA3_ONE_SPLIT,
    FA3_DRAFT_EXTEND_GRAPH,
    GATE_METRICS_SLOT,
    INTERNAL_STATE,
    OVERRIDE_LOG,
)


class UnregisteredChange(AttributeError):
    """Code changed a name its registry entry does not list."""


def _require_registered(patch: RuntimePatch, names) -> None:
    unlisted = [name for name in names if name not in patch.attributes]
    if unlisted:
        raise UnregisteredChange(
            f"{patch.by} changes {', '.join(unlisted)}, which its runtime_patches entry for "
            f"{', '.join(patch.owners)} does not list")


def assign(patch: RuntimePatch, obj, **values) -> None:
    """Set attributes of an SGLang object, as ``patch`` registers them."""
    _require_registered(patch, values)
    for name, value in values.items():
        setattr(obj, name, value)


def assign_item(patch: RuntimePatch, obj, name: str, key, value) -> None:
    """``obj.<name>[key] = value``: fill an SGLang object's container in place."""
    _require_registered(patch, (name,))
    getattr(obj, name)[key] = value


_FROM_CLASS = object()


@contextlib.contextmanager
def shadowed(patch: RuntimePatch, obj, **values):
    """Set attributes for the block, then restore them: a value the object held itself is put
    back; a name that came from its class (a method) is deleted, so the class's shows again."""
    _require_registered(patch, values)
    own = getattr(obj, "__dict__", {})
    saved = {name: _FROM_CLASS if name not in own and _class_has(type(obj), name) else getattr(obj, name)
             for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield
    finally:
        for name, original in saved.items():
            if original is _FROM_CLASS:
                delattr(obj, name)
            else:
                setattr(obj, name, original)


def swap_class(patch: RuntimePatch, obj, cls: type) -> None:
    """Make ``obj`` an instance of ``cls``, a subclass of its class; the methods ``cls``
    overrides are the names ``patch`` registers."""
    _require_registered(patch, overridden_methods(cls, type(obj)))
    obj.__class__ = cls


def overridden_methods(cls: type, base: type) -> list[str]:
    """The methods ``cls`` defines that ``base`` has too, dunders aside."""
    return [name for name, value in vars(cls).items()
            if inspect.isfunction(value) and not name.startswith("__") and _class_has(base, name)]


def _class_has(cls: type, name: str) -> bool:
    try:
        inspect.getattr_static(cls, name)
    except AttributeError:
        return False
    return True


def _declares(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        if name in vars(klass).get("__annotations__", {}) or name in ((slots,) if isinstance(slots, str) else slots):
            return True
    return False


def _sets_in_a_method(cls: type, name: str) -> bool:
    return any(name in _self_assignments(klass) for klass in cls.__mro__)


@functools.cache
def _self_assignments(klass: type) -> frozenset[str]:
    """The names ``klass``'s own methods assign on their first argument; none where its source
    is not available (builtins, classes made at run time)."""
    node = _class_definitions(klass.__module__).get(klass.__qualname__)
    return frozenset() if node is None else _method_self_assignments(node)


def _method_self_assignments(node: ast.ClassDef) -> frozenset[str]:
    names = set()
    for method in node.body:
        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args:
            me = method.args.args[0].arg
            names.update(n.attr for n in ast.walk(method)
                         if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                         and isinstance(n.value, ast.Name) and n.value.id == me)
    return frozenset(names)


@functools.cache
def _class_definitions(module_name: str) -> dict[str, ast.ClassDef]:
    """A module's class statements by qualified name, parsed once per module from its source
    file: found without importing the module itself (its packages are imported)."""
    try:
        tree = ast.parse(pathlib.Path(importlib.util.find_spec(module_name).origin).read_text())
    except (AttributeError, ImportError, OSError, TypeError, ValueError):
        return {}
    found = {}

    def visit(body, prefix):
        for statement in body:
            if isinstance(statement, ast.ClassDef):
                found[prefix + statement.name] = statement
                visit(statement.body, f"{prefix}{statement.name}.")

    visit(tree.body, "")
    return found


# (does the owner have it, what a failure means)
_CHECKS = {
    CLASS_ATTRIBUTE: (_class_has, "no such method or class attribute"),
    DECLARED_FIELD: (_declares, "no such declared field"),
    SET_IN_A_METHOD: (_sets_in_a_method, "no method sets it"),
    MODULE_ATTRIBUTE: (lambda module, name: isinstance(module, ModuleType) and hasattr(module, name),
                       "no such module attribute"),
    OURS: (lambda cls, name: not (_class_has(cls, name) or _declares(cls, name) or _sets_in_a_method(cls, name)),
           "SGLang defines it now, so ours would overwrite it"),
}


def _class_statement(path: str) -> ast.ClassDef | None:
    module, _, qualname = path.rpartition(".")
    return _class_definitions(module).get(qualname) if module else None


def _defined_in_body(node: ast.ClassDef, name: str) -> bool:
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and statement.name == name:
            return True
        targets = statement.targets if isinstance(statement, ast.Assign) else (
            [statement.target] if isinstance(statement, ast.AnnAssign) else [])
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return True
    return False


# The checks a class statement answers where its module cannot be imported (FA3's loads CUDA
# libraries): its own body and methods only, so a name only a base has reads as missing.
_SOURCE_CHECKS = {
    CLASS_ATTRIBUTE: _defined_in_body,
    SET_IN_A_METHOD: lambda node, name: name in _method_self_assignments(node),
}


def patches_for(release: str) -> tuple[RuntimePatch, ...]:
    """The changes that may be made on ``release``: those registered there, switched on."""
    return tuple(p for p in RUNTIME_PATCHES
                 if release in p.verified_on and (p.switched_on is None or p.switched_on()))


def unresolved_names(release: str) -> list[str]:
    """Every owner and name registered for ``release`` that the installed SGLang lacks
    (importing the owners' modules)."""
    missing = []
    for patch in patches_for(release):
        has, failure = _CHECKS[patch.check]
        for path in patch.owners:
            try:
                owner = pkgutil.resolve_name(path)
            except Exception as e:  # importing a changed SGLang module can fail in any way
                in_source = _SOURCE_CHECKS.get(patch.check)
                node = _class_statement(path) if in_source else None
                if node is None:
                    missing.append(f"{path} ({type(e).__name__}: {e})")
                else:  # no object of it can exist here to change: its statement is what can be checked
                    missing.extend(f"{path}.{name} ({patch.check}, read from its source as it cannot be "
                                   f"imported here ({type(e).__name__}): {failure})"
                                   for name in patch.attributes if not in_source(node, name))
                continue
            missing.extend(f"{path}.{name} ({patch.check}: {failure})"
                           for name in patch.attributes if not has(owner, name))
    return missing
