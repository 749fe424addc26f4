"""While speculation is off, the host knows each request's sequence length without asking the GPU.

Spec-v2 cannot know on the host how many tokens a verify accepted, so before each decode step
the scheduler copies back the lengths the previous step published and waits for them
(``FutureMap.resolve_seq_lens_cpu``, overlap_utils.py:412-468), for attention backends that plan
on host lengths (``needs_cpu_seq_lens``: FlashInfer; Triton and FA3 opt out). The wait ends the
overlap scheduler's lead: the host prepares step n+1 only once step n's verify has run, and the
GPU idles meanwhile, a large share of each off step (docs/design.md). A speculative step hides
that behind its draft work; a plain step has none. But a plain step accepts exactly its one
token, and a prefill publishes its batch's own lengths, so after either the host knows what the
GPU publishes, as a plain server's scheduler does (schedule_batch.py:2988, ``seq_lens_cpu + 1``).

``HostSeqLens`` mirrors, per request-pool slot, what each forward publishes when the host knows
it; the gated worker records at every publish. For a batch whose every slot is known and whose
step will not speculate, ``resolve_with_host_lengths`` takes upstream's GPU-only path for the
device lengths and the mirror's for the host ones: no copy, no wait. Any other batch resolves as
upstream does, the first speculative step after plain ones included.

On by default; ``SGLANG_SPEC_GATE_HOST_SEQ_LENS=0`` turns it off (args.host_seq_lens_enabled).
Whether a forward is a prefill is judged before it runs (``is_prefill``): verify relabels each
decode batch TARGET_VERIFY, an extend mode, so judged when upstream publishes, every decode step
would publish the lengths it started with, the mirror would fall further behind the GPU every
plain step, and FlashInfer would plan attention over too few KV entries. Speculative steps always
take upstream's wait.

Wrong lengths cost wrong attention silently, and such a bug shows only in a model built to notice
it. So one batch in CHECK_EVERY the mirror serves is compared with the GPU's lengths on the
device (``check``; ``disagreed`` in /server_info), and should one ever disagree, the mirror
stands down: an ERROR line, and upstream's copy for every batch after (``stood_down``). This
bounds any error to the batches served before the host sees the count, without a wait. A wrong
length stays wrong: the mirror adds one to it each plain step until a prefill or a speculative
step publishes that slot again, so checking one batch in CHECK_EVERY catches it a few batches
later, and spares the other plain steps the check's launches and copy (docs/design.md has the
history and the figures).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from sglang_specgate.args import HOST_SEQ_LENS_ENV
from sglang_specgate.runtime_patches import FUTURE_MAP_HOST_LENGTHS, SCHEDULE_BATCH_HOST_LENGTHS, assign, shadowed

logger = logging.getLogger(__name__)

# One batch in this many that the mirror serves is checked against the GPU's lengths, and at each
# check the host reads the device's count of disagreements as copied at the last one, if that copy
# has landed: a look costs a copy's launch, never a wait.
CHECK_EVERY = 8

# The process's mirror: one scheduler, and so one gated worker, per process (each TP rank has its
# own, and they record the same lengths). Set by the gated worker; None leaves resolve upstream's.
mirror: HostSeqLens | None = None


class HostSeqLens:
    def __init__(self, pool_size: int, step_speculates: Callable[[int], bool]):
        self.lengths = torch.zeros(pool_size, dtype=torch.int64)
        self.known = torch.zeros(pool_size, dtype=torch.bool)
        # The gate's decision for the coming decode step of a batch size, read without recording.
        self.step_speculates = step_speculates
        # Decode batches resolved from this mirror, and those that waited for upstream's copy.
        self.resolved_on_host = 0
        self.copied_back = 0
        # Lengths the mirror gave that the GPU's published ones contradict, counted on the device
        # (created at the first check), so a check costs no wait.
        self.disagreements: torch.Tensor | None = None
        # The host's copy of that count, and the event its copy completes: see _watch.
        self.watched: torch.Tensor | None = None
        self.watched_copy: object | None = None
        self.stood_down = False

    def published(self, req_pool_indices_cpu: torch.Tensor, lengths_cpu: torch.Tensor | None) -> None:
        """A forward published these slots' lengths: ``lengths_cpu``, or None if the host
        does not know them (a speculative verify's)."""
        if lengths_cpu is None:
            self.known[req_pool_indices_cpu] = False
        else:
            self.lengths[req_pool_indices_cpu] = lengths_cpu
            self.known[req_pool_indices_cpu] = True

    def lookup(self, req_pool_indices_cpu: torch.Tensor | None) -> torch.Tensor | None:
        """The slots' last published lengths (a copy), or None unless the host knows them all
        and the mirror has not stood down."""
        if (
            self.stood_down
            or req_pool_indices_cpu is None
            or not bool(self.known[req_pool_indices_cpu].all())
        ):
            return None
        return self.lengths[req_pool_indices_cpu]

    def serve(self, batch_size: int, req_pool_indices_cpu: torch.Tensor | None) -> torch.Tensor | None:
        """The host lengths for a decode batch about to resolve, or None where upstream's copy
        must give them: its step speculates, or a slot is unknown. Counted either way."""
        lengths = None if self.step_speculates(batch_size) else self.lookup(req_pool_indices_cpu)
        if lengths is None:
            self.copied_back += 1
        else:
            self.resolved_on_host += 1
        return lengths

    def check(self, device_lengths: torch.Tensor, host_lengths: torch.Tensor) -> None:
        """Count, on the device, where the lengths the mirror served differ from the GPU's, and
        look at the count the last check copied."""
        device = device_lengths.device
        differing = (device_lengths != host_lengths.to(device, non_blocking=True)).sum()
        if self.disagreements is None:
            self.disagreements = torch.zeros((), dtype=torch.int64, device=device)
            self.watched = torch.zeros((), dtype=torch.int64, pin_memory=device.type == "cuda")
        self.disagreements += differing
        self._watch()

    def _watch(self) -> None:
        """Stand down if the count copied at the last look says the GPU disagreed; copy it again
        once that copy has landed. Landed or not is timing, so TP ranks may stand down some
        batches apart. Unlike the gate's decisions, that cannot desynchronise them: each rank
        resolves its lengths alone (no collective), and in the batches between, a rank still on
        the mirror serves what every rank served until then."""
        if self.watched_copy is not None:
            if not self.watched_copy.query():
                return
            disagreed = int(self.watched)
            if disagreed > 0:
                self.stood_down = True
                logger.error(
                    "spec gate: %d host sequence lengths served to plain steps disagreed with the "
                    "GPU's, so attention may have read too few or too many KV entries for those "
                    "batches. From now on every batch waits for the GPU's lengths, as upstream's "
                    "scheduler does. Please report this; %s=0 starts the server that way.",
                    disagreed, HOST_SEQ_LENS_ENV)
                return
        self.watched.copy_(self.disagreements, non_blocking=True)
        self.watched_copy = torch.get_device_module(self.disagreements.device).Event()
        self.watched_copy.record()

    def snapshot(self) -> dict:
        """The counters; reading the disagreements waits for the device (/server_info only)."""
        disagreed = 0 if self.disagreements is None else int(self.disagreements)
        return {"resolved_on_host": self.resolved_on_host, "copied_back": self.copied_back,
                "disagreed": disagreed, "stood_down": self.stood_down}


def install(pool_size: int, step_speculates: Callable[[int], bool]) -> HostSeqLens:
    global mirror
    mirror = HostSeqLens(pool_size, step_speculates)
    return mirror


def is_prefill(batch) -> bool:
    """Upstream's own test for a prefill forward (eagle_worker_v2.py:1106). Ask it before the
    forward: verify relabels a decode batch TARGET_VERIFY (eagle_utils.py:542-543), an extend
    mode too, so asked at publish time it takes every decode step for a prefill."""
    return batch.forward_mode.is_extend() or batch.is_extend_in_batch


def published_lengths(batch, prefill: bool, plain_step: bool) -> torch.Tensor | None:
    """What the forward of ``batch`` publishes as its new lengths, where the host knows it:
    a prefill (``is_prefill`` before the forward) publishes the batch's lengths
    (eagle_worker_v2.py:1119), a plain step its lengths plus the one token it accepts
    (new_seq_lens = seq_lens + accept_lens, eagle_worker_common.py:589)."""
    if batch.seq_lens_cpu is None:
        return None
    if prefill:
        return batch.seq_lens_cpu
    return batch.seq_lens_cpu + 1 if plain_step else None


def resolve_with_host_lengths(original, future_map, batch) -> None:
    """AROUND hook on ``sglang.srt.managers.overlap_utils.FutureMap.resolve_seq_lens_cpu``."""
    spec_info = batch.spec_info
    if (
        mirror is None
        or not future_map.needs_cpu_seq_lens
        or spec_info is None
        or spec_info.future_indices is None
    ):
        return original(future_map, batch)
    lengths = mirror.serve(batch.req_pool_indices.shape[0], batch.req_pool_indices_cpu)
    if lengths is None:
        return original(future_map, batch)
    # Upstream's own path for backends that need no host lengths: the schedule stream waits on
    # the publish and gathers the device lengths; only the host copy is skipped.
    with shadowed(FUTURE_MAP_HOST_LENGTHS, future_map, needs_cpu_seq_lens=False):
        original(future_map, batch)
    if (mirror.resolved_on_host - 1) % CHECK_EVERY == 0:  # the first served, then every CHECK_EVERY-th
        mirror.check(batch.seq_lens, lengths)  # the device says whether it was right
    assign(SCHEDULE_BATCH_HOST_LENGTHS, batch, seq_lens_cpu=lengths, seq_lens_sum=int(lengths.sum()))
