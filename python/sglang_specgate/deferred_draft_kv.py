"""While speculation is off, write the draft's KV cache for several decode steps at once.

Replaying the one-token draft-extend graph (kv_only_draft.py) for each plain step's tokens alone
costs a second graph a step, with its own metadata, launch and Python, and the draft's weights
read again for a few dozen rows: most of what being off cost against a plain server without this
(docs/design.md).

A row's draft KV depends only on what the row brings: its sampled token, the target's hidden
state, its position and, while off, the one cached entry its attention reads
(one_token_decode.read_one_entry). No row reads another pending row. So a plain step copies its
rows' inputs into a buffer, and buffered rows are written together, each row a one-token
pseudo-request, in one replay of the same graph. That graph is captured up to several full
decode batches, and at least MIN_WRITE_ROWS rows (capture_write_sizes), so even a full batch
writes once every few steps, and a prompt's rows in one replay.

A prefill while off buffers its prompt's rows the same way (defer_prefill), one per token,
instead of running the draft over the prompt as a forward of its own: the rows need only the
target's hidden states, the tokens shifted one place, positions and slots, and the draft's own
prefill is a sizeable part of an eager prefill's host and GPU time.

Buffered rows are written oldest first, in stream order, before anything else reads or writes
their draft KV:
- all of them before a speculative step's draft, which reads the cache;
- all of them before a draft prefill that is not buffered (speculating, or a prompt the buffer
  cannot take): it reads the cache and writes slots that buffered rows may hold;
- one replay's worth (``write_rows``, the graph's largest size) by a plain step that finds at
  least that many buffered, unless it is the first plain step after a prefill;
- one replay's worth whenever the buffer is full.
The buffer holds ``STAGED_WRITES`` replays' worth, so a prefill's rows wait for the plain steps
after it: there the write's host work overlaps the step's GPU work. Inside the prefill it would
not: a small prefill (on FlashInfer) is bound by the host, so the GPU would wait through the
host's buffering and writing of its rows.
Not in the first plain step after it, though: the GPU has finished the prefill before the host
has launched that step, and waits for it, and a prompt's rows alone often fill a replay. So that
step writes only if the buffer fills (docs/design.md has the figures).

Finished requests' rows are written too, and the draft KV the radix cache keeps for prefix
reuse is complete. A slot the scheduler frees (finished or retracted requests, radix eviction)
can be handed to a row buffered later, in the same write: the later row holds the slot's new
owner, so one write keeps only each slot's last row and sends the others to SGLang's padding slot
(``_latest_row_per_slot``). A request leaving the batch or a prefill while off therefore forces no
write; under load a request leaves every step or two.
"""

from __future__ import annotations

import contextlib
import logging

import torch
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.model_executor.graph_shared_output import GraphSharedOutput
from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as draft_extend_graphs
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.utils import require_mlp_sync
from sglang.srt.utils.nvtx_utils import profile_method

from sglang_specgate.chunked_prefill_tail import tail_tokens
from sglang_specgate.one_token_decode import most_write_rows, take_rows
from sglang_specgate.runtime_patches import (DRAFT_EXTEND_CAPTURE_SIZES, DRAFT_LOGITS_BUFFER, WAR_READ_DONE_EVENT,
                                             assign, shadowed)

logger = logging.getLogger(__name__)

ONE_TOKEN = 1  # each buffered row is a one-token draft extend
PADDING_SLOT = 0  # SGLang's KV slot for padded rows' writes (memory_pool.py), never allocated
# Profiler spans of the buffer's host work, inside upstream's ``draft_extend`` span, so a trace
# (benchmark/analysis/kernel_profile.py host_time) tells buffering from writing; a shared no-op unless a
# torch profiler is recording.
BUFFER_STEP_SPAN = "spec_gate.buffer_step_rows"
BUFFER_PROMPT_SPAN = "spec_gate.buffer_prompt_rows"
WRITE_SPAN = "spec_gate.write_draft_kv"
NO_GRAPH = "the one-token draft extend has no CUDA graph"
# The buffer holds this many replays' worth of rows, so a prefill's prompt rows wait for the plain
# steps after it instead of being written inside the prefill (see DeferredDraftKV).
STAGED_WRITES = 4
# The rows' index columns, in the order of DeferredDraftKV.indices' rows.
INDEX_COLUMNS = ("input_ids", "positions", "out_cache_loc", "req_pool_indices")
# One replay writes at least this many rows, whatever the largest decode batch: a replay costs the
# host about the same at any size (preparing the graph's inputs and the attention metadata), and a
# prompt's rows come all at once. Replays sized to a small pool would split a prefill's rows over
# the plain steps after it, while the host is furthest behind the GPU. Doubling the rows halves the
# writes, for more GPU memory in the buffer's hidden states, the graph's own buffers and its logits
# rows (hold_logits_rows); docs/design.md measures the trade.
MIN_WRITE_ROWS = 1024


def why_not_deferred(server_args, draft_worker, draft_reads_one_entry: bool) -> str | None:
    """Why the off state keeps upstream's per-step draft extend here, or None to defer.
    Asked before the off state's graph is captured, which takes the write sizes only to defer;
    a build that then captures no graph cannot defer either (NO_GRAPH)."""
    if not draft_reads_one_entry:
        return "the draft's attention reads whole contexts (upstream kernels), so rows depend on each other"
    if require_mlp_sync(server_args):
        return "the draft extend syncs its batch across ranks (DP attention, MoE all-to-all)"
    if server_args.disable_cuda_graph_padding:
        return "--disable-cuda-graph-padding replays only captured sizes"
    if getattr(draft_worker, "seed_dsa_topk_from_draft_extend", False):
        return "the draft seeds its indexer from each draft extend"
    if server_args.enable_hierarchical_cache:
        return "HiCache writes KV slots outside forwards"
    if server_args.disaggregation_mode != "null":
        return "PD disaggregation transfers KV slots outside forwards"
    return None


@contextlib.contextmanager
def capture_write_sizes(steps_per_write: int, draft_backend):
    """While the off state's one-token draft-extend graph is captured: also capture multiples
    of its largest batch, up to ``steps_per_write`` times it, so one replay writes that many
    full decode steps, then doubled sizes up to MIN_WRITE_ROWS if that is more, none above what
    the backend's memory for them allows (one_token_decode.most_write_rows); ``draft_backend``,
    that graph's attention, is given room for the rows. A write between captured sizes replays
    the next one up, its padding rows sent to SGLang's padding slot.

    Upstream sizes graphs, and the attention backend's per-request index buffers, at the
    request pool (get_batch_sizes_to_capture; take_rows), right where rows are requests.
    Buffered rows are (request, step) pairs: capped there, a full batch would fill the buffer
    every step and pay a replay a step again. With ``steps_per_write`` the server's draft width,
    the graph holds as many tokens as the speculative state's draft-extend graph, and as
    upstream's own steps-0 graph, captured that wide: its token-sized buffers grow back to
    upstream's sizes. Below MIN_WRITE_ROWS they grow to it (and the buffer holds STAGED_WRITES
    writes), and so do its logits rows (hold_logits_rows).

    The runner module's name is shadowed for the capture only; the scheduler builds graphs on
    one thread, and nothing else captures meanwhile.
    """
    sizes_for_decode = draft_extend_graphs.get_batch_sizes_to_capture

    with contextlib.ExitStack() as capture:

        def sizes_for_writes(model_runner, *args, **kwargs):
            capture_bs, compile_bs = sizes_for_decode(model_runner, *args, **kwargs)
            largest = max(capture_bs)
            most = most_write_rows(draft_backend)
            sizes = write_sizes(largest, steps_per_write, most)
            capped = "" if most is None else f"; at most {most} rows, by the attention backend's memory for them"
            if sizes:
                take_rows(draft_backend, sizes[-1])
                hold_logits_rows(model_runner, sizes[-1], capture)
            logger.info("spec gate: the off state's draft KV writes also take %s rows (up to %d decode steps "
                        "of %d, or a prompt's rows%s)", sizes, steps_per_write, largest, capped)
            return sorted({*capture_bs, *sizes}), compile_bs

        capture.enter_context(shadowed(DRAFT_EXTEND_CAPTURE_SIZES, draft_extend_graphs,
                                       get_batch_sizes_to_capture=sizes_for_writes))
        yield


def write_sizes(largest: int, steps_per_write: int, most_rows: int | None = None) -> list[int]:
    """The batch sizes the write graph takes beyond the decode batch sizes (capture_write_sizes),
    the largest of which is ``largest``, none above ``most_rows`` where given."""
    sizes = [largest * k for k in range(2, steps_per_write + 1)]
    rows = sizes[-1] if sizes else largest
    while rows < MIN_WRITE_ROWS:
        rows = min(2 * rows, MIN_WRITE_ROWS)
        sizes.append(rows)
    return [size for size in sizes if most_rows is None or size <= most_rows]


def hold_logits_rows(model_runner, rows: int, capture: contextlib.ExitStack) -> None:
    """The write graph's runner takes a logits buffer of one row per captured row from the
    process's shared one (eagle_draft_extend_cuda_graph_runner.py:226-229), which upstream sizes
    for the widest decode graph: the largest batch times the draft width
    (model_runner.py:763-767), the write sizes' multiples of the largest batch included. Rows
    up to MIN_WRITE_ROWS can exceed it (32 requests, 4 draft tokens: 128 rows), so the runner
    gets a buffer of its own until ``capture`` closes. It stays zeros: the kv-only draft hands it
    out unwritten on one rank and copies zeros into it elsewhere, and writes read none of it."""
    shared = model_runner.graph_shared_output
    if shared is None or shared.max_rows >= rows:
        return
    capture.enter_context(shadowed(DRAFT_LOGITS_BUFFER, model_runner,
                                   graph_shared_output=GraphSharedOutput(device=shared.device, max_rows=rows)))
    logger.info("spec gate: the off state's draft KV writes hold their own logits buffer of %d rows "
                "(the shared one holds %d)", rows, shared.max_rows)


def prompt_rows(batch, next_token_ids) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A prefill batch's draft rows, one per prompt token, as the draft's prefill reads them:
    the next token in (a request's tail token after its last, tail_tokens), the token's
    position after its request's cached prefix, and its request's pool index."""
    n = batch.input_ids.numel()
    device = batch.input_ids.device
    shifted = torch.empty_like(batch.input_ids)
    shifted[:-1] = batch.input_ids[1:]
    tails = tail_tokens(batch, next_token_ids)
    if len(batch.extend_lens) == 1:
        # Most prefill batches hold one request, and a prefill is bound by the host: an arange
        # and a view, where the general case below makes about 15 calls, two host-to-device
        # copies among them.
        prefix = batch.prefix_lens[0]
        shifted[-1:] = tails
        return (shifted, torch.arange(prefix, prefix + n, dtype=torch.int64, device=device),
                batch.req_pool_indices.expand(n))
    # Host lists to the device as upstream's ForwardBatch takes them; nothing below syncs.
    lens = torch.tensor(batch.extend_lens, dtype=torch.int64).to(device, non_blocking=True)
    prefix = torch.tensor(batch.prefix_lens, dtype=torch.int64).to(device, non_blocking=True)
    starts = torch.cumsum(lens, 0) - lens
    shifted[starts + lens - 1] = tails
    offsets = torch.repeat_interleave(starts - prefix, lens, output_size=n)
    return (shifted, torch.arange(n, dtype=torch.int64, device=device) - offsets,
            torch.repeat_interleave(batch.req_pool_indices, lens, output_size=n))


class DeferredDraftKV:
    """The off state's buffered draft-extend rows, oldest first, and their one-replay writes."""

    def __init__(self, runner):
        self.runner = runner  # the off state's one-token draft-extend graph runner
        self.write_rows = runner.max_bs  # the most rows one replay writes
        self.capacity = STAGED_WRITES * self.write_rows
        hidden = runner.buffers.hidden_states
        device = hidden.device

        # One row per index column, so that buffering a step copies its four in one go, not one
        # copy (and its host calls) per column in every plain step; each column (a row here)
        # stays contiguous for the replay's inputs.
        self.indices = torch.zeros((len(INDEX_COLUMNS), self.capacity), dtype=torch.int64, device=device)
        self.input_ids, self.positions, self.out_cache_loc, self.req_pool_indices = self.indices
        self.hidden_states = torch.zeros((self.capacity, hidden.shape[1]), dtype=hidden.dtype, device=device)
        self.no_correct_drafts = torch.zeros((self.write_rows,), dtype=torch.int32, device=device)
        self.one_accepted_token = torch.ones((self.write_rows,), dtype=torch.int32, device=device)
        self.row_numbers = torch.arange(self.write_rows, dtype=torch.int64, device=device)
        # Per draft KV slot, the number (over all writes) of the last row written to it.
        kv_pool = runner.model_runner.token_to_kv_pool
        self.last_row_of_slot = torch.full((kv_pool.size + kv_pool.page_size,), -1, dtype=torch.int64, device=device)
        self.device_module = torch.get_device_module(device)
        # Buffered, not yet written: rows [start, start + rows) of the columns, oldest first.
        self.start = 0
        self.rows = 0
        self.rows_written = 0
        self.writes = 0
        self.prompt_rows = 0  # of those buffered, the rows of prefills while off
        self.prefilled_since_last_step = False  # the next plain step is the first after a prefill

    def snapshot(self) -> dict:
        return {
            "rows_written": self.rows_written,
            "writes": self.writes,
            "rows_per_write": round(self.rows_written / self.writes, 2) if self.writes else None,
            "write_rows": self.write_rows,
            "capacity": self.capacity,
            "prompt_rows": self.prompt_rows,
        }

    @profile_method(BUFFER_STEP_SPAN)
    def defer(self, batch, result) -> bool:
        """Buffer a plain step's draft-extend rows, then write the oldest replay's worth if that
        many are buffered and the step does not follow a prefill; False, buffering nothing, if
        the rows do not fit one replay or are not one token per request."""
        bs = len(batch.reqs)
        hidden = result.logits_output.hidden_states
        if (
            bs > self.write_rows
            or hidden is None
            or tuple(hidden.shape) != (bs, self.hidden_states.shape[1])
            or result.next_token_ids.numel() != bs
            or batch.out_cache_loc.numel() != bs
        ):
            return False
        # Spec-v2 decode batches hold the length before this step's token: its position.
        self._append((result.next_token_ids, batch.seq_lens, batch.out_cache_loc, batch.req_pool_indices), hidden)
        self._publish_read_done()
        after_prefill, self.prefilled_since_last_step = self.prefilled_since_last_step, False
        if self.rows >= self.write_rows and not after_prefill:
            self._write_oldest(self.write_rows)
        return True

    @profile_method(BUFFER_PROMPT_SPAN)
    def defer_prefill(self, batch, hidden, next_token_ids) -> bool:
        """Buffer a prefill's draft rows, one per prompt token, as the draft's prefill would
        have written them (eagle_worker_v2.py _draft_extend_for_prefill): at each token's
        position and slot, the next token in, the request's tail token after its last one.
        They are written by the plain steps after it, unless the buffer fills first.
        False, buffering nothing, if the target's hidden states are not one row per token."""
        n = batch.input_ids.numel()
        if hidden is None or tuple(hidden.shape) != (n, self.hidden_states.shape[1]):
            return False
        input_ids, positions, req_pool_indices = prompt_rows(batch, next_token_ids)
        self._append((input_ids, positions, batch.out_cache_loc, req_pool_indices), hidden)
        # A prefill publishes no read-done event: the scheduler waits for its whole forward.
        self.prompt_rows += n
        self.prefilled_since_last_step = True
        return True

    def _append(self, indices: tuple[torch.Tensor, ...], hidden_states: torch.Tensor) -> None:
        """Copy rows after the buffered ones, their index columns in INDEX_COLUMNS order,
        writing the oldest whenever the buffer is full."""
        indices = torch.stack(indices)  # promoted to int64: the sampled tokens come as int32
        n = indices.shape[1]
        done = 0
        while done < n:
            if self.rows == self.capacity:
                self._write_oldest(self.write_rows)
            if self.start + self.rows == self.capacity:
                self._move_to_front()
            end = self.start + self.rows
            take = min(n - done, self.capacity - end)
            self.indices[:, end : end + take].copy_(indices[:, done : done + take])
            self.hidden_states[end : end + take].copy_(hidden_states[done : done + take])
            self.rows += take
            done += take

    def write_all(self) -> None:
        """Write every buffered row, oldest first, one replay per ``write_rows``."""
        while self.rows:
            self._write_oldest(min(self.rows, self.write_rows))

    @profile_method(WRITE_SPAN)
    def _write_oldest(self, n: int) -> None:
        """Write the ``n`` oldest buffered rows' draft KV in one replay of the one-token graph."""
        oldest = slice(self.start, self.start + n)
        self._latest_row_per_slot(oldest)
        positions = self.positions[oldest]
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.DRAFT_EXTEND_V2,
            batch_size=n,
            input_ids=self.input_ids[oldest],
            req_pool_indices=self.req_pool_indices[oldest],
            seq_lens=positions + ONE_TOKEN,  # the length after the row's write, as upstream
            out_cache_loc=self.out_cache_loc[oldest],
            seq_lens_sum=None,
            positions=positions,
            spec_info=EagleDraftExtendInput(
                hidden_states=self.hidden_states[oldest],
                num_correct_drafts=self.no_correct_drafts[:n],
                num_accept_tokens=self.one_accepted_token[:n],
                num_tokens_per_req=ONE_TOKEN,
            ),
            spec_algorithm=self.runner.model_runner.spec_algorithm,
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        # Only a step's last read of the batch's buffers may publish the read-done event
        # (_publish_read_done); a write reads only this buffer, and comes after that read or
        # in a prefill, which publishes none and so gets the scheduler's wait for its forward.
        read_done = self.runner.model_runner.war_fastpath_read_done_event
        self.runner.execute(forward_batch)
        assign(WAR_READ_DONE_EVENT, self.runner.model_runner, war_fastpath_read_done_event=read_done)
        self.rows_written += n
        self.writes += 1
        self.rows -= n
        self.start = self.start + n if self.rows else 0

    def _move_to_front(self) -> None:
        """Move the buffered rows to the front once they reach the columns' end, in stream order
        after the replays' copies of them. Moved after every write instead, the rows left would
        cost copies of up to three replays' hidden states and their host calls at every write."""
        rows = slice(self.start, self.start + self.rows)
        overlapping = self.rows > self.start
        for front, rest in ((self.indices[:, : self.rows], self.indices[:, rows]),
                            (self.hidden_states[: self.rows], self.hidden_states[rows])):
            front.copy_(rest.clone() if overlapping else rest)
        self.start = 0

    def _latest_row_per_slot(self, oldest: slice) -> None:
        """Send every row of this write whose slot a later row of it holds to the padding slot,
        on the GPU, without a sync. Rows are numbered across writes, so what earlier writes
        left in ``last_row_of_slot`` is below every number here; a later row left buffered is
        written by a later replay, after this one in stream order."""
        slots = self.out_cache_loc[oldest]
        numbers = self.row_numbers[: oldest.stop - oldest.start] + self.rows_written
        self.last_row_of_slot.scatter_reduce_(0, slots, numbers, reduce="amax")
        slots.masked_fill_(self.last_row_of_slot[slots] != numbers, PADDING_SLOT)

    def _publish_read_done(self) -> None:
        # The scheduler's next writes to the batch's shared buffers wait on the step's last
        # read of them (scheduler.py _apply_war_barrier; upstream's draft-extend replay
        # publishes it). Here that read is the copies above.
        read_done = self.device_module.Event()
        read_done.record()
        assign(WAR_READ_DONE_EVENT, self.runner.model_runner, war_fastpath_read_done_event=read_done)
