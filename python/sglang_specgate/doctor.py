"""``python -m sglang_specgate doctor``: is the gate installed and able to run here?

Checks, in a fresh process, what a server would do at start-up: the SGLang version (and what
has run on a GPU with it), entry point discovery by SGLang's own loader, every hook target and runtime-patched name resolving,
every hook being applied, the effective threshold (from arguments and the environment),
whether the attention backends give the fast off path (a warning, not a problem), the drafting
shape with the CUDA graphs and KV reservation it plans (graph_plan.py), and whether FlashInfer's
plain steps take the gate's host sequence lengths. Exit status 1 on any problem.
"""

from __future__ import annotations

import json
import os
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "spec_gate"


def run(server_argv: list[str]) -> int:
    from sglang_specgate import hooks
    from sglang_specgate.sglang_versions import (FAST_OFF_PATH_RELEASES, INSTALL_HINT, IncompatibleSGLangError,
                                                 check_sglang_version)

    problems = []
    release = None  # the supported release installed, once known

    def report(ok: bool, what: str, detail: str = "", level: str = "FAIL") -> None:
        """``level`` is how a not-ok check is shown: FAIL counts as a problem, warn does not."""
        print(f"[{'ok' if ok else level}] {what}{': ' + detail if detail else ''}")
        if not ok and level == "FAIL":
            problems.append(what)

    try:
        import sglang
    except ImportError as e:  # pip install --no-deps, or another environment's interpreter
        sglang = None
        report(False, "SGLang version", f"SGLang does not import here ({e}). Install it: {INSTALL_HINT}")
    else:
        try:
            release = check_sglang_version(sglang.__version__)
            report(True, "SGLang version", sglang.__version__)
            on_gpu = release in FAST_OFF_PATH_RELEASES
            report(on_gpu, "verified on a GPU", f"SGLang {release}: the gate and its fast off path" if on_gpu else
                   f"not SGLang {release}: its hooks pass the CPU suite only, so the fast off path stays off "
                   "and off steps run upstream's steps-0 state (correct, slower); verified on a GPU: "
                   f"SGLang {', '.join(FAST_OFF_PATH_RELEASES)}", level="warn")
        except IncompatibleSGLangError as e:
            report(False, "SGLang version", f"{e} Install a supported SGLang ({INSTALL_HINT}), or "
                   "uninstall sglang-specgate.")

    ours = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == ENTRY_POINT_NAME]
    report(bool(ours), "entry point", f"{ENTRY_POINT_GROUP}:{ENTRY_POINT_NAME}")
    allowed = os.environ.get("SGLANG_PLUGINS")
    if allowed and ENTRY_POINT_NAME not in {x.strip() for x in allowed.split(",")}:
        report(False, "SGLANG_PLUGINS", f"{allowed!r} excludes {ENTRY_POINT_NAME}")

    if release is not None:
        for target in hooks.unresolved_targets(release):
            report(False, "SGLang internal resolves", target)
    if not problems:
        from sglang.srt.plugins import load_plugins

        load_plugins()  # SGLang's own loader: discovery, registration, application
        inactive = hooks.inactive_targets()
        for hook in hooks.hooks_for(release):
            report(hook.target not in inactive, f"hook {hook.kind} applied", hook.target)

    if not problems:
        # Only now: args imports SGLang's argument machinery, which an unsupported SGLang may not
        # have, and the version check above has said so already.
        from sglang_specgate.args import (FA3_OFF_PATH_ENV, HOST_SEQ_LENS_ENV, THRESHOLD_ENV, SpecGateConfigError,
                                          auto_gate_config, fa3_off_path_enabled, gate_config, gate_is_auto,
                                          host_seq_lens_enabled, slower_off_path, threshold_from_env)
        from sglang_specgate.drafting import drafting_of
        from sglang_specgate.graph_plan import decode_graph_sizes, described, graph_plan
        from sglang_specgate.sglang_versions import installed

        if not server_argv:  # with them, their resolution reads it, where a flag does not win
            try:
                from_env = threshold_from_env()
                report(True, THRESHOLD_ENV, "<unset>" if from_env is None else str(from_env))
            except SpecGateConfigError as e:
                report(False, THRESHOLD_ENV, str(e))
        switches = (("host sequence lengths for plain steps (FlashInfer)", HOST_SEQ_LENS_ENV, host_seq_lens_enabled),
                    ("FA3's decode path for off steps", FA3_OFF_PATH_ENV,
                     fa3_off_path_enabled))
        for what, env, enabled in switches:
            try:
                report(True, what, f"{'on' if enabled() else 'off'} ({env}={os.environ.get(env, '<unset>')})"
                       + ("" if release in FAST_OFF_PATH_RELEASES else "; unused on this release: part of the fast off path"))
            except SpecGateConfigError as e:
                report(False, env, str(e))
        if server_argv:
            from sglang.srt.server_args import prepare_server_args

            try:
                args = prepare_server_args(server_argv)
                installed().resolve(args)  # 0.5.23 resolves after prepare_server_args
            except SystemExit as e:  # argparse, or a gate misconfiguration (args.exit_on_config_error)
                report(False, "server arguments resolve", f"refused with exit status {e.code}, for the "
                       "reason printed above")
            except Exception as e:  # what SGLang's resolution refuses (a missing model, no GPU)
                # is a finding to report, not a crash of the doctor
                report(False, "server arguments resolve", f"{type(e).__name__}: {e}")
            else:
                resolved = installed().resolved(args)
                cfg = gate_config(resolved)
                drafting = drafting_of(resolved)
                candidates = (0, drafting.num_steps)  # the threshold gate's states
                if gate_is_auto(resolved):
                    auto = auto_gate_config(resolved)
                    candidates = auto.candidates
                    report(True, "effective gate", f"auto: draft steps chosen per decode step from "
                           f"{list(auto.candidates)}, a move held for {auto.dwell_steps} steps; "
                           "its cost table is measured at start-up")
                else:
                    report(True, "effective gate", f"threshold {cfg.threshold}, re-enable <= "
                           f"{cfg.reenable_threshold} after {cfg.dwell_steps} steps"
                           if cfg.enabled else "off (threshold 0)")
                if cfg.enabled or gate_is_auto(resolved):
                    slower = slower_off_path(resolved)
                    report(not slower, "fast off path",
                           slower or f"{installed().attention_backends(resolved)[1]} attention", level="warn")
                    report(True, "drafting", json.dumps(drafting.snapshot()))
                    plan = graph_plan(drafting, decode_graph_sizes(resolved), candidates, deferred_writes=not slower)
                    report(True, "KV reserved each decode step",
                           f"{plan['kv_reserved_tokens_per_request']} tokens a request")
                    for line in described(plan):
                        report(True, "planned CUDA graphs", line)
    print("doctor: " + ("all checks passed" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0
