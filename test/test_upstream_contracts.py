"""What the gate's hooks rely on in SGLang, stated per supported release and checked against
the installed one: call signatures the gate calls or is called with, and the upstream costs
its performance hooks remove. On a release where the fast off path is off (not run on a GPU
there), its own tests are skipped (conftest.py) and this file is where its contract with that
release is written down: a row whose 0.5.23 value differs from 0.5.17's names what a port of
that piece must change (UPGRADING.md). A row that starts failing means upstream changed: update
the row and the piece together."""

from __future__ import annotations

import inspect
import pkgutil

import pytest
import torch

from sglang_specgate.runtime_patches import DECLARED_FIELD, SET_IN_A_METHOD, unresolved_names
from sglang_specgate.sglang_versions import SUPPORTED_SGLANG_VERSIONS, installed_release
from test_chunked_prefill_tail import Batch, RecordedOps, sglang_tail_tokens
from test_spec_decode_alloc import alloc_arguments, allocated, requests, sglang_alloc, tree_cache

RELEASE = installed_release()

# (the piece that relies on it, SGLang callable, its parameters on each release)
SIGNATURES = [
    ("worker: GatedEAGLEWorkerV2 passes its constructor's arguments through",
     "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.__init__",
     {"0.5.17": ["self", "server_args", "gpu_id", "ps", "nccl_port", "target_worker"],
      "0.5.23": ["self", "server_args", "gpu_id", "nccl_port", "target_worker"]}),
    ("worker: the gate's policy drives the adaptive controller (sglang_versions.*.init_adaptive_controller)",
     "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController.__init__",
     {"0.5.17": ["self", "worker", "config_path"], "0.5.23": ["self", "worker", "policy"]}),
    ("worker: the steps-0 state is built by upstream, for each candidate step count",
     "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.build_adaptive_runtime_state",
     {v: ["self", "speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs"]
      for v in SUPPORTED_SGLANG_VERSIONS}),
    ("deferred_draft_kv: replays the one-token draft-extend graph with buffered rows",
     "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner.EAGLEDraftExtendCudaGraphRunner.execute",
     {"0.5.17": ["self", "forward_batch"], "0.5.23": ["self", "forward_batch", "select_index"]}),
    ("worker: builds the one-token draft-extend graph runner where upstream builds none (FA3)",
     "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner.EAGLEDraftExtendCudaGraphRunner.__init__",
     {v: ["self", "eagle_worker", "draft_extend_attn_backend", "speculative_num_steps"]
      for v in SUPPORTED_SGLANG_VERSIONS}),
    ("deferred_draft_kv: asks whether the draft extend syncs across ranks",
     "sglang.srt.utils.require_mlp_sync",
     {"0.5.17": ["server_args"], "0.5.23": []}),
    ("host_seq_lens: installs the mirror where the scheduler copies host lengths back",
     "sglang.srt.managers.overlap_utils.decide_needs_cpu_seq_lens",
     {"0.5.17": ["server_args", "attn_backends"], "0.5.23": ["attn_backends"]}),
    ("host_seq_lens: wraps the resolution of each batch's host lengths",
     "sglang.srt.managers.overlap_utils.FutureMap.resolve_seq_lens_cpu",
     {"0.5.17": ["self", "batch"], "0.5.23": ["self", "batch", "stream_ordered"]}),
]


@pytest.mark.parametrize("piece, path, parameters", SIGNATURES, ids=[row[1].rsplit(".", 2)[-2] + "."
                                                                     + row[1].rsplit(".", 1)[-1] for row in SIGNATURES])
def test_the_signatures_the_gate_relies_on(piece, path, parameters):
    assert set(parameters) == set(SUPPORTED_SGLANG_VERSIONS), "a row per supported release"
    function = inspect.unwrap(pkgutil.resolve_name(path))
    assert list(inspect.signature(function).parameters) == parameters[RELEASE], piece


# Whether upstream still pays what a performance hook removes (hooks.py): where it does not,
# the hook has nothing to remove on that release and is not registered there.
UPSTREAM_STILL_HOST_COPIES_THE_CHUNK_TAIL = {"0.5.17": True, "0.5.23": False}
UPSTREAM_INDEXES_HOST_LENGTHS_PER_REQUEST = {"0.5.17": True, "0.5.23": False}


def test_whether_the_prefill_tail_costs_a_host_copy_upstream():
    reqs = [object() for _ in range(3)]
    with RecordedOps() as ops:
        sglang_tail_tokens(Batch(reqs, chunked_req=reqs[1], chunked_req_next_prompt_token=7), torch.tensor([1, 2, 3]))
    assert ("aten.copy_.default" in ops.ops) is UPSTREAM_STILL_HOST_COPIES_THE_CHUNK_TAIL[RELEASE]


def test_whether_the_spec_decode_allocation_indexes_host_lengths_per_request():
    reqs = requests()
    with RecordedOps() as recorded:
        sglang_alloc(tree_cache(1), None, **alloc_arguments(reqs))
    assert allocated(reqs) == [13, 40, 20, 41]
    per_request = recorded.ops.count("aten.select.int") == len(reqs)
    assert per_request is UPSTREAM_INDEXES_HOST_LENGTHS_PER_REQUEST[RELEASE]


def test_the_metrics_reporter_has_what_the_metrics_hook_reads():
    # observability.export_gate_metrics reads these on SGLang's reporter; its own test uses a
    # stand-in, as building a reporter needs a scheduler.
    from sglang_specgate import runtime_patches
    from sglang_specgate.runtime_patches import RuntimePatch

    reporter = "sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter"
    reads = [RuntimePatch(owners=(reporter,), attributes=names, check=check, by="test", why="", how="", upstream="",
                          removal="", verified_on={RELEASE: "CPU"})
             for check, names in [(DECLARED_FIELD, ("scheduler", "metrics_collector")),
                                  (SET_IN_A_METHOD, ("current_scheduler_metrics_enabled",))]]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime_patches, "RUNTIME_PATCHES", tuple(reads))
        assert unresolved_names(RELEASE) == []


def _fa3_backend_class():
    """FA3's backend class statement, read from the installed source as the start-up check reads
    it: its module imports sgl_kernel's CUDA ops, which a machine without a GPU cannot load."""
    from sglang_specgate.runtime_patches import FA3_ONE_TOKEN_DECODE_CLASS, _class_statement

    return _class_statement(FA3_ONE_TOKEN_DECODE_CLASS.owners[0])


@pytest.mark.fast_off_path
def test_fa3_has_what_its_decode_path_for_the_off_state_uses():
    """one_token_decode's FA3 entry: the methods its subclass overrides or calls, the attributes
    _fa3_unsupported reads and _fa3_reads_one_entry sets (all in __init__), and the decode
    kernel taking its split count from the backend."""
    import ast

    from sglang_specgate.runtime_patches import FA3_ONE_TOKEN_DECODE_CLASS

    fa3 = _fa3_backend_class()
    methods = {node.name: node for node in fa3.body if isinstance(node, ast.FunctionDef)}
    assert set(FA3_ONE_TOKEN_DECODE_CLASS.attributes) | {"forward_decode"} <= set(methods)
    init_sets = {n.attr for n in ast.walk(methods["__init__"])
                 if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.value.id == "self"}
    assert {"num_splits", "max_num_pages", "max_context_len", "fa_impl_ver", "topk", "use_mla", "has_local_attention", "has_swa", "is_prefill_aware_swa",
            "is_encoder_decoder", "use_sliding_window_kv_pool", "attn_cp_size"} <= init_sets
    decode_splits = [k.value for n in ast.walk(methods["forward_decode"]) if isinstance(n, ast.Call)
                     for k in n.keywords if k.arg == "num_splits"]
    assert decode_splits and all(ast.unparse(v) == "self.num_splits" for v in decode_splits)


def _reads_topk_outside(node, covered=False):
    """Lines reading ``self.topk`` outside a branch that tests ``spec_info is not None`` or
    names a mode other than decode (verify, extend, draft extend)."""
    import ast

    def tests(test) -> bool:
        return any((isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.IsNot) and "spec_info" in ast.unparse(n.left)
                    and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value is None)
                   or (isinstance(n, ast.Attribute) and n.attr.startswith(("is_target_verify", "is_draft_extend",
                                                                            "is_extend")))
                   for n in ast.walk(test))

    if isinstance(node, ast.If):
        yield from _reads_topk_outside(node.test, covered)
        for statement in node.body:
            yield from _reads_topk_outside(statement, covered or tests(node.test))
        for statement in node.orelse:
            yield from _reads_topk_outside(statement, covered)
        return
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) and tests(node):
        return
    if isinstance(node, ast.Attribute) and node.attr == "topk" and ast.unparse(node.value) == "self":
        if not covered:
            yield node.lineno
        return
    for child in ast.iter_child_nodes(node):
        yield from _reads_topk_outside(child, covered)


@pytest.mark.fast_off_path
def test_fa3_decodes_a_one_token_view_of_a_tree_as_of_a_chain():
    """The off state's one-token view is a DECODE batch without spec_info, for trees too: FA3's
    metadata and decode kernels read its topk only for batches that carry one, or in other modes
    (the sizing in __init__ and init_cuda_graph_state aside, and forward_extend, which the view
    never reaches), so a tree server's off steps take a chain's decode path."""
    import ast

    methods = [node for node in _fa3_backend_class().body if isinstance(node, ast.FunctionDef)
               and node.name not in ("__init__", "init_cuda_graph_state", "forward_extend")]
    assert {"init_forward_metadata", "forward_decode", "_bind_metadata_buffers"} <= {m.name for m in methods}
    assert {m.name: lines for m in methods if (lines := list(_reads_topk_outside(m)))} == {}
