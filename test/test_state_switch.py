"""Gate switches through upstream's real EAGLEWorkerV2.apply_runtime_state leave no growing
trace: its config override is kept once, its per-switch INFO line is muted. The worker is a
bare GatedEAGLEWorkerV2 carrying only the attributes that swap touches (building one needs a
GPU); the RuntimeContext is SGLang's own, with a config published by its test override."""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace

import pytest
from sglang.srt.runtime_context import get_context
from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

from sglang_specgate import state_switch
from sglang_specgate.worker import PLAIN_STEPS, GatedEAGLEWorkerV2


def runtime_state(steps: int) -> SpecRuntimeState:
    resources = dict.fromkeys(
        ("draft_attn_backend", "cuda_graph_runner", "target_attn_backend", "target_graph_runner",
         "draft_extend_attn_backend", "cuda_graph_runner_for_draft_extend"))
    return SpecRuntimeState(speculative_num_steps=steps, speculative_num_draft_tokens=steps + 1, **resources)


def bare_worker(steps: int) -> GatedEAGLEWorkerV2:
    worker = object.__new__(GatedEAGLEWorkerV2)
    worker.speculative_num_steps, worker.speculative_num_draft_tokens = steps, steps + 1
    worker._draft_worker = SimpleNamespace(draft_runner=SimpleNamespace(), _rebuild_topk1_chain_buffers=lambda: None)
    worker._target_worker = SimpleNamespace(model_runner=SimpleNamespace())
    return worker


@pytest.fixture
def published_config():
    with get_context().override_server_args(speculative_num_steps=3, speculative_num_draft_tokens=4):
        yield get_context()


def restores(context) -> list:
    return [fields for source, fields in context.overrides_log() if source == state_switch.RESTORE_OVERRIDE]


def test_switching_keeps_one_restore_override_and_the_resolved_config_follows(published_config):
    worker, states = bare_worker(3), {3: runtime_state(3), PLAIN_STEPS: runtime_state(PLAIN_STEPS)}
    entries_before = len(published_config.overrides_log())
    for _ in range(500):
        for steps in (PLAIN_STEPS, 3, PLAIN_STEPS):
            worker.apply_runtime_state(states[steps])
            resolved = published_config.resolved_server_args_dict()
            assert resolved["speculative_num_steps"] == worker.speculative_num_steps == steps
            assert resolved["speculative_num_draft_tokens"] == steps + 1
        worker.apply_runtime_state(states[3])
    assert restores(published_config) == [{"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}]
    assert len(published_config.overrides_log()) == entries_before + 1


def test_other_overrides_stay_in_place(published_config):
    worker = bare_worker(3)
    worker.apply_runtime_state(runtime_state(PLAIN_STEPS))
    published_config.override("test.other", speculative_num_draft_tokens=7)
    worker.apply_runtime_state(runtime_state(3))
    assert [source for source, _ in published_config.overrides_log()][-2:] == ["test.other", state_switch.RESTORE_OVERRIDE]
    assert published_config.resolved_server_args_dict()["speculative_num_draft_tokens"] == 4


def test_upstream_swap_still_logs_and_records_what_state_switch_names():
    source = inspect.getsource(EAGLEWorkerV2.apply_runtime_state)
    assert f'"{state_switch.UPSTREAM_SWITCH_LINE}: "' in source
    assert f'"{state_switch.RESTORE_OVERRIDE}"' in source
    assert EAGLEWorkerV2.__module__ == state_switch.UPSTREAM_SWITCH_LOGGER


def test_upstream_switch_line_is_muted_and_its_other_lines_pass(caplog):
    upstream = logging.getLogger(state_switch.UPSTREAM_SWITCH_LOGGER)
    filters = list(upstream.filters)
    try:
        state_switch.mute_upstream_switch_line()
        state_switch.mute_upstream_switch_line()  # every gated worker's start asks again
        assert len(upstream.filters) == len(filters) + 1
        with caplog.at_level(logging.INFO, logger=state_switch.UPSTREAM_SWITCH_LOGGER):
            upstream.info("Switch adaptive runtime state: steps 3 -> 0, draft_tokens 4 -> 1")
            upstream.info("Built adaptive runtime state steps=0: elapsed=3.81s, mem=0.31GB")
        assert [r.getMessage() for r in caplog.records] == [
            "Built adaptive runtime state steps=0: elapsed=3.81s, mem=0.31GB"]
        # A call whose arguments do not fit its format: logging reports that itself, and the
        # filter, which runs outside logging's error handling, must not raise it in the caller.
        bad_call = upstream.makeRecord(upstream.name, logging.INFO, __file__, 0, "bad %d", ("x",), None)
        assert upstream.filters[-1].filter(bad_call)
    finally:
        upstream.filters[:] = filters
