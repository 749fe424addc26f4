"""``python -m sglang_specgate doctor``: is the gate installed and able to run here?

Checks, in a fresh process, what a server would do at start-up: the SGLang version, entry
point discovery by SGLang's own loader, every hook target and runtime-patched name resolving,
every hook being applied, the effective threshold (from arguments and the environment),
whether the attention backends give the fast off path (a warning, not a problem) and whether
FlashInfer's plain steps take the gate's host sequence lengths. Exit status 1 on any problem.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "spec_gate"


def run(server_argv: list[str]) -> int:
    from sglang_specgate import hooks

    problems = []

    def report(ok: bool, what: str, detail: str = "", level: str = "FAIL") -> None:
        """``level`` is how a not-ok check is shown: FAIL counts as a problem, warn does not."""
        print(f"[{'ok' if ok else level}] {what}{': ' + detail if detail else ''}")
        if not ok and level == "FAIL":
            problems.append(what)

    try:
        import sglang
    except ImportError as e:  # pip install --no-deps, or another environment's interpreter
        sglang = None
        report(False, "SGLang version", f"SGLang does not import here ({e}). Install it: "
               f"pip install sglang=={hooks.SUPPORTED_SGLANG_VERSIONS[-1]}")
    else:
        try:
            hooks.check_sglang_version(sglang.__version__)
            report(True, "SGLang version", sglang.__version__)
        except hooks.IncompatibleSGLangError as e:
            report(False, "SGLang version", f"{e} Install a supported SGLang (pip install "
                   f"sglang=={hooks.SUPPORTED_SGLANG_VERSIONS[-1]}), or uninstall sglang-specgate.")

    ours = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == ENTRY_POINT_NAME]
    report(bool(ours), "entry point", f"{ENTRY_POINT_GROUP}:{ENTRY_POINT_NAME}")
    allowed = os.environ.get("SGLANG_PLUGINS")
    if allowed and ENTRY_POINT_NAME not in {x.strip() for x in allowed.split(",")}:
        report(False, "SGLANG_PLUGINS", f"{allowed!r} excludes {ENTRY_POINT_NAME}")

    if sglang is not None:
        for target in hooks.unresolved_targets():
            report(False, "SGLang internal resolves", target)
    if not problems:
        from sglang.srt.plugins import load_plugins

        load_plugins()  # SGLang's own loader: discovery, registration, application
        inactive = hooks.inactive_targets()
        for hook in hooks.HOOKS:
            report(hook.target not in inactive, f"hook {hook.kind} applied", hook.target)

    if not problems:
        # Only now: args subclasses SGLang's ServerArgs, which an unsupported SGLang may not allow
        # (0.5.23's is a msgspec Struct), and the version check above has said so already.
        from sglang_specgate.args import (FAST_OFF_PATH_FIX, HOST_SEQ_LENS_ENV, THRESHOLD_ENV,
                                          SpecGateConfigError, host_seq_lens_enabled,
                                          slow_off_path_backends, threshold_from_env)

        if not server_argv:  # with them, their resolution reads it, where a flag does not win
            try:
                from_env = threshold_from_env()
                report(True, THRESHOLD_ENV, "<unset>" if from_env is None else str(from_env))
            except SpecGateConfigError as e:
                report(False, THRESHOLD_ENV, str(e))
        try:
            report(True, "host sequence lengths for plain steps (FlashInfer)",
                   f"{'on' if host_seq_lens_enabled() else 'off'} "
                   f"({HOST_SEQ_LENS_ENV}={os.environ.get(HOST_SEQ_LENS_ENV, '<unset>')})")
        except SpecGateConfigError as e:
            report(False, HOST_SEQ_LENS_ENV, str(e))
        if server_argv:
            from sglang.srt.server_args import prepare_server_args

            try:
                args = prepare_server_args(server_argv)
            except SystemExit as e:  # argparse, or a gate misconfiguration (args.exit_on_config_error)
                report(False, "server arguments resolve", f"refused with exit status {e.code}, for the "
                       "reason printed above")
            except Exception as e:  # what SGLang's resolution refuses (a missing model, no GPU)
                # is a finding to report, not a crash of the doctor
                report(False, "server arguments resolve", f"{type(e).__name__}: {e}")
            else:
                cfg = args.gate_config()
                if args.gate_is_auto():
                    auto = args.auto_gate_config()
                    report(True, "effective gate", f"auto: draft steps chosen per decode step from "
                           f"{list(auto.candidates)}, a move held for {auto.dwell_steps} steps; "
                           "its cost table is measured at start-up")
                else:
                    report(True, "effective gate", f"threshold {cfg.threshold}, re-enable <= "
                           f"{cfg.reenable_threshold} after {cfg.dwell_steps} steps"
                           if cfg.enabled else "off (threshold 0)")
                if cfg.enabled or args.gate_is_auto():
                    slow = slow_off_path_backends(args)
                    if slow:
                        report(False, "fast off path", f"not with {'; '.join(slow)}: off steps run "
                               f"upstream's steps-0 kernels; start with {FAST_OFF_PATH_FIX}", level="warn")
                    else:
                        report(True, "fast off path", f"{args.get_attention_backends()[1]} attention")
    print("doctor: " + ("all checks passed" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0
