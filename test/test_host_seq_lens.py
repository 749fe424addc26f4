"""Host sequence lengths while off (host_seq_lens.py), on CPU.

SGLang's real FutureMap runs here on CPU tensors (there it has no copy stream and takes its
bootstrap copy, ``seq_lens.cpu()``, where a GPU server waits on a device-to-host copy). Batches
are stand-ins carrying the fields resolve and the worker read; the worker's upstream forward is a
stand-in that publishes as upstream's does (a real one needs models on a GPU).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from sglang.srt.managers.overlap_utils import FutureMap
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_specgate import host_seq_lens
from sglang_specgate.args import HOST_SEQ_LENS_ENV
from sglang_specgate.controller_params import ThresholdGateParams
from sglang_specgate.host_seq_lens import HostSeqLens, is_prefill, published_lengths, resolve_with_host_lengths
from sglang_specgate.policy import GateConfig, SpecGatePolicy
from sglang_specgate.worker import PLAIN_STEPS, GatedEAGLEWorkerV2

POOL = 8


def batch(slots, lengths, mode=ForwardMode.DECODE):
    slots = torch.tensor(slots)
    return SimpleNamespace(
        forward_mode=mode, is_extend_in_batch=False,
        req_pool_indices=slots, req_pool_indices_cpu=slots.clone(),
        seq_lens=torch.tensor(lengths), seq_lens_cpu=torch.tensor(lengths), seq_lens_sum=sum(lengths),
        spec_info=SimpleNamespace(future_indices=slots),
    )


def future_map(needs_cpu_seq_lens=True) -> FutureMap:
    pool = SimpleNamespace(req_to_token=torch.zeros(POOL, 64, dtype=torch.int32))
    return FutureMap(torch.device("cpu"), SpeculativeAlgorithm.from_string("EAGLE3"), pool,
                     needs_cpu_seq_lens=needs_cpu_seq_lens)


def gate_off_above(threshold: int = 1) -> SpecGatePolicy:
    """A real gate, off after a decode step above ``threshold``; back on at the next step at or
    below it (no dwell)."""
    gate = SpecGatePolicy(GateConfig(threshold, threshold, 0))
    gate.step(threshold + 1)
    return gate


@pytest.fixture
def mirror(monkeypatch):
    monkeypatch.setattr(host_seq_lens, "mirror", None)
    return host_seq_lens.install(POOL, gate_off_above().speculates_next)


def test_what_the_host_knows_a_forward_publishes():
    prefill = batch([1, 2], [10, 20], ForwardMode.EXTEND)
    assert is_prefill(prefill)
    assert published_lengths(prefill, prefill=True, plain_step=False).tolist() == [10, 20]
    step = batch([1, 2], [10, 20])
    assert not is_prefill(step)
    assert published_lengths(step, prefill=False, plain_step=True).tolist() == [11, 21]
    assert published_lengths(step, prefill=False, plain_step=False) is None  # a verify's accept lengths
    step.seq_lens_cpu = None  # merge_batch drops the mirror when one side has none
    assert published_lengths(step, prefill=False, plain_step=True) is None
    # What verify makes of a decode batch before it publishes: an extend mode, not a prefill.
    assert is_prefill(batch([1], [10], ForwardMode.TARGET_VERIFY))


def test_a_batch_is_known_only_if_all_its_slots_are():
    lens = HostSeqLens(POOL, gate_off_above().speculates_next)
    lens.published(torch.tensor([1, 2]), torch.tensor([11, 21]))
    assert lens.lookup(torch.tensor([2, 1])).tolist() == [21, 11]
    assert lens.lookup(torch.tensor([1, 3])) is None
    lens.published(torch.tensor([2]), None)
    assert lens.lookup(torch.tensor([1, 2])) is None
    assert lens.lookup(None) is None
    # a copy: later publishes do not reach a resolved batch's lengths
    resolved = lens.lookup(torch.tensor([1]))
    lens.published(torch.tensor([1]), torch.tensor([12]))
    assert resolved.tolist() == [11]


def upstream_resolve(future_map: FutureMap, b) -> None:
    """SGLang's own resolve. The suite loads the plugin in-process, which hooks the class
    attribute and rebinds every module global holding the original, so unwrap at call time."""
    inspect.unwrap(FutureMap.resolve_seq_lens_cpu)(future_map, b)


def resolve_both_ways(fm: FutureMap, slots, stale_lengths):
    """The hook's resolve of a batch, upstream's of its twin, and what the hook's original saw."""
    seen = []

    def original(future_map, b):
        seen.append(future_map.needs_cpu_seq_lens)
        upstream_resolve(future_map, b)

    ours, upstream = batch(slots, stale_lengths), batch(slots, stale_lengths)
    resolve_with_host_lengths(original, fm, ours)
    fm._publish_fresh = True  # SGLang's debug bookkeeping: one resolve per publish
    upstream_resolve(fm, upstream)
    return ours, upstream, seen


def test_after_plain_steps_resolve_takes_the_mirror_and_skips_the_copy(mirror):
    fm = future_map()
    prefill = batch([1, 2], [10, 20], ForwardMode.EXTEND)
    fm.publish(prefill.req_pool_indices, prefill.seq_lens)
    mirror.published(prefill.req_pool_indices_cpu, published_lengths(prefill, is_prefill(prefill), plain_step=False))
    step = batch([1, 2], [10, 20])
    fm.publish(step.req_pool_indices, step.seq_lens + 1)  # a one-token verify accepts 1
    mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))

    ours, upstream, seen = resolve_both_ways(fm, [2, 1], [0, 0])
    assert seen == [False]  # upstream's GPU-only path: no copy back, no wait
    assert fm.needs_cpu_seq_lens  # restored
    assert ours.seq_lens_cpu.tolist() == upstream.seq_lens_cpu.tolist() == [21, 11]
    assert ours.seq_lens.tolist() == upstream.seq_lens.tolist() == [21, 11]
    assert ours.seq_lens_sum == upstream.seq_lens_sum == 32
    assert mirror.snapshot() == {"resolved_on_host": 1, "copied_back": 0, "disagreed": 0, "stood_down": False}


def test_lengths_the_gpu_contradicts_are_counted_where_the_mirror_served_them(mirror):
    # A publish the mirror missed: the GPU's lengths moved on, the mirror's did not.
    fm = future_map()
    step = batch([1, 2], [10, 20])
    mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))
    fm.publish(step.req_pool_indices, step.seq_lens + torch.tensor([1, 2]))
    ours, _, seen = resolve_both_ways(fm, [1, 2], [0, 0])
    assert seen == [False] and ours.seq_lens_cpu.tolist() == [11, 21]  # the mirror's, served
    assert ours.seq_lens.tolist() == [11, 22]
    assert mirror.snapshot() == {"resolved_on_host": 1, "copied_back": 0, "disagreed": 1, "stood_down": False}


def test_the_mirror_stands_down_once_the_host_sees_a_disagreement(mirror, monkeypatch, caplog):
    # Every resolve checks and looks (on a GPU, every CHECK_EVERY-th); on CPU each copy has
    # landed at once.
    monkeypatch.setattr(host_seq_lens, "CHECK_EVERY", 1)
    fm = future_map()
    step = batch([1, 2], [10, 20])
    for _ in range(3):  # a publish the mirror keeps missing, as in the bug of 7cf44b6
        mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))
        fm.publish(step.req_pool_indices, step.seq_lens + torch.tensor([1, 2]))
        resolve_both_ways(fm, [1, 2], [0, 0])
    # The first resolve counted and copied the count; the second read it and stood down, so
    # the third waited for the GPU's lengths, as upstream.
    assert mirror.snapshot() == {"resolved_on_host": 2, "copied_back": 1, "disagreed": 2, "stood_down": True}
    assert "disagreed with the GPU's" in caplog.text and f"{HOST_SEQ_LENS_ENV}=0" in caplog.text
    assert caplog.text.count("spec gate:") == 1


def test_one_served_batch_in_check_every_is_checked_the_first_among_them(mirror, monkeypatch):
    monkeypatch.setattr(host_seq_lens, "CHECK_EVERY", 4)
    checked = []
    monkeypatch.setattr(mirror, "check", lambda device_lengths, host_lengths: checked.append(mirror.resolved_on_host))
    fm = future_map()
    for length in range(10, 19):
        step = batch([1, 2], [length, length + 5])
        mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))
        fm.publish(step.req_pool_indices, step.seq_lens + 1)
        ours, upstream, _ = resolve_both_ways(fm, [1, 2], [0, 0])
        assert ours.seq_lens_cpu.tolist() == upstream.seq_lens_cpu.tolist()
    assert checked == [1, 5, 9] and mirror.resolved_on_host == 9


def test_a_step_that_will_speculate_waits_as_upstream_does(mirror):
    """The mirror knows the lengths after plain steps, but the step the gate turns back on for
    takes upstream's copy and its wait (results/2026-12-02-flashinfer-host-lengths-crash)."""
    fm = future_map()
    step = batch([3], [10])
    fm.publish(step.req_pool_indices, step.seq_lens + 1)
    mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))
    assert mirror.lookup(step.req_pool_indices_cpu).tolist() == [11]
    ours, upstream, seen = resolve_both_ways(fm, [3], [0])  # a batch of 1: the gate turns on
    assert seen == [True]
    assert ours.seq_lens_cpu.tolist() == upstream.seq_lens_cpu.tolist() == [11]
    assert mirror.snapshot() == {"resolved_on_host": 0, "copied_back": 1, "disagreed": 0, "stood_down": False}


def test_after_a_speculative_step_resolve_is_upstreams(mirror):
    fm = future_map()
    step = batch([1, 2], [10, 20])
    mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))
    fm.publish(step.req_pool_indices, step.seq_lens + torch.tensor([3, 1]))  # accepted 3 and 1
    mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=False))
    ours, upstream, seen = resolve_both_ways(fm, [1, 2], [0, 0])
    assert seen == [True]
    assert ours.seq_lens_cpu.tolist() == upstream.seq_lens_cpu.tolist() == [13, 21]
    assert mirror.snapshot() == {"resolved_on_host": 0, "copied_back": 1, "disagreed": 0, "stood_down": False}


@pytest.mark.parametrize("case", ["no mirror", "backend needs no host lengths", "no future indices"])
def test_resolve_is_upstreams_where_the_mirror_does_not_apply(mirror, monkeypatch, case):
    fm = future_map(needs_cpu_seq_lens=case != "backend needs no host lengths")
    step = batch([1], [10])
    fm.publish(step.req_pool_indices, step.seq_lens + 1)
    mirror.published(step.req_pool_indices_cpu, published_lengths(step, is_prefill(step), plain_step=True))
    if case == "no mirror":
        monkeypatch.setattr(host_seq_lens, "mirror", None)
    seen = []
    b = batch([1], [0])
    if case == "no future indices":
        b.spec_info.future_indices = None
    resolve_with_host_lengths(lambda f, x: seen.append("upstream"), fm, b)
    assert seen == ["upstream"]
    assert mirror.snapshot() == {"resolved_on_host": 0, "copied_back": 0, "disagreed": 0, "stood_down": False}  # not a mirror's batch


def publishing_upstream(steps, accepted):
    """EAGLEWorkerV2.forward_batch_generation as far as publishing goes: a prefill publishes its
    lengths; a decode step is chosen (activate_step_by_batch), relabelled TARGET_VERIFY by its
    verify (eagle_utils.py:542-543), then publishes (eagle_worker_v2.py:1106-1181)."""

    def forward_batch_generation(worker, b, on_publish=None, grammar_barrier=None):
        worker.speculative_num_steps = steps
        if b.forward_mode.is_extend():
            new_lengths = b.seq_lens
        else:
            b.forward_mode = ForwardMode.TARGET_VERIFY
            new_lengths = b.seq_lens + accepted
        if on_publish is not None:
            on_publish(new_lengths)
        return "result"

    return forward_batch_generation


def gated_worker(disaggregation_mode="null", needs_host_lengths=(False, True, False)) -> GatedEAGLEWorkerV2:
    """The worker's fields the mirror reads; ``needs_host_lengths``: its target, draft and
    draft-extend backends' ``needs_cpu_seq_lens``."""
    worker = object.__new__(GatedEAGLEWorkerV2)  # __init__ builds real models
    worker.server_args = SimpleNamespace(disaggregation_mode=disaggregation_mode,
                                         enable_two_batch_overlap=False, speculative_algorithm="EAGLE3")
    target, draft, draft_extend = (SimpleNamespace(needs_cpu_seq_lens=n) for n in needs_host_lengths)
    worker._target_worker = SimpleNamespace(model_runner=SimpleNamespace(attn_backend=target))
    worker._draft_worker = SimpleNamespace(init_attention_backends=lambda: None, draft_attn_backend=draft,
                                           draft_extend_attn_backend=draft_extend)
    worker.req_to_token_pool = SimpleNamespace(req_to_token=torch.zeros(POOL, 64, dtype=torch.int32))
    worker.gate_params = ThresholdGateParams(gate_off_above(), speculative_steps=3)
    return worker


@pytest.mark.parametrize("worker, setting, installed", [
    (gated_worker(), None, True),
    # Turned off (args.host_seq_lens_enabled): the scheduler copies lengths as upstream does.
    (gated_worker(), "0", False),
    # Triton and FA3 need no host lengths: the scheduler never copies them, nothing to mirror.
    (gated_worker(needs_host_lengths=(False, False, False)), None, False),
    # PD disaggregation publishes lengths outside the worker: upstream's copy.
    (gated_worker("decode"), None, False),
], ids=["needs host lengths", "turned off", "needs none", "pd disaggregation"])
@pytest.mark.fast_off_path
def test_the_gated_worker_installs_the_mirror_where_the_scheduler_copies_lengths(
        monkeypatch, worker, setting, installed):
    monkeypatch.setattr(host_seq_lens, "mirror", None)
    monkeypatch.delenv(HOST_SEQ_LENS_ENV, raising=False)
    if setting is not None:
        monkeypatch.setenv(HOST_SEQ_LENS_ENV, setting)
    worker.init_attention_backends()
    assert (host_seq_lens.mirror is not None) is installed
    if installed:
        assert host_seq_lens.mirror.known.shape == (POOL,)  # a slot per request-pool row
        assert host_seq_lens.mirror.step_speculates == worker.gate_params.speculates_next


@pytest.mark.parametrize("mode, steps, accepted, known", [
    (ForwardMode.DECODE, PLAIN_STEPS, 1, [11, 21]),
    (ForwardMode.DECODE, 3, 2, None),  # a verify's accept lengths: the host does not know them
    (ForwardMode.EXTEND, 3, 0, [10, 20]),
], ids=["plain step", "speculative step", "prefill"])
def test_the_gated_worker_records_what_each_step_publishes(mirror, monkeypatch, mode, steps, accepted, known):
    # The decode steps are relabelled TARGET_VERIFY, an extend mode, before they publish; they
    # were once recorded as prefills, their lengths frozen (2026-12-02-flashinfer-probe-target).
    monkeypatch.setattr(EAGLEWorkerV2, "forward_batch_generation", publishing_upstream(steps, accepted))
    worker, published, prefills = gated_worker(), [], []
    monkeypatch.setattr(worker.gate_params, "prefill_launched", lambda: prefills.append(mode))
    step = batch([1, 2], [10, 20], mode)
    assert worker.forward_batch_generation(step, on_publish=published.append) == "result"
    assert [t.tolist() for t in published] == [[10 + accepted, 20 + accepted]]  # upstream's publish kept
    assert prefills == ([mode] if mode == ForwardMode.EXTEND else [])  # the auto gate times decodes without them
    looked_up = mirror.lookup(step.req_pool_indices_cpu)
    assert (looked_up.tolist() if looked_up is not None else None) == known


def test_without_a_publish_callback_nothing_is_recorded(mirror, monkeypatch):
    """The scheduler passes on_publish only under the overlap schedule, the only one that resolves."""
    monkeypatch.setattr(EAGLEWorkerV2, "forward_batch_generation", publishing_upstream(PLAIN_STEPS, 1))
    gated_worker().forward_batch_generation(batch([1], [10]))
    assert mirror.lookup(torch.tensor([1])) is None
