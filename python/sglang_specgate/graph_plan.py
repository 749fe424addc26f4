"""What a gated server captures and reserves, planned from its resolved arguments before any model
loads: for each runtime state the gate switches between, the CUDA graphs upstream captures for it
(runner, decode batch sizes, tokens a request, forwards a replay), and the KV cache each running
request holds in reserve for a decode step. /server_info shows it (``graph_plan``) beside what
building the extra states measured (``states_built``), and ``doctor`` prints it.

A tree (topk K, D draft tokens) widens the speculative state's verify and draft extend to D tokens
a request and its draft decode to K, and its reservation to 2·max(S·K, D); the off state stays one
token a request, but its draft KV write graph is captured up to D decode batches
(deferred_draft_kv.write_sizes). Bytes and seconds are the GPU's to measure, and so is where an
attention backend's memory caps the write rows (one_token_decode.most_write_rows, FA3's by the
model's context length): the off state's ``deferred_draft_kv.write_rows`` shows what was captured.
"""

from __future__ import annotations

from typing import Iterable

from sglang_specgate.args import decode_graph_config
from sglang_specgate.deferred_draft_kv import write_sizes
from sglang_specgate.drafting import Drafting

TARGET_VERIFY, DRAFT_DECODE, DRAFT_EXTEND = "target verify", "draft decode", "draft extend"
NO_GRAPHS = "disabled"  # the decode CUDA-graph backend that captures none


def decode_graph_sizes(resolved) -> tuple[int, ...]:
    """The decode batch sizes upstream captures graphs at: the configured ones, clamped to the
    request pool as get_batch_sizes_to_capture does (base_cuda_graph_runner.py:61-99), the pool
    taken as --max-running-requests; none without decode graphs."""
    decode = decode_graph_config(resolved)
    if resolved.disable_cuda_graph or decode is None or decode.backend == NO_GRAPHS:
        return ()
    pool = resolved.max_running_requests
    sizes = set(decode.bs)
    if pool and max(sizes) > pool:
        sizes = {b for b in sizes if b <= pool} | {pool}
    return tuple(sorted(sizes))


def _graph(runner: str, batch_sizes: Iterable[int], tokens_per_request: int, forwards: int = 1) -> dict:
    return {"runner": runner, "batch_sizes": sorted(batch_sizes), "tokens_per_request": tokens_per_request,
            "forwards": forwards}


def state_graphs(steps: int, drafting: Drafting, batch_sizes: tuple[int, ...], deferred_writes: bool) -> list[dict]:
    """The graphs of the state that runs ``steps`` draft steps. The server's own state verifies
    D tokens a request; an auto candidate of k steps (chains only) k + 1; the off state (0) one,
    and captures no draft decode (draft_utils.py:60-63), as a state of one step does not
    (eagle_worker_v2.py:359). ``deferred_writes``: the off state's draft extend also takes the
    buffered writes' sizes (deferred_draft_kv.capture_write_sizes, at the server's width D)."""
    if not batch_sizes:
        return []
    if steps == 0:
        extend = [*batch_sizes, *write_sizes(max(batch_sizes), drafting.num_draft_tokens)] if deferred_writes \
            else batch_sizes
        return [_graph(TARGET_VERIFY, batch_sizes, 1), _graph(DRAFT_EXTEND, extend, 1)]
    width = drafting.num_draft_tokens if steps == drafting.num_steps else steps + 1
    decode = [_graph(DRAFT_DECODE, batch_sizes, drafting.topk, forwards=steps - 1)] if steps > 1 else []
    return [_graph(TARGET_VERIFY, batch_sizes, width), *decode, _graph(DRAFT_EXTEND, batch_sizes, width)]


def graph_plan(drafting: Drafting, batch_sizes: tuple[int, ...], candidates: Iterable[int], *,
               deferred_writes: bool) -> dict:
    """The plan of a gated server that switches between the states of ``candidates`` (draft step
    counts). Each decode step reserves 2·max(S·K, D) KV slots a request at one token a page
    (allocation_sizing.py:9-43, from the server's static arguments, so off steps too)."""
    reserved = 2 * max(drafting.num_steps * drafting.topk, drafting.num_draft_tokens)
    return {"kv_reserved_tokens_per_request": reserved,
            "states": [{"draft_steps": k, "graphs": state_graphs(k, drafting, batch_sizes, deferred_writes)}
                       for k in sorted(candidates, reverse=True)]}


def described(plan: dict) -> list[str]:
    """The plan in a line a state, for ``doctor``."""

    def graph(g: dict) -> str:
        sizes = g["batch_sizes"]
        tokens = g["tokens_per_request"]
        forwards = f" x {g['forwards']} forwards" if g["forwards"] > 1 else ""
        return (f"{g['runner']} at {len(sizes)} batch sizes {sizes[0]}..{sizes[-1]}, "
                f"{tokens} token{'s' if tokens > 1 else ''} a request{forwards}")

    return [f"draft steps {state['draft_steps']}: " + ("; ".join(map(graph, state["graphs"])) or "no CUDA graphs")
            for state in plan["states"]]
