"""SGLang 0.5.17: ServerArgs is a dataclass resolved in ``__post_init__``, and the adaptive
controller builds its own acceptance-EMA policy, which the gate's replaces."""

from __future__ import annotations

import dataclasses

# A private alias: SGLang's class REPLACE rebinds every module-level `ServerArgs`, this
# module's included, to GateServerArgs.
from sglang.srt.server_args import ServerArgs as _UpstreamServerArgs
from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController

from sglang_specgate.args import (GATE_FIELDS, gate_config, gate_field_namespace, require_active_hooks,
                                  resolve_gate_fields, validate_gate_combination)
from sglang_specgate.drafting import CHOSEN_BY_SGLANG_ATTRIBUTE

RELEASE = "0.5.17"
DP_ATTENTION_FLAG = "--enable-dp-attention"
DECODE_GRAPH_MAX_BS_FLAG = "--cuda-graph-max-bs"


@dataclasses.dataclass
class GateServerArgs(_UpstreamServerArgs):
    locals().update(gate_field_namespace())  # the gate's fields (args.GATE_FIELDS)

    def __post_init__(self):
        # Fields are writable until SGLang's resolution materializes them at the end of
        # super().__post_init__(), so the gate's own fields are resolved first. The raw
        # algorithm is read, before SGLang resolves it.
        values, setting = resolve_gate_fields({name: getattr(self, name) for name in GATE_FIELDS},
                                              speculates=self.speculative_algorithm is not None)
        for name, value in values.items():
            setattr(self, name, value)
        if setting.n:
            require_active_hooks(setting)
        # Without --speculative-num-steps SGLang picks all three drafting parameters itself
        # (speculative_hook.py:588-601): tree drafting, topk 4, for Llama targets.
        setattr(self, CHOSEN_BY_SGLANG_ATTRIBUTE, self.speculative_num_steps is None and not self.speculative_adaptive)
        super().__post_init__()
        if setting.n and self.model_path.lower() not in ("none", "dummy"):
            validate_gate_combination(self, setting)

    def gate_config(self):
        return gate_config(self)


def resolve(server_args) -> None:
    """Nothing to do: ``prepare_server_args`` and the constructor resolve (``__post_init__``)."""


def resolved(server_args):
    """The resolved values: the record's own fields."""
    return server_args


def from_command_line(server_args):
    """``prepare_server_args`` has resolved the record already (args.exit_on_config_error)."""
    return server_args


def attention_backends(resolved_args) -> tuple[str, str]:
    return resolved_args.get_attention_backends()


def init_adaptive_controller(controller, worker, policy) -> None:
    """0.5.17's controller takes no policy: it builds upstream's acceptance-EMA params from
    the default config, which the caller replaces with the gate's (the controller only calls
    the methods the gate's policy has: adaptive_runtime_state.py:61-134)."""
    AdaptiveController.__init__(controller, worker)


def why_the_gate_cannot_drive(worker):
    """Nothing in a built 0.5.17 EAGLE worker stops the gate (its validation ran at resolution)."""
    return None
