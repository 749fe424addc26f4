"""The gate's ServerArgs fields: declaration, environment precedence and validation.

Each supported SGLang release has a ``GateServerArgs`` (sglang_versions/) that subclasses its
ServerArgs with the fields declared here (GATE_FIELDS) and replaces it through the plugin hook
registry (see hooks.py), so the fields behave like native ones: CLI flags in ``--help``,
``--config`` YAML keys, ``sglang.Engine`` kwargs, ``/server_info``, and pickling into the
scheduler processes all come from SGLang's own argument machinery. What they resolve to and
which combinations are refused is decided here, the same on every release; the release's
adapter only says when (0.5.17: in ``__post_init__``; 0.5.23: in its resolution pipeline).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Callable, List, Optional, Union

from sglang.srt.arg_groups.arg_utils import A, Arg, NS

from sglang_specgate.auto_policy import AutoGateConfig
from sglang_specgate.drafting import CHAIN_FLAGS, TREE, drafting_of, tree_candidates, tree_refusal
from sglang_specgate.policy import GateConfig
from sglang_specgate.threshold_setting import (AUTO, THRESHOLD_ENV, THRESHOLD_FLAG, ThresholdSetting, parse_count,
                                               parse_threshold, threshold_setting)

logger = logging.getLogger(__name__)

DWELL_FLAG = "--speculative-gate-dwell-steps"
REENABLE_FLAG = "--speculative-gate-reenable-threshold"
CANDIDATES_FLAG = "--speculative-gate-candidate-steps"
HOST_SEQ_LENS_ENV = "SGLANG_SPEC_GATE_HOST_SEQ_LENS"
FA3_OFF_PATH_ENV = "SGLANG_SPEC_GATE_FA3_OFF_PATH"
DEFAULT_DWELL_STEPS = 8
GATED_ALGORITHMS = ("EAGLE", "EAGLE3")
# The --attention-backend values whose backends the fast off path runs on (their classes are
# one_token_decode.DECODE_PATHS); on others, off steps run upstream's steps-0 kernels.
FAST_OFF_PATH_ATTENTION_BACKENDS = ("triton", "flashinfer")
FAST_OFF_PATH_FIX = "--attention-backend " + " or ".join(FAST_OFF_PATH_ATTENTION_BACKENDS)
# FA3's decode path for the off state (one_token_decode.DECODE_PATHS), unless FA3_OFF_PATH_ENV
# turns it off.
FA3 = "fa3"
# The decode CUDA-graph backend whose graphs the auto gate's calibration replays.
FULL_DECODE_GRAPHS = "full"


class SpecGateConfigError(ValueError):
    """A gate setting that cannot work; the message names the flag and the fix."""


def non_negative_int(value: object, source: str) -> int:
    """``parse_count`` with errors that name ``source`` (a flag, kwarg or env variable)."""
    try:
        return parse_count(value)
    except ValueError as e:
        raise SpecGateConfigError(f"{source} {e}.") from None


def _argparse_type(parse: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse ``type=`` from a parser raising ValueError: argparse prefixes the flag and
    exits with a usage error."""

    def parse_for_argparse(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse_for_argparse


def parse_candidate_steps(value: object) -> list[int]:
    """Draft step counts from ``"0,1,3"`` (CLI, YAML, env-style text) or a sequence of counts
    (an Engine kwarg, or a value resolved before)."""
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, (list, tuple)) and items:
        try:
            return [parse_count(item) for item in items]
        except ValueError:
            pass
    raise ValueError(f"must be draft step counts separated by commas, such as 0,1,3; got {value!r}")


# The gate's ServerArgs fields, declared once: each release's GateServerArgs (sglang_versions/)
# takes them as its own annotated fields with these defaults, so SGLang's argument machinery
# gives them a CLI flag, --help, a --config key, an Engine kwarg and a place in /server_info.
GATE_FIELDS = {
    "speculative_disable_batch_threshold": (A[
        Union[int, str, None],
        Arg(
            help=(
                "Speculate (EAGLE/EAGLE3) while the decode batch has <= N requests and decode "
                "plainly while it has more; speculation resumes once the batch has stayed "
                f"<= the re-enable threshold for {DWELL_FLAG} steps. 0 or unset: never "
                f"disable. '{AUTO}': each decode step runs the draft steps (0 = plain, up to "
                "--speculative-num-steps) with the highest expected tokens per second, from a "
                "cost table measured at start-up and live acceptance. Env: "
                f"{THRESHOLD_ENV} (an explicit flag, kwarg or YAML value wins). Chain or tree "
                "drafting; a tree (--speculative-eagle-topk > 1) needs --page-size 1 and triton or "
                "flashinfer attention."
            ),
            type_parser=_argparse_type(parse_threshold),
            resolvable=True,
        ),
        NS("spec"),
    ], None),
    "speculative_gate_dwell_steps": (A[
        int,
        Arg(
            help=(
                "Consecutive decode steps the batch must stay <= the re-enable threshold "
                f"before speculation resumes (anti-flapping). Default {DEFAULT_DWELL_STEPS}."
            ),
            type_parser=_argparse_type(parse_count),
            resolvable=True,
        ),
        NS("spec"),
    ], DEFAULT_DWELL_STEPS),
    "speculative_gate_reenable_threshold": (A[
        Optional[int],
        Arg(
            help=(
                "Resume speculation only when the decode batch is <= this many requests "
                f"(hysteresis), from 1 to {THRESHOLD_FLAG}. Default: that threshold."
            ),
            type_parser=_argparse_type(parse_count),
            resolvable=True,
        ),
        NS("spec"),
    ], None),
    "speculative_gate_candidate_steps": (A[
        Optional[List[int]],
        Arg(
            help=(
                f"With {THRESHOLD_FLAG} {AUTO}: the draft step counts it chooses from, e.g. 0,1,3 "
                "(0 = plain decoding; each is a runtime state captured at start-up). Default: "
                "every count from 0 to --speculative-num-steps; with tree drafting 0 and "
                "--speculative-num-steps, the only ones it takes."
            ),
            type_parser=_argparse_type(parse_candidate_steps),
            resolvable=True,
        ),
        NS("spec"),
    ], None),
}


def gate_field_namespace() -> dict:
    """GATE_FIELDS as a class body holds them: ``locals().update(gate_field_namespace())`` in a
    ServerArgs subclass's body declares them for dataclasses and msgspec Structs alike."""
    return {"__annotations__": {name: annotation for name, (annotation, _) in GATE_FIELDS.items()},
            **{name: default for name, (_, default) in GATE_FIELDS.items()}}


def resolve_gate_fields(given: dict, speculates: bool) -> tuple[dict, ThresholdSetting]:
    """The gate's fields as resolution leaves them, from the values ``given`` (a flag, YAML key
    or kwarg; None where unset) and the environment, and where the threshold came from.
    ``speculates``: an algorithm was given (read before SGLang resolves it; SGLang never sets
    one where none was given)."""
    host_seq_lens_enabled()  # read again in the scheduler processes; garbage fails here first
    fa3_off_path_enabled()
    setting = _threshold_setting(given["speculative_disable_batch_threshold"], speculates)
    dwell = non_negative_int(given["speculative_gate_dwell_steps"], DWELL_FLAG)
    reenable = given["speculative_gate_reenable_threshold"]
    if reenable is not None:
        reenable = non_negative_int(reenable, REENABLE_FLAG)
    candidates = given["speculative_gate_candidate_steps"]
    if candidates is not None:
        try:
            candidates = parse_candidate_steps(candidates)
        except ValueError as e:
            raise SpecGateConfigError(f"{CANDIDATES_FLAG} {e}.") from None
    if not setting.n:
        _warn_knobs_without_gate(dwell, reenable, candidates, setting)
        reenable, candidates = 0, None
    elif setting.auto:
        if reenable:  # 0: what SGLang re-resolving resolved args passes back
            raise SpecGateConfigError(
                f"{REENABLE_FLAG} {reenable} does not apply to {setting}: the auto gate has "
                f"no threshold to resume below. Drop {REENABLE_FLAG}, or give a threshold N."
            )
        reenable = 0
    else:
        if candidates is not None:
            logger.warning("%s %s: no effect with %s; it applies to %s %s only. Drop it, or "
                           "use %s.", CANDIDATES_FLAG, ",".join(map(str, candidates)), setting,
                           THRESHOLD_FLAG, AUTO, AUTO)
            candidates = None
        if reenable is None:
            reenable = setting.n
        elif not 1 <= reenable <= setting.n:
            raise SpecGateConfigError(
                f"{REENABLE_FLAG} {reenable} must be from 1 to the threshold ({setting}): "
                "decode batches hold at least one request, and speculation resumes only at or "
                "below it. Change it, or leave it unset to resume at the threshold."
            )
    return {"speculative_disable_batch_threshold": setting.n, "speculative_gate_dwell_steps": dwell,
            "speculative_gate_reenable_threshold": reenable,
            "speculative_gate_candidate_steps": candidates}, setting


def _threshold_setting(explicit, speculates: bool) -> ThresholdSetting:
    """The flag, kwarg or YAML value, else the environment (threshold_setting), which a
    server that does not speculate ignores, and says so. A server that speculates some
    other way is refused either way (validate_gate_combination): gating its speculation
    was asked for and cannot be done."""
    setting = threshold_setting(None if explicit is None else threshold_value(explicit, THRESHOLD_FLAG),
                                threshold_from_env, speculates=speculates)
    if setting.ignored_env:
        logger.warning("%s=%s in the environment: no effect, this server does not speculate (no "
                       "--speculative-algorithm). Unset it for such servers to drop this warning.",
                       THRESHOLD_ENV, setting.ignored_env)
    return setting


def gate_is_auto(resolved) -> bool:
    """Whether resolved args (a record or a release's resolved view) ask for the auto gate."""
    return getattr(resolved, "speculative_disable_batch_threshold", None) == AUTO


def gate_config(resolved) -> GateConfig:
    """The threshold gate's configuration from resolved args; off (threshold 0) for the auto gate."""
    threshold = getattr(resolved, "speculative_disable_batch_threshold", None)
    return GateConfig(
        threshold=0 if threshold in (None, AUTO) else threshold,
        reenable_threshold=getattr(resolved, "speculative_gate_reenable_threshold", None) or 0,
        dwell_steps=getattr(resolved, "speculative_gate_dwell_steps", DEFAULT_DWELL_STEPS),
    )


def auto_gate_config(resolved) -> AutoGateConfig:
    """The auto gate's configuration from resolved args of a server with the auto gate."""
    candidates = getattr(resolved, "speculative_gate_candidate_steps", None)
    if candidates is None:
        drafting = drafting_of(resolved)
        candidates = tree_candidates(drafting) if drafting.shape == TREE else range(drafting.num_steps + 1)
    return AutoGateConfig(candidates=tuple(sorted(candidates)), dwell_steps=resolved.speculative_gate_dwell_steps)


def threshold_value(value: object, source: str) -> int | str:
    """``parse_threshold`` with errors that name ``source`` (a flag, kwarg or env variable)."""
    try:
        return parse_threshold(value)
    except ValueError as e:
        raise SpecGateConfigError(f"{source} {e}.") from None


def threshold_from_env() -> int | str | None:
    """SGLANG_SPEC_DISABLE_BATCH_THRESHOLD as a threshold, or None where it is unset or empty."""
    value = os.environ.get(THRESHOLD_ENV, "").strip()
    return threshold_value(value, THRESHOLD_ENV) if value else None


def _warn_knobs_without_gate(dwell: int, reenable: Optional[int], candidates: Optional[list[int]],
                             setting: ThresholdSetting) -> None:
    """The gate's other knobs set while it is off: said, not silently ignored. Compared with what
    an unset knob resolves to, so SGLang re-resolving resolved args (dataclasses.replace, as its
    Ray engine does) adds no warning of its own."""
    ignored = []
    if dwell != DEFAULT_DWELL_STEPS:
        ignored.append(f"{DWELL_FLAG} {dwell}")
    if reenable:  # unset, or 0: what an off gate resolves it to
        ignored.append(f"{REENABLE_FLAG} {reenable}")
    if candidates is not None:
        ignored.append(f"{CANDIDATES_FLAG} {','.join(map(str, candidates))}")
    if not ignored:
        return
    them = "it" if len(ignored) == 1 else "them"
    if setting.ignored_env:  # a threshold would be refused here too: nothing to gate
        why, fix = "this server does not speculate", f"Drop {them} for such servers."
    else:
        why = f"{THRESHOLD_FLAG} and {THRESHOLD_ENV} unset or 0"
        fix = f"Set {THRESHOLD_FLAG} N to gate speculation, or drop {them}."
    logger.warning("%s: no effect, the gate is off (%s). %s", ", ".join(ignored), why, fix)


def _env_switch(name: str, default: bool, on: str, off: str) -> bool:
    """A 1/0 environment variable (true/false, yes/no, on/off alike), ``default`` when unset or
    empty; anything else is a SpecGateConfigError saying what 1 and 0 do."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on") or (not value and default):
        return True
    if value in ("0", "false", "no", "off") or not value:
        return False
    defaults = (", the default", "") if default else ("", ", the default")
    raise SpecGateConfigError(
        f"{name} must be 1 ({on}{defaults[0]}) or 0 ({off}{defaults[1]}), got {raw!r}. "
        "Set it to 1 or 0, or unset it."
    )


def host_seq_lens_enabled() -> bool:
    """Whether plain steps on backends that plan on host lengths (FlashInfer) take them from the
    gate's mirror (host_seq_lens.py) instead of waiting for the GPU's copy. On unless set to 0:
    the way back to upstream's copy, should the mirror's device check (``disagreed`` in
    /server_info) ever count a length it served wrong."""
    return _env_switch(HOST_SEQ_LENS_ENV, True, "FlashInfer plain steps plan on the gate's host lengths",
                       "they wait for the GPU's, as upstream")


def fa3_off_path_enabled() -> bool:
    """Whether the off state's one-token forwards on FA3 run its decode path (one_token_decode),
    as Triton's and FlashInfer's do. On unless set to 0: the way back to upstream's steps-0
    kernels (docs/benchmarks.md measures both)."""
    return _env_switch(FA3_OFF_PATH_ENV, True, "FA3's off steps run its decode path",
                       "they run upstream's steps-0 kernels")


def fast_off_path_attention_backends() -> tuple[str, ...]:
    """The --attention-backend values whose off steps run the fast off path."""
    return FAST_OFF_PATH_ATTENTION_BACKENDS + ((FA3,) if fa3_off_path_enabled() else ())


# (predicate on resolved args, what is wrong, the fix). Each combination would either
# desynchronise ranks, use a worker other than EAGLEWorkerV2, or bypass the gate. A field one
# release lacks is read with a default; {dp_attention}: the release's flags for it.
_UNSUPPORTED: tuple[tuple[Callable[[object], bool], str, str], ...] = (
    # 0.5.23 resolves the deprecated flag into attn_dp_size and leaves the flag's field false.
    (lambda a: a.enable_dp_attention or getattr(a, "attn_dp_size", 1) > 1, "{dp_attention}",
     "DP ranks see different batch sizes, so their gate decisions would diverge"),
    (lambda a: a.pp_size > 1, "--pp-size > 1",
     "pipeline-parallel speculative decoding is not gated yet"),
    (lambda a: a.enable_two_batch_overlap, "--enable-two-batch-overlap",
     "two-batch overlap splits the decode batch"),
    (lambda a: a.enable_pdmux, "--enable-pdmux", "PD multiplexing is not gated yet"),
    (lambda a: a.enable_lora or a.lora_paths, "--enable-lora / --lora-paths",
     "LoRA with speculative runtime-state switching is untested upstream"),
    (lambda a: a.enable_multi_layer_eagle, "--enable-multi-layer-eagle",
     "multi-layer EAGLE uses a different worker"),
    (lambda a: a.speculative_adaptive, "--speculative-adaptive",
     "both would drive the same step-switching controller"),
    (lambda a: a.speculative_num_steps == 0, "--speculative-num-steps 0",
     "with no draft steps there is no speculation to turn off"),
    (lambda a: a.speculative_use_rejection_sampling, "--speculative-use-rejection-sampling",
     "plain steps verify without the draft's token distribution that rejection sampling "
     "needs, so the first sampled request in one would stop the scheduler "
     "(eagle_utils.py:784-791), and the step after one drafts from stand-ins"),
    # 0.5.23 refuses these with --speculative-adaptive (hisparse_hook.py:123), whose runtime-state
    # switching the gate uses too.
    (lambda a: getattr(a, "enable_hisparse", False), "--enable-hisparse",
     "HiSparse with speculative runtime-state switching is refused upstream"),
)


def require_active_hooks(setting: ThresholdSetting) -> None:
    # SGLang's plugin loader only logs a hook that failed to apply; a server asked for the
    # gate must not start without it.
    from sglang_specgate.hooks import inactive_targets

    inactive = inactive_targets()
    if inactive:
        raise SpecGateConfigError(
            f"{setting} asks for the gate, but these sglang-specgate hooks are not active: "
            f"{', '.join(inactive)}. Check the SGLang log for the plugin error and run "
            "`python -m sglang_specgate doctor`."
        )


def validate_gate_combination(args, setting: ThresholdSetting) -> None:
    """Reject what the gate cannot run and warn where it could never fire (``args``: resolved
    args, a record or the release's resolved view, whose record says whether SGLang chose the
    drafting: drafting.CHOSEN_BY_SGLANG_ATTRIBUTE)."""
    algorithm = args.speculative_algorithm
    if algorithm not in GATED_ALGORITHMS:
        raise SpecGateConfigError(
            f"{setting} needs --speculative-algorithm EAGLE or EAGLE3 "
            f"(got {algorithm}). Add it with a draft model, or {setting.removal}."
        )
    from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed, installed_release

    drafting = drafting_of(args)
    if drafting.shape == TREE:
        fast = fast_off_path_attention_backends()
        refused = tree_refusal(drafting, release=installed_release(), fast_off_path_releases=FAST_OFF_PATH_RELEASES,
                               page_size=args.page_size, slow_backends=slow_off_path_backends(args, fast),
                               fast_backends=fast)
        if refused:
            raise SpecGateConfigError(f"{setting}: {drafting.described()}; {refused}.")
    release = installed()
    for is_set, flag, reason in _UNSUPPORTED:
        if is_set(args):
            raise SpecGateConfigError(
                f"{setting} cannot be combined with {flag.format(dp_attention=release.DP_ATTENTION_FLAG)}: {reason}. "
                f"Change one of the two ({setting.removal} to run without the gate)."
            )

    if setting.auto:
        _validate_auto_gate(args, setting)
    else:
        _warn_where_the_threshold_cannot_act(args, setting, release)
    slower = slower_off_path(args)
    if slower:
        logger.warning("%s: %s", setting, slower)


def _validate_auto_gate(args, setting: ThresholdSetting) -> None:
    decode_graphs = getattr(decode_graph_config(args), "backend", None)
    if decode_graphs != FULL_DECODE_GRAPHS:
        raise SpecGateConfigError(
            f"{setting} measures each draft step count's cost by replaying its full decode CUDA "
            f"graphs at start-up, and this server's decode graphs are {decode_graphs}. Start with "
            f"--cuda-graph-backend-decode {FULL_DECODE_GRAPHS} (and without --disable-cuda-graph), "
            f"or give {THRESHOLD_FLAG} a number N."
        )
    try:
        config = auto_gate_config(args)
    except ValueError as e:
        raise SpecGateConfigError(f"{CANDIDATES_FLAG} {e}.") from None
    steps = args.speculative_num_steps
    drafting = drafting_of(args)
    if drafting.shape == TREE and config.candidates != tree_candidates(drafting):
        raise SpecGateConfigError(
            f"{CANDIDATES_FLAG} {','.join(map(str, config.candidates))} with tree drafting ({drafting.flags()}): "
            f"{setting} chooses between plain and the tree only, 0 and {steps}. topk is one value per server, "
            f"and the draft steps in between would be built as chains. Drop {CANDIDATES_FLAG}, or for finer "
            f"steps use chain drafting: {CHAIN_FLAGS}."
        )
    if config.candidates[-1] > steps:
        raise SpecGateConfigError(
            f"{CANDIDATES_FLAG} {','.join(map(str, config.candidates))} goes beyond "
            f"--speculative-num-steps {steps}, which sizes the draft buffers. Raise "
            f"--speculative-num-steps to {config.candidates[-1]} (with --speculative-num-draft-tokens "
            f"{config.candidates[-1] + 1}), or drop the larger counts."
        )


def _warn_where_the_threshold_cannot_act(args, setting: ThresholdSetting, release) -> None:
    n = setting.n
    max_running = args.max_running_requests
    if max_running is not None and n >= max_running:
        logger.warning(
            "%s never fires: decode batches hold at most --max-running-requests %d "
            "requests (SGLang defaults it to 48 under speculation). Raise "
            "--max-running-requests above %d or lower the threshold.",
            setting, max_running, n,
        )
    graph_max_bs = _largest_decode_graph_batch(args)
    if graph_max_bs is not None and n > graph_max_bs:
        logger.warning(
            "%s is above the largest CUDA-graph decode batch (%d): speculating batches "
            "of %d..%d requests run without CUDA graphs. Raise %s to %d.",
            setting, graph_max_bs, graph_max_bs + 1, n, release.DECODE_GRAPH_MAX_BS_FLAG, n,
        )


def slower_off_path(args) -> Optional[str]:
    """Why speculation-off steps of a server with these resolved args run upstream's steps-0
    state instead of the fast off path, as a sentence with the fix, or None."""
    from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed_release

    release = installed_release()
    if release not in FAST_OFF_PATH_RELEASES:
        return (f"speculation-off steps run upstream's steps-0 state on SGLang {release}: the gate's fast "
                "off path has not run on a GPU with this release, so it stays off (correct, slower: on "
                "SGLang 0.5.17 with Triton those steps ran at 0.29x a plain server at 64 requests). For the "
                f"fast off path use SGLang {' or '.join(FAST_OFF_PATH_RELEASES)}.")
    fast = fast_off_path_attention_backends()
    slow = slow_off_path_backends(args, fast)
    if not slow:
        return None
    # Offered only where the switch alone would make every setting fast (not a hybrid).
    fa3_would_serve = FA3 not in fast and not slow_off_path_backends(args, fast + (FA3,))
    fa3 = (f", or with FA3 unset {FA3_OFF_PATH_ENV} (now 0) for FA3's decode path"
           if fa3_would_serve else "")
    *others, last = fast
    return (f"speculation-off steps are fast on {', '.join(others)} or {last} attention only; with "
            f"{'; '.join(slow)} they run upstream's steps-0 kernels (on Triton those ran at 0.29x a plain "
            "server at 64 requests, on FA3 at 0.94-0.98x from 16 to 128). Start with "
            f"{FAST_OFF_PATH_FIX} for the fast off path{fa3}.")


def slow_off_path_backends(args, fast: tuple[str, ...]) -> list[str]:
    """The attention settings (resolved args; SGLang picks FA3 by default on Hopper) that would
    build the off state's target-verify or draft-extend backend outside the fast off path
    (``fast``: its --attention-backend values, fast_off_path_attention_backends())."""
    from sglang_specgate.sglang_versions import installed

    prefill, decode = installed().attention_backends(args)
    if prefill != decode:  # SGLang composes a HybridAttnBackend of the two
        target = [f"--prefill-attention-backend {prefill} and --decode-attention-backend {decode} (hybrid)"]
    elif prefill not in fast:
        target = [f"--attention-backend {prefill}"]
    else:
        target = []
    draft = args.speculative_draft_attention_backend
    if draft and draft not in fast:
        return target + [f"--speculative-draft-attention-backend {draft}"]
    return target


def decode_graph_config(args):
    """The decode phase's CUDA-graph settings as resolution left them (its backend, sizes), or
    None: what --cuda-graph-backend-decode, --disable-cuda-graph and the rest came to."""
    return getattr(getattr(args, "cuda_graph_config", None), "decode", None)


def _largest_decode_graph_batch(args) -> Optional[int]:
    if args.disable_cuda_graph:
        return None
    decode = decode_graph_config(args)
    sizes = getattr(decode, "bs", None)
    if sizes:
        return max(sizes)
    return getattr(decode, "max_bs", None)


def exit_on_config_error(prepare_server_args, *args, **kwargs):
    """AROUND hook on ``prepare_server_args``: a gate misconfiguration on the command line
    ends like an argparse error (message + exit status 2), not a traceback. Python callers
    (``sglang.Engine``) still get the exception. Where the release resolves the record later
    (0.5.23: run_server's resolve_once), the record is marked to end the same way then."""
    from sglang_specgate.sglang_versions import installed

    with usage_error_on_config_error():
        server_args = prepare_server_args(*args, **kwargs)
    return installed().from_command_line(server_args)


@contextlib.contextmanager
def usage_error_on_config_error():
    """A SpecGateConfigError raised in the block ends the process like an argparse error."""
    try:
        yield
    except SpecGateConfigError as e:
        print(f"sglang: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
