"""What upstream's runtime-state swap leaves behind on every gate switch, kept bounded.

``EAGLEWorkerV2.apply_runtime_state`` (eagle_worker_v2.py:1377-1422) was written for upstream's
adaptive controller; the gate calls it whenever load crosses N, at most twice in every
dwell + 2 decode steps but for as long as the server runs. Each call
- logs "Switch adaptive runtime state: ..." at INFO on rank 0, unthrottled, beside the gate's
  own line, which is rate-limited (observability.SwitchLog);
- appends ``("adaptive_spec.restore", {steps, draft tokens})`` to the RuntimeContext's log of
  config overrides (runtime_context.py:902), which nothing trims and every /server_info walks
  (``resolved_server_args_dict``, :934, from scheduler.py:4168), so the log's memory and each
  walk's time grow with every switch (docs/design.md).
"""

from __future__ import annotations

import logging

from sglang_specgate.runtime_patches import OVERRIDE_LOG, assign_item

UPSTREAM_SWITCH_LOGGER = "sglang.srt.speculative.eagle_worker_v2"
UPSTREAM_SWITCH_LINE = "Switch adaptive runtime state"
RESTORE_OVERRIDE = "adaptive_spec.restore"  # the source name upstream's swap logs under


class _WithoutUpstreamSwitchLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # The unformatted message: upstream builds this one as an f-string, and formatting here,
        # outside logging's error handling, would raise in the caller on a bad format string.
        return not (isinstance(record.msg, str) and record.msg.startswith(UPSTREAM_SWITCH_LINE))


def mute_upstream_switch_line() -> None:
    """Drop upstream's per-switch line from its module's logger; its other lines pass."""
    upstream = logging.getLogger(UPSTREAM_SWITCH_LOGGER)
    if not any(isinstance(f, _WithoutUpstreamSwitchLine) for f in upstream.filters):
        upstream.addFilter(_WithoutUpstreamSwitchLine())


def drop_superseded_restores(context) -> None:
    """Keep only the newest restore entry of ``context``'s override log. Its readers overlay the
    entries in order (runtime_context.py:934, draft_worker_common.py:111-112), and the newest
    sets every field an older restore set, so what they read is unchanged; only the log's
    provenance loses the earlier switches, which the gate counts itself."""
    log = context._overrides_log
    if not log or log[-1][0] != RESTORE_OVERRIDE:
        return
    newest = log[-1][1].keys()
    assign_item(OVERRIDE_LOG, context, "_overrides_log", slice(None, -1),
                [entry for entry in log[:-1] if not (entry[0] == RESTORE_OVERRIDE and entry[1].keys() <= newest)])
