"""The off state's buffered draft-extend rows: when they are written, and that one write hands
SGLang's real draft-extend graph runner the rows of several plain steps in order.

The runner is upstream's EAGLEDraftExtendCudaGraphRunner with its real ``can_run_graph`` and
``execute`` (which copy the rows into its static buffers and pad the batch). Only what needs a
GPU is stood in: the CUDA graph replay and the attention backend's metadata are recorded, and the
buffers live on the CPU. test/gpu runs the real thing (re-enable warmth, greedy identity).
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as draft_extend_graphs
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_specgate.deferred_draft_kv import (
    BUFFER_PROMPT_SPAN,
    BUFFER_STEP_SPAN,
    WRITE_SPAN,
    DeferredDraftKV,
    prompt_rows,
    capture_write_sizes,
    why_not_deferred,
)
from sglang_specgate.one_token_decode import use_decode_kernels
from sglang_specgate.plain_step_constants import PlainStepConstants
from sglang_specgate.worker import PLAIN_STEPS, GatedEAGLEWorkerV2

pytestmark = pytest.mark.fast_off_path

HIDDEN = 6  # the target's aux hidden width the draft reads (3 layers x 2 here)
CAPTURED = [1, 2, 4, 8]
FILL = 1  # upstream's seq_len_fill_value for padded rows
KV_SLOTS = 200  # the draft KV pool's slots, SGLang's padding slot 0 among them


def one_token_runner(captured=CAPTURED) -> EAGLEDraftExtendCudaGraphRunner:
    runner = object.__new__(EAGLEDraftExtendCudaGraphRunner)
    max_bs = max(captured)
    runner.capture_bs = captured
    runner.max_bs = max_bs
    runner.captured_req_width = 1
    runner.seq_len_fill_value = FILL
    runner.require_mlp_tp_gather = runner.require_mlp_sync = runner.require_gathered_buffer = False
    runner.disable_padding = False
    runner.forward_mode = ForwardMode.DRAFT_EXTEND_V2
    runner.device_module = torch.get_device_module("cpu")
    runner.extend_seq_lens_cpu = [1] * max_bs
    runner.deepep_adapter = SimpleNamespace(replay=lambda: None)  # DeepEP is GPU-only
    runner.model_runner = SimpleNamespace(
        spec_algorithm=SpeculativeAlgorithm.EAGLE3, device_timer=None, war_fastpath_read_done_event=None,
        token_to_kv_pool=SimpleNamespace(size=KV_SLOTS - 1, page_size=1),
    )
    # Upstream's buffer dtypes (eagle_draft_extend_cuda_graph_runner.py:150-190), on the CPU.
    runner.buffers = SimpleNamespace(
        input_ids=torch.zeros(max_bs, dtype=torch.int64),
        req_pool_indices=torch.zeros(max_bs, dtype=torch.int64),
        out_cache_loc=torch.zeros(max_bs, dtype=torch.int64),
        positions=torch.zeros(max_bs, dtype=torch.int64),
        hidden_states=torch.zeros(max_bs, HIDDEN, dtype=torch.bfloat16),
        seq_lens=torch.full((max_bs,), FILL, dtype=torch.int64),
        seq_lens_cpu=torch.full((max_bs,), FILL, dtype=torch.int64),
        num_correct_drafts=torch.ones(max_bs, dtype=torch.int32),
        num_accept_tokens=torch.ones(max_bs, dtype=torch.int32),
        extend_seq_lens=torch.ones(max_bs, dtype=torch.int32),
        dsa_seed_topk_capture=None,
    )
    replays = []  # the CUDA graph's stand-in records what each replay would read
    runner.replays = replays
    runner.draft_extend_attn_backend = SimpleNamespace(
        init_forward_metadata_out_graph=lambda view: replays.append({"metadata": view})
    )

    def replay(shape_key, forward_batch):
        b = runner.buffers
        replays[-1].update(
            bucket=shape_key.size,
            **{name: getattr(b, name)[: shape_key.size].clone() for name in
               ("input_ids", "positions", "out_cache_loc", "req_pool_indices", "seq_lens",
                "hidden_states", "num_accept_tokens", "num_correct_drafts")},
        )
        return SimpleNamespace(next_token_logits=torch.zeros(shape_key.size, 3),
                               hidden_states=torch.zeros(shape_key.size, HIDDEN))

    runner._replay_graph = replay
    return runner


class Step:
    """A plain decode step's batch and verify result, as the draft extend receives them."""

    def __init__(self, reqs, first_position, first_loc, seed):
        bs = len(reqs)
        self.batch = SimpleNamespace(
            reqs=list(reqs),
            seq_lens=torch.arange(first_position, first_position + bs, dtype=torch.int64),
            out_cache_loc=torch.arange(first_loc, first_loc + bs, dtype=torch.int64),
            req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64),
        )
        generator = torch.Generator().manual_seed(seed)
        self.result = SimpleNamespace(
            next_token_ids=torch.randint(0, 1000, (bs,), dtype=torch.int32, generator=generator),
            logits_output=SimpleNamespace(hidden_states=torch.randn(bs, HIDDEN, generator=generator).bfloat16()),
        )
        self.args = (self.batch, self.result)


def requests(*pool_indices):
    return [SimpleNamespace(req_pool_idx=i) for i in pool_indices]


def test_rows_of_several_plain_steps_are_written_in_one_replay_in_order():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    a, b, c = requests(3, 5, 7)
    steps = [Step([a, b], 10, 100, 0), Step([a, b], 11, 102, 1), Step([a, b, c], 12, 104, 2)]
    for step in steps:  # c joins at the end: the rows stay buffered
        assert deferred.defer(*step.args)
    assert runner.replays == []
    deferred.write_all()

    [replay] = runner.replays
    n = 7
    assert replay["bucket"] == 8
    rows = slice(0, n)
    assert replay["input_ids"][rows].tolist() == torch.cat([s.result.next_token_ids for s in steps]).tolist()
    assert replay["positions"][rows].tolist() == torch.cat([s.batch.seq_lens for s in steps]).tolist()
    assert replay["out_cache_loc"][rows].tolist() == list(range(100, 107))
    assert replay["req_pool_indices"][rows].tolist() == [3, 5, 3, 5, 3, 5, 7]
    assert torch.equal(replay["hidden_states"][rows],
                       torch.cat([s.result.logits_output.hidden_states for s in steps]))
    assert replay["seq_lens"][rows].tolist() == [p + 1 for p in replay["positions"][rows].tolist()]
    assert replay["num_accept_tokens"][rows].tolist() == [1] * n
    assert replay["num_correct_drafts"][rows].tolist() == [0] * n
    # upstream pads the bucket with its dummy slot and request
    assert replay["out_cache_loc"][n:].tolist() == [0] and replay["req_pool_indices"][n:].tolist() == [0]
    assert replay["metadata"].forward_mode.is_draft_extend_v2() and replay["metadata"].batch_size == 8
    assert deferred.rows == 0 and deferred.snapshot() == {
        "rows_written": 7, "writes": 1, "rows_per_write": 7.0, "write_rows": 8, "capacity": 32,
        "prompt_rows": 0}


def test_requests_leaving_the_batch_force_no_write():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    a, b, c, d = requests(1, 2, 3, 4)
    assert deferred.defer(*Step([a, b, c], 5, 50, 0).args)
    assert deferred.defer(*Step([c, d], 6, 60, 1).args)  # a and b finished, d joined
    assert runner.replays == [] and deferred.rows == 5


def test_a_slot_freed_and_handed_to_a_later_row_is_written_once_with_that_row():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    a, b, c = requests(1, 2, 3)
    assert deferred.defer(*Step([a, b], 5, 50, 0).args)  # slots 50, 51
    # a finished and its slot 50 was freed; the scheduler handed it to c's next token
    reuse = Step([b, c], 6, 60, 1)
    reuse.batch.out_cache_loc = torch.tensor([61, 50])
    assert deferred.defer(*reuse.args)
    deferred.write_all()
    [replay] = runner.replays
    # a's row goes to the padding slot; c's, buffered later, writes slot 50
    assert replay["out_cache_loc"][:4].tolist() == [0, 51, 61, 50]
    assert replay["input_ids"][3] == reuse.result.next_token_ids[1]
    assert deferred.snapshot()["rows_written"] == 4


def test_a_slot_reused_across_writes_is_written_by_each():
    # Rows are numbered across writes: what an earlier write recorded never hides a later row.
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    (a,) = requests(1)
    for i in range(3):
        assert deferred.defer(*Step([a], 5 + i, 50, i).args)
        deferred.write_all()
    assert [r["out_cache_loc"][0].item() for r in runner.replays] == [50, 50, 50]


class Prefill:
    """A prefill batch and its target forward's outputs, as the draft's prefill receives them:
    requests of ``extend_lens`` new tokens after ``prefix_lens`` cached ones."""

    def __init__(self, reqs, prefix_lens, extend_lens, first_loc, chunked=None, next_prompt_token=None):
        n = sum(extend_lens)
        self.batch = SimpleNamespace(
            reqs=list(reqs), prefix_lens=list(prefix_lens), extend_lens=list(extend_lens),
            input_ids=torch.arange(100, 100 + n, dtype=torch.int64),
            out_cache_loc=torch.arange(first_loc, first_loc + n, dtype=torch.int64),
            req_pool_indices=torch.tensor([r.req_pool_idx for r in reqs], dtype=torch.int64),
            seq_lens=torch.tensor([p + e for p, e in zip(prefix_lens, extend_lens)], dtype=torch.int64),
            chunked_req=chunked, chunked_req_next_prompt_token=next_prompt_token,
            forward_mode=ForwardMode.EXTEND,
        )
        self.hidden = torch.randn(n, HIDDEN, generator=torch.Generator().manual_seed(0)).bfloat16()
        self.next_token_ids = torch.tensor([900 + i for i in range(len(reqs))], dtype=torch.int32)
        self.args = (self.batch, self.hidden, self.next_token_ids)


def test_a_prefill_buffers_one_row_per_prompt_token_as_the_draft_prefill_reads_them():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    # Request 7: 3 new tokens after 5 cached; request 8: 2 tokens, its prompt going on in the
    # next chunk with token 555. Tokens 100-104, slots 40-44.
    a, b = requests(7, 8)
    prefill = Prefill([a, b], prefix_lens=[5, 0], extend_lens=[3, 2], first_loc=40, chunked=b,
                      next_prompt_token=555)
    assert deferred.defer_prefill(*prefill.args)
    assert deferred.rows == 5 and runner.replays == []
    deferred.write_all()
    replay = runner.replays[0]
    # Each token's row reads the next token; a request's last row its tail token: the target's
    # sampled one, or for the chunked request the next prompt token (upstream's shift).
    assert replay["input_ids"][:5].tolist() == [101, 102, 900, 104, 555]
    assert replay["positions"][:5].tolist() == [5, 6, 7, 0, 1]
    assert replay["seq_lens"][:5].tolist() == [6, 7, 8, 1, 2]  # as one-token pseudo-requests
    assert replay["out_cache_loc"][:5].tolist() == [40, 41, 42, 43, 44]
    assert replay["req_pool_indices"][:5].tolist() == [7, 7, 7, 8, 8]
    assert torch.equal(replay["hidden_states"][:5], prefill.hidden)
    assert deferred.snapshot()["prompt_rows"] == 5


@pytest.mark.parametrize("chunked", [False, True])
def test_a_batch_of_prompts_has_the_rows_its_prompts_have_alone(chunked):
    # One request takes a shortcut (most prefill batches, and a prefill is bound by the host).
    a, b = requests(7, 8)
    together = Prefill([a, b], prefix_lens=[5, 0], extend_lens=[3, 2], first_loc=40,
                       chunked=b if chunked else None, next_prompt_token=555 if chunked else None)
    first = Prefill([a], prefix_lens=[5], extend_lens=[3], first_loc=40)
    second = Prefill([b], prefix_lens=[0], extend_lens=[2], first_loc=43,
                     chunked=b if chunked else None, next_prompt_token=555 if chunked else None)
    second.batch.input_ids += 3  # tokens 103-104, as in the batch
    second.next_token_ids += 1  # the batch's second request samples 901
    rows = prompt_rows(together.batch, together.next_token_ids)
    alone = [prompt_rows(p.batch, p.next_token_ids) for p in (first, second)]
    for column, x, y in zip(rows, *alone):
        assert column.tolist() == x.tolist() + y.tolist()
    assert rows[0].tolist() == [101, 102, 900, 104, 555 if chunked else 901]
    assert rows[1].tolist() == [5, 6, 7, 0, 1] and rows[2].tolist() == [7, 7, 7, 8, 8]


def test_prompt_rows_wait_for_the_plain_steps_after_the_prefill():
    # A small prefill is bound by the host: its rows' write goes to the plain steps after it, one
    # replay's worth (8 rows here) a step, oldest first (2026-12-02-flashinfer-c32-traced), from
    # the second on: the GPU waits for the first one's host (2026-12-04-flashinfer-c64-plain-first).
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    a, b = requests(3, 4)
    assert deferred.defer(*Step([a], 10, 10, 0).args)
    assert deferred.defer_prefill(*Prefill([b], prefix_lens=[0], extend_lens=[12], first_loc=60).args)
    assert runner.replays == [] and deferred.rows == 13
    for i in range(3):
        assert deferred.defer(*Step([a], 11 + i, 20 + i, 1 + i).args)
    # The first step after the prefill found 14 rows and wrote none; the second found 15 and
    # wrote the oldest 8; the third found 8 and wrote them.
    assert [r["out_cache_loc"][:8].tolist() for r in runner.replays] == [
        [10, 60, 61, 62, 63, 64, 65, 66], [67, 68, 69, 70, 71, 20, 21, 22]]
    assert deferred.rows == 0


def test_a_prompt_longer_than_the_buffer_is_written_as_it_fills():
    runner = one_token_runner()  # 8 rows a replay, 32 buffered
    deferred = DeferredDraftKV(runner)
    (a,) = requests(3)
    assert deferred.defer(*Step([a], 10, 10, 0).args)
    prefill = Prefill(requests(4, 5), prefix_lens=[0, 0], extend_lens=[25, 15], first_loc=60)
    assert deferred.defer_prefill(*prefill.args)
    assert [r["out_cache_loc"][:8].tolist() for r in runner.replays] == [
        [10, 60, 61, 62, 63, 64, 65, 66], list(range(67, 75))]
    assert deferred.rows == 25  # 99, the last slot, among them
    deferred.write_all()  # the rows left, moved to the front as the buffer filled, every column with them
    assert [r["out_cache_loc"][: r["metadata"].batch_size].tolist() for r in runner.replays[2:]] == [
        list(range(75, 83)), list(range(83, 91)), list(range(91, 99)), [99]]
    assert torch.equal(runner.replays[2]["hidden_states"], prefill.hidden[15:23])
    assert runner.replays[5]["positions"].tolist() == [14]  # request 5's last prompt token


def test_the_buffers_host_work_is_named_in_a_profile():
    # A trace's host time by span (benchmark/analysis/kernel_profile.py host_time) then tells buffering
    # from writing inside upstream's draft_extend span.
    runner = one_token_runner()  # 8 rows a replay
    deferred = DeferredDraftKV(runner)
    a, b = requests(3, 4)
    deferred.defer_prefill(*Prefill([b], prefix_lens=[0], extend_lens=[12], first_loc=60).args)
    assert deferred.defer(*Step([a], 10, 10, 0).args)  # the first step after the prefill: no write
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        assert deferred.defer(*Step([a], 11, 11, 1).args)  # 14 rows buffered: one write
        assert deferred.defer_prefill(*Prefill([b], prefix_lens=[12], extend_lens=[2], first_loc=72).args)
    spans = [e.name for e in profile.events() if e.name.startswith("spec_gate.")]
    assert sorted(spans) == sorted([BUFFER_STEP_SPAN, WRITE_SPAN, BUFFER_PROMPT_SPAN])
    assert len(runner.replays) == 1


def test_a_plain_step_buffers_its_rows_in_two_copies():
    # One per column was 5 copies and 15 host calls a step, each step
    # (2026-12-04-flashinfer-c64-deferred-first-write); the index columns go in one copy.
    deferred = DeferredDraftKV(one_token_runner())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        assert deferred.defer(*Step(requests(1, 2, 3), 10, 10, 0).args)
    in_span = [e.name for e in profile.events() if e.cpu_parent is not None and e.cpu_parent.name == BUFFER_STEP_SPAN]
    assert in_span.count("aten::copy_") == 2 and len(in_span) <= 8, in_span


def test_the_first_plain_step_after_a_prefill_writes_only_if_the_buffer_fills():
    runner = one_token_runner()  # 8 rows a replay, 32 buffered
    deferred = DeferredDraftKV(runner)
    reqs = requests(*range(1, 9))
    assert deferred.defer_prefill(*Prefill(requests(20), prefix_lens=[0], extend_lens=[20], first_loc=100).args)
    assert deferred.defer(*Step(reqs, 40, 140, 0).args)  # 28 rows, room left: no write
    assert runner.replays == [] and deferred.rows == 28
    assert deferred.defer_prefill(*Prefill(requests(21), prefix_lens=[0], extend_lens=[4], first_loc=150).args)
    assert deferred.defer(*Step(reqs, 41, 160, 1).args)  # 32 + 8 rows: the full buffer writes 8
    assert len(runner.replays) == 1 and deferred.rows == 32
    assert deferred.defer(*Step(reqs, 42, 170, 2).args)  # full again, and not after a prefill
    assert len(runner.replays) == 3 and deferred.rows == 24  # so its own replay's worth as well


def test_a_prefill_without_a_hidden_state_per_token_is_not_buffered():
    deferred = DeferredDraftKV(one_token_runner())
    batch, hidden, next_token_ids = Prefill(requests(1), [0], [4], 0).args
    assert not deferred.defer_prefill(batch, hidden[-1:], next_token_ids)  # LAST, not FULL
    assert deferred.rows == 0


def test_a_plain_step_writes_the_oldest_replay_once_that_many_are_buffered():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    reqs = requests(*range(1, 4))
    for i in range(3):  # 3 + 3 + 3 rows: the third step writes the oldest 8
        assert deferred.defer(*Step(reqs, 20 + i, 30 + 3 * i, i).args)
    [replay] = runner.replays
    assert replay["bucket"] == 8 and replay["out_cache_loc"].tolist() == list(range(30, 38))
    assert deferred.rows == 1


def test_rows_left_by_a_write_stay_in_place_until_the_buffer_fills():
    # Moving them to the front after every write cost copies and host calls each write
    # (2026-12-03-flashinfer-c128-start-order); they move once the columns' end is reached.
    runner = one_token_runner()  # 8 rows a replay, 32 buffered
    deferred = DeferredDraftKV(runner)
    reqs = requests(*range(1, 6))
    locs = iter(range(30, 200, 5))
    for i in range(2):  # 10 rows: the second step writes the oldest 8
        assert deferred.defer(*Step(reqs, 20 + i, next(locs), i).args)
    assert (deferred.start, deferred.rows) == (8, 2)
    assert deferred.out_cache_loc[8:10].tolist() == [38, 39]  # where they were buffered
    moved = 0
    for i in range(2, 14):
        start = deferred.start
        assert deferred.defer(*Step(reqs, 20 + i, next(locs), i).args)
        moved += deferred.start < start and deferred.rows > 0
    assert moved  # the rows reached the end at least once, and went to the front
    deferred.write_all()
    assert (deferred.start, deferred.rows) == (0, 0)
    written = [loc for r in runner.replays for loc in r["out_cache_loc"].tolist() if loc]  # 0: padding
    assert written == list(range(30, 100))  # every row once, oldest first


def test_a_step_wider_than_the_graph_is_not_buffered():
    runner = one_token_runner(captured=[1, 2])
    deferred = DeferredDraftKV(runner)
    step = Step(requests(1, 2, 3), 0, 0, 0)
    assert not deferred.defer(*step.args)
    assert deferred.rows == 0 and runner.replays == []


def test_only_a_buffered_step_publishes_the_read_done_event():
    # The scheduler's next writes to the batch's buffers wait on it: it must come after the
    # step's last read of them, and a write is never last (a prefill publishes none).
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    reqs = requests(1, 2)
    events = []
    for i in range(2):
        deferred.defer(*Step(reqs, i, 2 * i, i).args)
        events.append(runner.model_runner.war_fastpath_read_done_event)
    assert events[0] is not None and events[1] is not None and events[0] is not events[1]
    runner.model_runner.war_fastpath_read_done_event = None  # the scheduler took it
    deferred.write_all()
    assert len(runner.replays) == 1 and runner.model_runner.war_fastpath_read_done_event is None


def server_args(**overrides):
    return SimpleNamespace(**{"disable_cuda_graph_padding": False, "enable_hierarchical_cache": False,
                              "disaggregation_mode": "null", **overrides})


@pytest.mark.parametrize("args, rank_sync, reads_one_entry, reason", [
    ({}, False, False, "whole contexts"),
    ({}, True, True, "syncs its batch across ranks"),
    ({"disable_cuda_graph_padding": True}, False, True, "--disable-cuda-graph-padding"),
    ({"enable_hierarchical_cache": True}, False, True, "HiCache"),
    ({"disaggregation_mode": "decode"}, False, True, "PD disaggregation"),
])
def test_configurations_that_keep_the_per_step_draft_extend_say_why(
    published_gate_args, monkeypatch, args, rank_sync, reads_one_entry, reason
):
    assert why_not_deferred(server_args(), SimpleNamespace(), True) is None  # SGLang's own rank-sync answer
    if rank_sync:
        # SGLang answers from the MoE all-to-all backend a launched server initializes (DP
        # attention, its other cause, is refused with the gate: test_args).
        monkeypatch.setattr("sglang_specgate.deferred_draft_kv.require_mlp_sync", lambda server_args: True)
    assert reason in why_not_deferred(server_args(**args), SimpleNamespace(), reads_one_entry)


def test_the_write_graph_is_captured_above_the_request_pool_up_to_the_draft_width(published_gate_args):
    """SGLang's real capture list for a pool of 16 requests, and what the off state's
    draft-extend runner reads in its place while it is captured."""
    # Upstream's shared logits buffer holds the widest decode graph: 16 requests, 4 draft tokens.
    shared_logits = GraphSharedOutput(device="cpu", max_rows=64)
    pool_of_16 = SimpleNamespace(server_args=published_gate_args, req_to_token_pool=SimpleNamespace(size=16),
                                 graph_shared_output=shared_logits)
    upstream = draft_extend_graphs.get_batch_sizes_to_capture
    decode_sizes, _ = upstream(pool_of_16)
    assert max(decode_sizes) == 16  # upstream's clamp
    # A converted Triton backend with its per-request index buffers sized at the pool, set by
    # hand: its __init__ allocates on the GPU.
    draft_backend = object.__new__(TritonAttnBackend)
    draft_backend.kv_indptr, draft_backend.window_kv_indptr = torch.zeros(17, dtype=torch.int32), None
    draft_backend.qo_indptr = torch.zeros(17, dtype=torch.int64)
    assert use_decode_kernels(draft_backend)
    with capture_write_sizes(4, draft_backend):
        write_sizes, _ = draft_extend_graphs.get_batch_sizes_to_capture(pool_of_16)
        # The runner reads its logits rows from its model runner's buffer: one of 1024 rows, for
        # the capture only.
        assert pool_of_16.graph_shared_output.max_rows == 1024
        assert pool_of_16.graph_shared_output.get_logits_buffer(32000, rows=1024).shape == (1024, 32000)
    assert pool_of_16.graph_shared_output is shared_logits
    # Four decode steps of 16, then doubled to MIN_WRITE_ROWS: a prompt's rows in one replay.
    assert write_sizes == decode_sizes + [32, 48, 64, 128, 256, 512, 1024]
    assert draft_backend.kv_indptr.shape == (1025,) and draft_backend.kv_indptr.dtype == torch.int32
    assert draft_backend.qo_indptr.shape == (1025,) and draft_backend.window_kv_indptr is None
    assert draft_extend_graphs.get_batch_sizes_to_capture is upstream
    # The runner looks the name up in its module when it is built, so the shadow reaches it.
    assert "get_batch_sizes_to_capture" in EAGLEDraftExtendCudaGraphRunner.__init__.__code__.co_names


@pytest.mark.parametrize("largest, draft_width, most, added", [
    (256, 4, None, [512, 768, 1024]),  # four decode steps already reach MIN_WRITE_ROWS
    (128, 4, None, [256, 384, 512, 1024]),  # four decode steps, then doubled to it
    (48, 3, None, [96, 144, 288, 576, 1024]),  # doubled, the last size clamped to it
    (640, 4, None, [1280, 1920, 2560]),  # above it: the decode steps alone
    (128, 4, 400, [256, 384]),  # the backend's memory allows 400 rows
    (128, 4, 128, []),  # or no more than a decode batch: a write takes one step's rows
])
def test_writes_take_at_least_a_prompts_worth_of_rows(monkeypatch, largest, draft_width, most, added):
    decode_sizes = [1, 2, 4, largest]
    monkeypatch.setattr(draft_extend_graphs, "get_batch_sizes_to_capture", lambda runner: (decode_sizes, None))
    grown = []
    monkeypatch.setattr("sglang_specgate.deferred_draft_kv.take_rows", lambda backend, rows: grown.append(rows))
    monkeypatch.setattr("sglang_specgate.deferred_draft_kv.most_write_rows", lambda backend: most)
    shared_logits = GraphSharedOutput(device="cpu", max_rows=largest * draft_width)
    draft_runner = SimpleNamespace(graph_shared_output=shared_logits)
    with capture_write_sizes(draft_width, draft_backend=None):
        write_sizes, _ = draft_extend_graphs.get_batch_sizes_to_capture(draft_runner)
        assert draft_runner.graph_shared_output.max_rows == max([*added, largest * draft_width])
    assert write_sizes == decode_sizes + added and grown == added[-1:]
    assert draft_runner.graph_shared_output is shared_logits


class StandInGatedWorker:
    """The gated worker's routing methods on what they read. Building the real worker needs a
    GPU; its draft worker stands in here, with a TP context (upstream's is a null context
    without DP attention) that records its entries. SGLang's MoE contexts are the real ones."""

    def __init__(self, steps, deferred):
        self.worker = object.__new__(GatedEAGLEWorkerV2)
        self.calls = []
        w = self.worker
        w.speculative_num_steps = steps
        w.deferred_draft_kv = deferred

        def draft_tp_context(group):
            self.calls.append("draft contexts")
            return contextlib.nullcontext()

        w._draft_worker = SimpleNamespace(draft_tp_context=draft_tp_context,
                                          draft_runner=SimpleNamespace(tp_group=None))
        w._draft_extend_every_step = lambda batch, result: self.calls.append("every step")
        w._stub_skipped_draft_extend = lambda batch, result: self.calls.append("stub")


def test_a_plain_step_buffers_its_rows_and_stubs_the_draft_outputs():
    deferred = DeferredDraftKV(one_token_runner())
    stand_in = StandInGatedWorker(PLAIN_STEPS, deferred)
    step = Step(requests(1, 2), 0, 10, 0)
    stand_in.worker._draft_extend_for_decode(*step.args)
    assert stand_in.calls == ["stub"] and deferred.rows == 2


def test_a_speculative_step_writes_buffered_rows_before_its_own_draft_extend():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    step = Step(requests(1, 2), 0, 10, 0)
    deferred.defer(*step.args)
    stand_in = StandInGatedWorker(3, deferred)
    stand_in.worker._draft_extend_for_decode(*step.args)
    assert len(runner.replays) == 1 and stand_in.calls == ["every step"]


def test_a_plain_step_too_wide_to_buffer_extends_the_draft_itself():
    runner = one_token_runner(captured=[1, 2])
    deferred = DeferredDraftKV(runner)
    deferred.defer(*Step(requests(1), 0, 10, 0).args)
    stand_in = StandInGatedWorker(PLAIN_STEPS, deferred)
    stand_in.worker._draft_extend_for_decode(*Step(requests(1, 2, 3), 1, 11, 1).args)
    assert len(runner.replays) == 1 and stand_in.calls == ["every step"]


def test_switching_to_speculation_writes_buffered_rows_before_the_draft_reads_them():
    runner = one_token_runner()
    deferred = DeferredDraftKV(runner)
    stand_in = StandInGatedWorker(PLAIN_STEPS, deferred)
    worker = stand_in.worker
    deferred.defer(*Step(requests(1, 2), 0, 10, 0).args)
    decisions = iter([PLAIN_STEPS, 3, 3])

    def activate(batch_size):  # upstream's controller swapping runtime states
        worker.speculative_num_steps = next(decisions)

    worker.adaptive_controller = SimpleNamespace(activate_step_by_batch=activate)
    worker.activate_step_by_batch(2)
    assert runner.replays == [] and deferred.rows == 2
    worker.activate_step_by_batch(2)
    assert len(runner.replays) == 1 and deferred.rows == 0
    assert stand_in.calls == ["draft contexts"]
    worker.activate_step_by_batch(2)  # speculating, nothing buffered: no write, no contexts
    assert len(runner.replays) == 1 and stand_in.calls == ["draft contexts"]


def prefill_stand_in(steps, runner) -> StandInGatedWorker:
    """The gated worker's prefill routing, its draft prefill recording how many writes came
    before it; its own stubs for the draft outputs, on the CPU."""
    stand_in = StandInGatedWorker(steps, DeferredDraftKV(runner))
    worker = stand_in.worker
    worker._draft_extend_whole_prompt = lambda *args: stand_in.calls.append(
        f"draft prefill after {len(runner.replays)} writes")
    del worker._stub_skipped_draft_extend
    worker.plain_step_constants = PlainStepConstants("cpu", 1, HIDDEN, torch.bfloat16)
    return stand_in


@pytest.mark.parametrize("steps, buffered", [(PLAIN_STEPS, True), (3, False)])
def test_a_prefill_while_off_buffers_its_prompt_instead_of_running_the_draft(steps, buffered):
    stand_in = prefill_stand_in(steps, one_token_runner())
    deferred = stand_in.worker.deferred_draft_kv
    prefill = Prefill(requests(1, 2), [0, 0], [3, 2], 0)
    draft_input = stand_in.worker._draft_extend_for_prefill(*prefill.args)
    if not buffered:
        assert stand_in.calls == ["draft prefill after 0 writes"] and deferred.rows == 0
        return
    assert stand_in.calls == [] and deferred.rows == 5
    assert draft_input.bonus_tokens is prefill.next_token_ids
    assert draft_input.topk_index.shape == (2, 1) and not draft_input.topk_p.any()
    assert draft_input.hidden_states.shape == (2, HIDDEN)


@pytest.mark.parametrize("buffered", [True, False])
def test_a_prefill_writes_buffered_rows_first_only_if_its_draft_runs(buffered):
    """A prefill while off buffers after the rows whose slots it may reuse; a draft prefill
    (here, a prompt without a hidden state per token) reads the cache and writes to it."""
    runner = one_token_runner()
    stand_in = prefill_stand_in(PLAIN_STEPS, runner)
    deferred = stand_in.worker.deferred_draft_kv
    deferred.defer(*Step(requests(1, 2), 0, 10, 0).args)
    batch, hidden, next_token_ids = Prefill(requests(3), [0], [4], 20).args
    stand_in.worker._draft_extend_for_prefill(batch, hidden if buffered else hidden[-1:], next_token_ids)
    if buffered:
        assert stand_in.calls == [] and runner.replays == [] and deferred.rows == 6
    else:
        assert stand_in.calls == ["draft prefill after 1 writes"] and deferred.rows == 0


def test_the_upstream_methods_the_routing_relies_on_exist():
    # GatedEAGLEWorkerV2 shadows the first two on the draft worker and overrides the others;
    # all are private to SGLang 0.5.17 (hooks.py lists them), so a rename must fail here, not
    # mid-serve.
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    assert callable(EagleDraftWorker._draft_extend_for_decode)
    assert callable(EagleDraftWorker._draft_extend_for_prefill)
    assert callable(EAGLEWorkerV2._stub_skipped_draft_extend)
    assert callable(EAGLEWorkerV2._build_trivial_verify_input)
