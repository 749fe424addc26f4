"""The gate on a real GPU through real SGLang (short forms of the issue-3 acceptance checks).

Greedy decoding on the generated pair is exact (its logits are separated by ~sqrt(hidden)) and
known in advance (the pair's walk, Design.continuation in benchmark/pairs/design.py), so plain,
always-on, gated (chain or tree drafting) and TP=2 gated servers must each emit it token for
token, hence agree with each other; the load ramps across the threshold while long requests are
running, so their lifetimes span gate switches.
"""

from __future__ import annotations

import json
import os
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from benchmark.servers.endpoints import http_json
from benchmark.servers.launch import wait_for
from servers import ATTENTION_BACKEND, KV_PROBE_OFFSET, SPEC_FLAGS, THRESHOLD, TREE_FLAGS, ramping_load
from sglang_specgate.args import host_seq_lens_enabled
from sglang_specgate.reenable import WINDOW_STEPS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

# The full check is >= 200 requests: SPECGATE_GPU_BURSTS=10 gives 204.
BURSTS = int(os.environ.get("SPECGATE_GPU_BURSTS", "3"))
N_PROMPTS = 4 + BURSTS * 20
# The long requests must outlive every burst (ramping_load checks): ~0.6 s of bursts and gaps
# each on an H200 with the 1B pair, while speculation emits ~2 tokens per step.
LONG_TOKENS = min(7000, 1000 + 600 * BURSTS)
SHORT_TOKENS = 48


def prompts(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 32000) for _ in range(rng.randrange(16, 200))] for _ in range(N_PROMPTS)]


@pytest.fixture(scope="module")
def gated(start_server):
    return start_server("gated", spec=True, extra=(
        "--speculative-disable-batch-threshold", str(THRESHOLD),
        "--speculative-gate-dwell-steps", "4", "--enable-metrics"))


def greedy_run(server, load_prompts: list[list[int]]) -> list[list[int]]:
    results = ramping_load(server, load_prompts, long_tokens=LONG_TOKENS, short_tokens=SHORT_TOKENS,
                           bursts=BURSTS, temperature=0.0, ignore_eos=True)
    return [r["output_ids"] for r in results]


def designed_outputs(design, load_prompts: list[list[int]]) -> list[list[int]]:
    """What greedy_run must return: each prompt's continuation along the pair's walk, in the
    order ramping_load returns them (the four long requests first)."""
    return [design.continuation(p[-1], LONG_TOKENS if i < 4 else SHORT_TOKENS)
            for i, p in enumerate(load_prompts)]


@pytest.fixture(scope="module")
def designed_greedy(design) -> list[list[int]]:
    return designed_outputs(design, prompts())


def mismatches(outputs: list[list[int]], expected: list[list[int]]) -> list[str]:
    """Each request whose output is not the expected one: its index, the first token where they
    part, and both lengths (when the first wrong token came says which state produced it)."""
    assert len(outputs) == len(expected) == N_PROMPTS
    parted = []
    for i, (got, want) in enumerate(zip(outputs, expected)):
        if got != want:
            first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            parted.append(f"#{i} from token {first} ({len(got)} of {len(want)})")
    return parted


@pytest.fixture(scope="module")
def gated_greedy(gated) -> list[list[int]]:
    return greedy_run(gated, prompts())


@pytest.fixture(scope="module")
def greedy_outputs(start_server, gated_greedy):
    outputs = {"gated": gated_greedy}
    for name, spec in (("plain", False), ("spec", True)):
        server = start_server(name, spec=spec)
        try:
            outputs[name] = greedy_run(server, prompts())
        finally:
            server.stop()  # free the GPU for the next one
    return outputs


def test_greedy_outputs_identical(greedy_outputs, designed_greedy):
    # Each server against the pair's designed output, which makes them identical to each other
    # and to the TP=2 server of the last test.
    for name, outputs in greedy_outputs.items():
        mismatched = mismatches(outputs, designed_greedy)
        assert not mismatched, f"{name} differs from the designed output: {mismatched[:20]}"


def assert_host_lengths_agreed(state: dict) -> None:
    # FlashInfer plans on host lengths: after plain steps the gate supplies them (host_seq_lens.py)
    # unless the servers' environment turns that off.
    if ATTENTION_BACKEND == "flashinfer" and host_seq_lens_enabled():
        assert state["host_seq_lens"]["resolved_on_host"] > 0, state
        assert state["host_seq_lens"]["disagreed"] == 0, state  # the GPU's lengths at every check (one batch in 8)
    else:
        assert state["host_seq_lens"] is None, state


def test_gate_switched_during_the_run(gated_greedy, gated):
    state = gated.gate_state()
    print("gate state after the greedy run:", json.dumps(state))  # the figures, with -s
    assert state["fast_off_path"] is True
    assert state["off_draft_extend"] == "kv-store"  # bf16 KV: the last attention only stores (kv_only_draft.py)
    # Plain steps buffered their draft-extend rows and wrote them together (deferred_draft_kv.py).
    deferred = state["deferred_draft_kv"]
    assert deferred["writes"] > 0 and deferred["rows_written"] > deferred["writes"], deferred
    assert state["switches"] >= 2, state  # off in a burst, on again after it drained
    assert state["decode_steps_spec"] > 0 and state["decode_steps_plain"] > 0
    assert_host_lengths_agreed(state)
    # Acceptance is back to its pre-off level within 10 speculative steps. This pair's draft
    # ignores its KV cache (o_proj = 0), so that only shows the first steps' recovery; whether
    # the KV cache was kept current is the KV-probe tests' question.
    episodes = state["reenable_acceptance"]["recent"]
    assert episodes, state
    for episode in episodes:
        assert episode["steps_to_recover"] is not None, episode
    # Switches log the gate's rate-limited line only: upstream's own line for each swap is muted
    # (state_switch.py). The gate's line shows this is the log the switches went to.
    log = gated.log.read_text()
    assert "spec gate: speculation off" in log
    assert "Switch adaptive runtime state" not in log


def walk_prompts(design, seed: int = 2) -> list[list[int]]:
    """Prompts along the pair's walk, at least KV_PROBE_OFFSET + 1 tokens: the KV probe's heads
    cancel only where the context follows the walk (benchmark/pairs/weights.py, add_kv_probe)."""
    rng = random.Random(seed)
    starts = [int(design.walk_tokens[rng.randrange(len(design.walk_tokens))]) for _ in range(N_PROMPTS)]
    return [[t] + design.continuation(t, rng.randrange(KV_PROBE_OFFSET, 200)) for t in starts]


def probe_reenables(start_server, probe_pair, probe_design, name: str, env=None,
                    drafting: list[str] = SPEC_FLAGS) -> list[dict]:
    """Greedy ramping load on the KV-probe pair; the re-enable episodes the gate recorded."""
    server = start_server(name, spec=True, pair=probe_pair, env=env, drafting=drafting, extra=(
        "--speculative-disable-batch-threshold", str(THRESHOLD), "--speculative-gate-dwell-steps", "4"))
    load_prompts = walk_prompts(probe_design)
    try:
        outputs = greedy_run(server, load_prompts)
        state = server.gate_state()
    finally:
        server.stop()
    print(name, "re-enables:", json.dumps(state["reenable_acceptance"]),  # before a failure, too
          "deferred draft KV:", json.dumps(state["deferred_draft_kv"]),
          "host lengths:", json.dumps(state["host_seq_lens"]))
    mismatched = mismatches(outputs, designed_outputs(probe_design, load_prompts))
    assert not mismatched, f"{name} differs from the designed output: {mismatched[:20]}"
    assert_host_lengths_agreed(state)
    episodes = [e for e in state["reenable_acceptance"]["recent"] if len(e["after"]) == WINDOW_STEPS]
    assert episodes, f"no re-enable with {WINDOW_STEPS} speculative steps after it: {state}"
    return episodes


def assert_warm_reenables(episodes: list[dict]) -> None:
    for episode in episodes:
        assert episode["before"] >= 1.5, episode  # the probe pair speculates as designed
        assert episode["steps_to_recover"] is not None, episode  # within WINDOW_STEPS = 10


def test_reenable_is_warm_for_a_draft_that_reads_its_kv_cache(start_server, probe_pair, probe_design):
    # The long requests decode a whole burst (48 tokens) with speculation off; right after
    # re-enabling, their draft reads entries KV_PROBE_OFFSET back that were written while off.
    assert_warm_reenables(probe_reenables(start_server, probe_pair, probe_design, "probe-gated"))


@pytest.mark.parametrize("name, spec", [("probe-plain", False), ("probe-spec", True)])
def test_ungated_servers_emit_the_probe_design(start_server, probe_pair, probe_design, name, spec):
    # The controls for the probe tests' exact outputs: the same load on upstream's plain decode
    # and on always-on EAGLE-3. A mismatch here is upstream's or the attention backend's, not
    # the gate's.
    server = start_server(name, spec=spec, pair=probe_pair)
    load_prompts = walk_prompts(probe_design)
    try:
        outputs = greedy_run(server, load_prompts)
    finally:
        server.stop()
    mismatched = mismatches(outputs, designed_outputs(probe_design, load_prompts))
    assert not mismatched, f"{name} differs from the designed output: {mismatched[:20]}"


def test_kv_probe_sees_a_stale_draft_kv_cache(start_server, probe_pair, probe_design):
    # The control: upstream's switch that skips the off state's draft extend leaves those
    # entries unwritten, and acceptance stays low for about KV_PROBE_OFFSET steps, past the window.
    episodes = probe_reenables(start_server, probe_pair, probe_design, "probe-gated-cold",
                               env={"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "1"})
    assert any(e["steps_to_recover"] is None for e in episodes), episodes


# Long enough to hold the gate off while the probe prompts are prefilled one by one.
HOLD_TOKENS = 400
# Reads KV_PROBE_OFFSET back stay inside such a prompt for its first speculative steps.
MIN_CACHED_PROMPT = 40
CACHED_PROMPT_TOKENS = 24


def test_prompts_prefilled_while_off_leave_a_warm_draft_kv_cache(start_server, probe_pair, probe_design):
    # Prompts prefilled while off hand their draft KV rows to the deferred buffer instead of
    # running the draft over them. Their cached prefixes must then serve the same prompts sent
    # again with speculation on: the probe draft reads entries KV_PROBE_OFFSET back, inside the
    # cached prompt for its first speculative steps, and accepts only if they are right.
    server = start_server("probe-prompts-off", spec=True, pair=probe_pair, extra=(
        "--speculative-disable-batch-threshold", str(THRESHOLD), "--speculative-gate-dwell-steps", "4"))
    probes = [p for p in walk_prompts(probe_design) if len(p) >= MIN_CACHED_PROMPT][:4]
    holders = walk_prompts(probe_design, seed=3)[: 2 * THRESHOLD]
    greedy = {"temperature": 0.0, "ignore_eos": True}
    try:
        with ThreadPoolExecutor(max_workers=len(holders)) as pool:
            held = [pool.submit(server.generate, p, max_new_tokens=HOLD_TOKENS, **greedy) for p in holders]
            # Polled often: the holders keep the gate off for only a few seconds.
            assert wait_for(lambda: not server.gate_state()["active"], timeout=30, poll_s=0.01), \
                "the gate never turned off"
            before = server.gate_state()["deferred_draft_kv"]["prompt_rows"]
            for p in probes:
                server.generate(p, max_new_tokens=1, **greedy)
            prompt_rows = server.gate_state()["deferred_draft_kv"]["prompt_rows"] - before
            assert not any(f.done() for f in held), "the gate may have been on during the prefills"
            [f.result() for f in held]
        again = [server.generate(p, max_new_tokens=CACHED_PROMPT_TOKENS, **greedy) for p in probes]
    finally:
        server.stop()
    accept = [r["meta_info"].get("spec_accept_length") for r in again]
    print("prompt rows buffered while off:", prompt_rows, "accept length on the cached prompts:", accept)
    assert prompt_rows >= sum(len(p) for p in probes) // 2  # most of the prompts, not cached before
    assert [r["output_ids"] for r in again] == [
        probe_design.continuation(p[-1], CACHED_PROMPT_TOKENS) for p in probes]
    # Four plain steps (the dwell), then about 2.2 tokens a step if the cached draft KV is right;
    # about 1.2 over the request if the prompt's entries were wrong.
    assert all(a is not None and a >= 1.5 for a in accept), accept


def test_logprob_requests_while_off(gated, design):
    # Requests asking for logprobs while the gate is off: their one-token verify returns logprobs
    # too, and its rows join the deferred draft KV like any other; tokens must stay exact, and
    # each logprob must be its own request's at its own token.
    load = prompts(seed=3)[: 3 * THRESHOLD]  # all at once: the batch is above N, the gate off
    before = gated.gate_state()["decode_steps_plain"]

    def request(prompt: list[int]) -> dict:
        sampling = {"max_new_tokens": SHORT_TOKENS, "temperature": 0.0, "ignore_eos": True}
        return http_json(gated.url + "/generate", {"input_ids": prompt, "return_logprob": True,
                                                          "sampling_params": sampling}, timeout=600)

    with ThreadPoolExecutor(max_workers=len(load)) as pool:
        results = list(pool.map(request, load))
    assert gated.gate_state()["decode_steps_plain"] > before
    assert [r["output_ids"] for r in results] == [design.continuation(p[-1], SHORT_TOKENS) for p in load]
    # The pair's right token has a logit of about sqrt(hidden_size) and every other token exactly
    # 0 (model_pair.py), so its logprob is about 0, and a logprob read from another request's row
    # or another step's, at this token, about -sqrt(hidden_size).
    for r in results:
        logprobs = r["meta_info"]["output_token_logprobs"]  # (logprob, token id, text) a token
        assert [token for _, token, _ in logprobs] == r["output_ids"]
        assert min(logprob for logprob, _, _ in logprobs) > -1e-3, logprobs


@pytest.fixture(scope="module")
def sampled_results(gated):
    return ramping_load(gated, prompts(seed=1), long_tokens=LONG_TOKENS, short_tokens=40, bursts=BURSTS,
                        temperature=0.8, top_p=0.95, ignore_eos=True)


def test_sampled_requests_complete_with_exact_lengths(sampled_results):
    lengths = sorted(len(r["output_ids"]) for r in sampled_results)
    assert lengths.count(LONG_TOKENS) == 4
    assert set(lengths[:-4]) == {40}


def metric_total(text: str, name: str, *labels: str) -> float:
    """The sum of a metric's samples in Prometheus text whose labels include ``labels``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(label in line for label in labels))


def test_prometheus_metrics(sampled_results, gated):
    # Read after the load: the state first, answered by the scheduler between batches, so the
    # last decode result has been reported; idle, the metrics then hold what the state does.
    state = gated.gate_state()
    text = gated.get("/metrics")
    assert state["switches"] >= 2 and state["decode_steps_plain"] > 0 and state["decode_steps_spec"] > 0
    assert metric_total(text, "sglang:spec_gate_switches_total") == state["switches"]
    assert metric_total(text, "sglang:spec_gate_decode_steps_total", 'mode="plain"') == state["decode_steps_plain"]
    assert metric_total(text, "sglang:spec_gate_decode_steps_total", 'mode="spec"') == state["decode_steps_spec"]
    assert metric_total(text, "sglang:spec_gate_active") == (1 if state["active"] else 0)


def test_auto_gate_measures_its_costs_and_keeps_greedy_outputs(start_server, servers, designed_greedy):
    # Alone on the GPU, so its calibration times its graphs without another server's load.
    for server in servers:
        server.stop()
    auto = start_server("auto", spec=True, extra=("--speculative-disable-batch-threshold", "auto",
                                                  "--enable-metrics"))
    try:
        mismatched = mismatches(greedy_run(auto, prompts()), designed_greedy)
        state = auto.gate_state()
        metrics = auto.get("/metrics")
    finally:
        auto.stop()
    print("auto gate state after the greedy run:", json.dumps(state))  # the figures, with -s
    assert not mismatched, f"auto differs from the designed output: {mismatched[:20]}"
    assert state["threshold"] == "auto" and state["candidates"] == [0, 1, 2, 3]
    table = state["cost_table"]
    assert table["batch_sizes"] and all(c > 0 for row in table["costs"].values() for c in row)
    # A step verifying four tokens a request costs more than one verifying one, at every size.
    assert all(s > p for s, p in zip(table["costs"]["3"], table["costs"]["0"])), table
    assert state["calibration_s"] > 0 and state["states_built"]["states"] == [0, 1, 2, 3]
    assert sum(state["decode_steps"].values()) + state["probes"] > 0
    # Rank 0 timed the live steps, and the gate decided on its factors after the first sync
    # (the greedy run has over a thousand decode steps).
    assert state["live_costs"]["samples"] > 0 and state["live_factors"] is not None, state["live_costs"]
    assert metric_total(metrics, "sglang:spec_gate_draft_steps") == state["draft_steps"]


TREE_DRAFTING = {"shape": "tree", "topk": 4, "num_steps": 5, "num_draft_tokens": 8, "chosen_by": "user"}


@pytest.mark.fast_off_path  # trees are gated on the releases the fast off path runs on only
@pytest.mark.parametrize("name, gated", [("tree-gated", True), ("tree-spec", False)])
def test_tree_drafting_keeps_greedy_outputs_across_switches(start_server, designed_greedy, name, gated):
    # Tree drafting (topk 4, 8 draft tokens) gated both ways under the ramping load, and always on
    # as the control: a mismatch there is upstream's tree, not the gate's. The design is what the
    # plain server emits (test_greedy_outputs_identical).
    gate = ("--speculative-disable-batch-threshold", str(THRESHOLD), "--speculative-gate-dwell-steps", "4")
    server = start_server(name, spec=True, drafting=TREE_FLAGS, extra=gate if gated else ())
    try:
        mismatched = mismatches(greedy_run(server, prompts()), designed_greedy)
        state = server.gate_state()
    finally:
        server.stop()
    print(name, "gate state after the greedy run:", json.dumps(state))  # the figures, with -s
    assert not mismatched, f"{name} differs from the designed output: {mismatched[:20]}"
    if not gated:
        return
    assert state["drafting"] == TREE_DRAFTING and state["fast_off_path"] is True, state
    assert state["switches"] >= 2 and state["decode_steps_spec"] > 0 and state["decode_steps_plain"] > 0, state
    assert_host_lengths_agreed(state)


@pytest.mark.fast_off_path
def test_tree_drafting_reenables_warm_for_a_draft_that_reads_its_kv_cache(start_server, probe_pair, probe_design):
    # As the chain's test: the first tree steps after an off period draft from KV written while off.
    assert_warm_reenables(probe_reenables(start_server, probe_pair, probe_design, "probe-tree-gated",
                                          drafting=TREE_FLAGS))


def tensor_parallel_size() -> int:
    """Every visible GPU, rounded down to a power of two up to 8 (the pair's 8 KV heads must
    split evenly): 2 on the 2-GPU host, 8 on the 8-GPU one, 0 without CUDA."""
    return min(8, 1 << (torch.cuda.device_count().bit_length() - 1)) if torch.cuda.is_available() else 0


@pytest.mark.skipif("tensor_parallel_size() < 2")
def test_tensor_parallel_matches_single_gpu(start_server, servers, designed_greedy):
    # Same designed output as the TP=1 servers above. SGLang refuses a TP group whose GPUs have
    # unequal free memory ("The memory capacity is unbalanced", distributed/bootstrap.py), so
    # whatever this module started on GPU 0 goes first.
    for server in servers:
        server.stop()
    tp = tensor_parallel_size()
    gated_tp = start_server(f"gated-tp{tp}", spec=True, tp=tp, extra=(
        "--speculative-disable-batch-threshold", str(THRESHOLD), "--speculative-gate-dwell-steps", "4"))
    mismatched = mismatches(greedy_run(gated_tp, prompts()), designed_greedy)
    assert not mismatched, f"TP={tp} differs from the designed output: {mismatched[:20]}"
    assert gated_tp.gate_state()["switches"] >= 2
