"""What a running SGLang server answers over HTTP: health, ``/server_info`` with the gate's
counters, ``/set_internal_state``, ``/start_profile``."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Callable, Optional

GATE_COUNTERS = ("decode_steps_spec", "decode_steps_plain", "switches")

# The gate's host sequence lengths (FlashInfer): batches served from the host, batches that
# waited for the GPU's copy, and lengths the GPU's contradicted (host_seq_lens.py).
HOST_LENGTH_COUNTERS = ("resolved_on_host", "copied_back", "disagreed")


def http_request(url: str, payload: Optional[dict] = None, timeout: float = 30) -> bytes:
    """GET, or POST ``payload`` as JSON; the response body."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def http_json(url: str, payload: Optional[dict] = None, timeout: float = 30) -> dict:
    return json.loads(http_request(url, payload, timeout))


def scheduler_state(url: str) -> dict:
    """The first scheduler's internal state, as /server_info reports it."""
    return (http_json(url + "/server_info").get("internal_states") or [{}])[0]


def gate_snapshot(url: str) -> Optional[dict]:
    return scheduler_state(url).get("spec_gate")


def gate_delta(before: Optional[dict], after: Optional[dict]) -> Optional[dict]:
    """Counter increments between two ``spec_gate`` snapshots; None without a gate. With
    ``host_seq_lens`` where the gate served host lengths."""
    if before is None or after is None:
        return None
    delta = {k: after[k] - before[k] for k in GATE_COUNTERS}
    lengths = before.get("host_seq_lens"), after.get("host_seq_lens")
    if all(lengths):
        delta["host_seq_lens"] = {k: lengths[1][k] - lengths[0][k] for k in HOST_LENGTH_COUNTERS}
    return delta


def reset_accept_length(url: str, note: Callable[[str], None]) -> None:
    # avg_spec_accept_length (the `accept_length` of each row) is a lifetime average;
    # any accepted /set_internal_state resets it, and an empty update changes nothing else.
    try:
        http_json(url + "/set_internal_state", {"server_args": {}})
    except OSError as e:  # URLError, HTTPError and timeouts are all OSErrors
        note(f"# warning: could not reset avg_spec_accept_length: {e}")


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:  # refused, 503 while starting, timeout
        return False


def last_gen_throughput(url: str) -> float:
    """The decode throughput of the scheduler's latest decode log line."""
    return scheduler_state(url).get("last_gen_throughput", 0.0)


def start_profile(url: str, trace_dir: Path, num_steps: Optional[int] = None, host: bool = False) -> None:
    """GPU activity, and with ``host`` CPU activity without Python stacks (SGLang records them by
    default: far more host overhead); without ``num_steps`` until ``/stop_profile``. Answers in
    plain text."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    request = {"output_dir": str(trace_dir), "activities": ["CPU", "GPU"] if host else ["GPU"],
               "with_stack": False, "record_shapes": False}
    if num_steps is not None:
        request["num_steps"] = num_steps
    http_request(url + "/start_profile", request, timeout=60)
