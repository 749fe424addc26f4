"""SGLang 0.5.23: ServerArgs is a msgspec Struct (``defstruct``, server_args.py:551-563) that
resolution never writes: ``resolve_once`` runs a pipeline of named steps
(arg_groups/pipeline.py) in the launcher, each declaring its decisions
(``declare_resolution``), read back through a view (``resolving_view``). A plugin wraps a step
through ``register_resolution_hook``; the gate's fields are resolved and validated in the
speculative step. The adaptive controller takes its policy as an argument."""

from __future__ import annotations

from sglang.srt.arg_groups.model_override_base import attention_backends_of, resolving_view
from sglang.srt.arg_groups.overrides import declare_resolution
# A private alias: SGLang's class REPLACE rebinds every module-level `ServerArgs`, this
# module's included, to GateServerArgs.
from sglang.srt.server_args import ServerArgs as _UpstreamServerArgs
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController
from sglang.srt.speculative.eagle_worker_v2 import _qsa_index_share_requested

from sglang_specgate.args import (GATE_FIELDS, gate_config, gate_field_namespace, require_active_hooks,
                                  resolve_gate_fields, usage_error_on_config_error, validate_gate_combination)
from sglang_specgate.drafting import CHOSEN_BY_SGLANG_ATTRIBUTE

RELEASE = "0.5.23"
# The flags users name these by (arg_groups/fields/parallel.py:81, exec_.py:629).
DP_ATTENTION_FLAG = "--attn-dp-size > 1 (or the deprecated --enable-dp-attention)"
DECODE_GRAPH_MAX_BS_FLAG = "--cuda-graph-max-bs-decode"
DECLARED_BY = "spec_gate"  # the source of the gate's declarations in the resolution record


class GateServerArgs(_UpstreamServerArgs):
    locals().update(gate_field_namespace())  # the gate's fields (args.GATE_FIELDS)

    def gate_config(self):
        return gate_config(resolving_view(self))

    def resolve_once(self) -> None:
        """Upstream's resolution; on a record from the command line a gate misconfiguration
        ends like an argparse error (from_command_line), as prepare_server_args does on 0.5.17."""
        if not getattr(self, "_gate_errors_are_usage_errors", False):
            return super().resolve_once()
        with usage_error_on_config_error():
            return super().resolve_once()

    def report_config_errors_as_usage(self) -> None:
        # Bookkeeping, not a field: ServerArgs lets underscored names through its seal and
        # pickles them with the record (server_args.py:474-506).
        self._gate_errors_are_usage_errors = True

    def record_drafting_chooser(self, chosen_by_sglang: bool) -> None:
        setattr(self, CHOSEN_BY_SGLANG_ATTRIBUTE, chosen_by_sglang)  # bookkeeping, as above


def resolve_gate(server_args, previous) -> None:
    """``register_resolution_hook("handle_speculative_decoding")``: the gate's fields are
    declared before upstream's speculative step (from the raw algorithm and drafting flags, as
    on 0.5.17) and the combination is validated after it, on what it resolved."""
    if not isinstance(server_args, GateServerArgs):  # built before the plugin loaded: no gate fields
        return previous(server_args)
    cfg = resolving_view(server_args)
    values, setting = resolve_gate_fields({name: getattr(cfg, name) for name in GATE_FIELDS},
                                          speculates=cfg.speculative_algorithm is not None)
    declare_resolution(server_args, DECLARED_BY, **values)
    if setting.n:
        require_active_hooks(setting)
    # Without --speculative-num-steps SGLang picks all three drafting parameters itself.
    server_args.record_drafting_chooser(cfg.speculative_num_steps is None and not cfg.speculative_adaptive)
    previous(server_args)
    if setting.n:  # the pipeline returns before this step for dummy models
        validate_gate_combination(cfg, setting)


def resolve(server_args) -> None:
    server_args.resolve_once()


def resolved(server_args):
    """The resolved values: the record's fields under resolution's declarations."""
    return resolving_view(server_args)


def from_command_line(server_args):
    """``prepare_server_args`` returns the raw record; run_server resolves it later."""
    if isinstance(server_args, GateServerArgs):
        server_args.report_config_errors_as_usage()
    return server_args


def attention_backends(resolved_args) -> tuple[str, str]:
    return attention_backends_of(resolved_args)


def init_adaptive_controller(controller, worker, policy) -> None:
    """0.5.23's controller takes the policy (adaptive_runtime_state.py:52-88)."""
    AdaptiveController.__init__(controller, worker, policy)


def why_the_gate_cannot_drive(worker):
    """What in a built EAGLE worker the gate's state switching would break, or None. 0.5.23 turns
    QSA's MTP index sharing off under --speculative-adaptive, whose state switching the gate
    uses: its per-state index buffers would not match (eagle_worker_v2.py:427-446)."""
    draft = worker._draft_worker
    if draft is not None and _qsa_index_share_requested(draft.draft_runner.model_config.hf_config):
        return ("the draft model asks for QSA's index_share_for_mtp_iteration, which SGLang turns off "
                "only under --speculative-adaptive")
    return None
