"""Where a request's time to first token goes, server side, from SGLang's Prometheus histograms.

With ``--enable-metrics`` SGLang observes, per request:

* ``queue``: the time in the scheduler's waiting queue (``sglang:queue_time_seconds``);
* ``prefill``: from entering a forward batch until the scheduler has processed the result of
  its (last) prefill chunk (``sglang:per_stage_req_latency_seconds{stage="prefill_forward"}``),
  which includes the overlap scheduler's wait for the next batch's launch;
* ``ttft``: the tokenizer manager's time to first token (``sglang:time_to_first_token_seconds``),
  tokenization and the trip back through the detokenizer included.

A histogram's ``_sum`` and ``_count`` read before and after a load level give that level's mean
per request. Where a speculative server's TTFT grows more than its prefill's GPU time, this says
in which stage the difference is.
"""

from __future__ import annotations

from typing import Optional

from prometheus_client.parser import text_string_to_metric_families

STAGES = {
    "queue": ("sglang:queue_time_seconds", {}),
    "prefill": ("sglang:per_stage_req_latency_seconds", {"stage": "prefill_forward"}),
    "ttft": ("sglang:time_to_first_token_seconds", {}),
}

Totals = dict[str, tuple[float, float]]  # stage -> (sum in seconds, count)


def totals(metrics_text: str) -> Totals:
    """Each stage's histogram ``_sum`` and ``_count`` in a ``/metrics`` page, summed over the
    label sets that match the stage (all of them but ``stage``: model name, engine type)."""
    found = {stage: [0.0, 0.0] for stage in STAGES}
    for family in text_string_to_metric_families(metrics_text):
        for stage, (name, labels) in STAGES.items():
            if family.name != name:
                continue
            for sample in family.samples:
                if any(sample.labels.get(k) != v for k, v in labels.items()):
                    continue
                if sample.name == f"{name}_sum":
                    found[stage][0] += sample.value
                elif sample.name == f"{name}_count":
                    found[stage][1] += sample.value
    return {stage: (total, count) for stage, (total, count) in found.items()}


def mean_ms(before: Totals, after: Totals) -> dict[str, Optional[float]]:
    """Each stage's mean per request between two reads, in ms; None where nothing was observed."""
    means = {}
    for stage in STAGES:
        total = after[stage][0] - before[stage][0]
        count = after[stage][1] - before[stage][1]
        means[stage] = 1000 * total / count if count > 0 else None
    return means
