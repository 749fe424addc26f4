"""Plugin discovery and hook application in fresh processes, as SGLang does them, and the
ways a server asked for the gate refuses to start without it, on the installed release (a
fresh process "on another release" is the installed SGLang reporting another version)."""

from __future__ import annotations

import dataclasses
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fresh_process import run_python
from registry_entries import documentation_errors
from sglang_specgate import hooks
from sglang_specgate.sglang_versions import (FAST_OFF_PATH_RELEASES, SUPPORTED_SGLANG_VERSIONS, IncompatibleSGLangError,
                                             check_sglang_version, installed_release)

FLAG = "--speculative-disable-batch-threshold"
RELEASE = installed_release()
OURS = hooks.hooks_for(RELEASE)


def test_registry_entries_are_documented_and_resolve():
    for release in SUPPORTED_SGLANG_VERSIONS:
        targets = [h.target for h in hooks.hooks_for(release)]
        assert len(targets) == len(set(targets)), release
    for hook in hooks.HOOKS:
        assert hook.kind in ("REPLACE", "AROUND", "AFTER", "BEFORE", hooks.RESOLUTION)
        assert hook.verified_on and set(hook.verified_on) <= set(SUPPORTED_SGLANG_VERSIONS), hook.target
    for hook in OURS:
        pkgutil.resolve_name(hook.implementation_for(RELEASE))
    assert documentation_errors(OURS, lambda hook: hook.target) == []
    # Fails on each release when a hook target there no longer exists upstream.
    assert hooks.unresolved_targets() == []


def test_sglang_loader_discovers_plugin_and_applies_every_hook_and_nothing_else():
    result = run_python(["-c", f"""
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang_specgate import hooks
ours = sorted(t for t, entries in HookRegistry._hooks.items()
              if any(src and src.plugin_name == "spec_gate" for _, _, src in entries))
print("INACTIVE", hooks.inactive_targets())
print("OURS", ours == sorted(h.target for h in hooks.hooks_for({RELEASE!r}) if h.kind != hooks.RESOLUTION))
"""])
    assert result.returncode == 0, result.stderr
    assert "INACTIVE []" in result.stdout
    assert "OURS True" in result.stdout


# Written out, not derived from hooks.HOOKS: dropping a hook or changing its kind must fail here.
_EVERY_RELEASE = {
    "sglang.srt.server_args.ServerArgs": "REPLACE",
    "sglang.srt.entrypoints.engine.Engine.server_args_class": "REPLACE",
    "sglang.srt.server_args.prepare_server_args": "AROUND",
    "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker": "AFTER",
}
EXPECTED_HOOKS = {
    "0.5.17": {
        **_EVERY_RELEASE,
        "sglang.srt.speculative.eagle_utils._eagle_prefill_tail_tokens": "REPLACE",
        "sglang.srt.mem_cache.allocation.alloc_for_spec_decode": "AROUND",
        "sglang.srt.managers.overlap_utils.FutureMap.resolve_seq_lens_cpu": "AROUND",
        "sglang.srt.managers.scheduler.Scheduler.get_internal_state": "AFTER",
        "sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter.report_decode_stats":
            "AFTER",
    },
    "0.5.23": {
        **_EVERY_RELEASE,
        "sglang.srt.arg_groups.speculative_hook.handle_speculative_decoding": "RESOLUTION",
        "sglang.srt.managers.scheduler.Scheduler.get_internal_state": "AFTER",
        "sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter.report_decode_stats":
            "AFTER",
    },
}


@pytest.mark.parametrize("release", SUPPORTED_SGLANG_VERSIONS)
def test_the_registry_holds_the_expected_hooks(release):
    assert {h.target: h.kind for h in hooks.hooks_for(release)} == EXPECTED_HOOKS[release]


def test_sglangs_create_worker_returns_the_gated_worker_only_with_a_threshold(eagle_argv):
    result = run_python(["-c", f"""
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang_specgate.sglang_versions import installed
for n in ("8", "0"):
    args = prepare_server_args({eagle_argv!r} + ["{FLAG}", n, "--max-running-requests", "64"])
    installed().resolve(args)
    print(n, SpeculativeAlgorithm.from_string(args.speculative_algorithm).create_worker(args).__name__)
"""])
    assert result.returncode == 0, result.stderr
    assert "8 GatedEAGLEWorkerV2" in result.stdout and "0 EAGLEWorkerV2" in result.stdout, result.stdout


def test_launch_server_help_lists_the_flags():
    result = run_python(["-m", "sglang.launch_server", "--help"])
    assert result.returncode == 0, result.stderr
    for flag in (FLAG, "--speculative-gate-dwell-steps", "--speculative-gate-reenable-threshold"):
        assert flag in result.stdout


def test_sglang_serve_help_does_not_load_plugins():
    # Documented limitation (README): `sglang serve --help` prints help before calling
    # load_plugins (sglang/cli/serve.py:57-95). If this starts failing, upstream fixed it:
    # update the README.
    result = run_python(["-c", "import sys; from sglang.cli.main import main; sys.argv=['sglang','serve','--help']; main()"])
    assert "--speculative-eagle-topk" in result.stdout
    assert FLAG not in result.stdout


def test_sglang_serve_loads_the_plugin_and_parses_the_flag(eagle_argv):
    argv = ["sglang", "serve", *eagle_argv, FLAG, "-3"]
    result = run_python(["-c", f"import sys; from sglang.cli.main import main; sys.argv={argv!r}; main()"])
    assert result.returncode == 2
    assert f"argument {FLAG}: must be >= 0" in result.stderr


def test_bad_value_on_the_real_command_line_is_a_usage_error(eagle_argv):
    result = run_python(["-m", "sglang.launch_server", *eagle_argv, FLAG, "-3"])
    assert result.returncode == 2
    assert f"argument {FLAG}: must be >= 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_resolution_error_on_the_real_command_line_has_no_traceback(model_dirs):
    result = run_python(["-m", "sglang.launch_server", "--model-path", model_dirs[0],
                         "--device", "cuda", FLAG, "8"])
    assert result.returncode == 2
    assert "needs --speculative-algorithm EAGLE or EAGLE3" in result.stderr
    assert "Traceback" not in result.stderr


def test_server_refuses_the_flag_when_the_plugin_is_disabled(eagle_argv):
    result = run_python(["-m", "sglang.launch_server", *eagle_argv, FLAG, "8"],
                        env={"SGLANG_PLUGINS": "some_other_plugin"})
    assert result.returncode == 2
    assert f"unrecognized arguments: {FLAG} 8" in result.stderr


def test_server_refuses_to_start_when_a_gate_hook_failed_to_apply(eagle_argv):
    # SGLang's loader logs and skips a hook that fails to apply (hook_registry.py:165); the
    # gate must then refuse rather than run ungated. The failure is injected into the
    # registry's apply step for one target.
    result = run_python(["-c", f"""
import sys
from sglang.srt.plugins.hook_registry import HookRegistry
original = HookRegistry._apply_target.__func__
def failing(cls, target, entries):
    if target.endswith("create_worker"):
        raise RuntimeError("simulated incompatible target")
    return original(cls, target, entries)
HookRegistry._apply_target = classmethod(failing)
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import prepare_server_args
from sglang_specgate.sglang_versions import installed
installed().resolve(prepare_server_args({eagle_argv!r} + ["{FLAG}", "8"]))
"""])
    assert result.returncode == 2
    assert "hooks are not active" in result.stderr
    assert "create_worker" in result.stderr


SUPPORTED = "sglang-specgate supports SGLang 0.5.17 or 0.5.23 (any build of them)"
INSTALL = "pip install 'sglang==0.5.23' (or ==0.5.17)"


def load_plugins_as(version: str, argv: list[str], then: str = "", env: dict | None = None):
    """SGLang's plugin loading in a fresh process whose SGLang reports ``version`` (the
    installed release standing in for another) and whose command line is ``argv``."""
    return run_python(["-c", f"""
import sys
import sglang
sglang.__version__ = {version!r}
sys.argv = ["sglang"] + {argv!r}
from sglang.srt.plugins import load_plugins
load_plugins()
{then}
"""], env=env)


@pytest.mark.parametrize("version", [f"{RELEASE}.post1", f"{RELEASE}+cu130"])
def test_a_build_of_the_supported_release_is_that_release(version, eagle_argv):
    result = load_plugins_as(version, eagle_argv + [FLAG, "8"], then="""
from sglang_specgate import hooks
print("INACTIVE", hooks.inactive_targets())
""")
    assert result.returncode == 0, result.stderr
    assert "INACTIVE []" in result.stdout
    assert SUPPORTED not in result.stderr


@pytest.mark.parametrize("version", ["0.5.16", "0.5.20", "0.5.24"])
def test_an_ungated_process_on_another_sglang_warns_once_and_parses_its_arguments(version, eagle_argv):
    # What a scheduler or launcher of a server without the gate does on that SGLang: plain
    # SGLang's ServerArgs, no hook of ours, one warning that names the supported release.
    result = load_plugins_as(version, eagle_argv, then=f"""
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang.srt.server_args import prepare_server_args
from sglang_specgate.plugin import register
register()  # called again in the process: no second warning
args = prepare_server_args({eagle_argv!r})
ours = [t for t, entries in HookRegistry._hooks.items()
        if any(src and src.plugin_name == "spec_gate" for *_, src in entries)]
print("PARSED", type(args).__name__, args.speculative_algorithm, "OUR HOOKS", len(ours))
""")
    assert result.returncode == 0, result.stderr
    assert "PARSED ServerArgs EAGLE3 OUR HOOKS 0" in result.stdout
    assert result.stderr.count(SUPPORTED) == 1
    assert f"{SUPPORTED}, found {version}. The gate is off in this process, which runs SGLang {version} " \
        f"unchanged: {FLAG} and sglang.Engine(speculative_disable_batch_threshold=N) are unknown to it; " \
        f"for them: {INSTALL}." in result.stderr
    assert "Traceback" not in result.stderr


def test_the_warning_says_an_environment_threshold_has_no_effect(model_dirs):
    result = load_plugins_as("0.5.24", ["--model-path", model_dirs[0]],
                             env={"SGLANG_SPEC_DISABLE_BATCH_THRESHOLD": "8"})
    assert result.returncode == 0, result.stderr
    assert "SGLANG_SPEC_DISABLE_BATCH_THRESHOLD=8 in the environment has no effect here (no " \
        "--speculative-algorithm on the command line)." in result.stderr


@pytest.mark.parametrize("how, removal", [
    ("flag", f"drop {FLAG}"),
    ("env", "unset SGLANG_SPEC_DISABLE_BATCH_THRESHOLD"),
    ("config", "remove speculative-disable-batch-threshold from"),
])
def test_a_gated_launch_on_another_sglang_is_refused_with_the_fix(how, removal, eagle_argv, tmp_path):
    # sglang.launch_server's own main, run as `python -m sglang.launch_server` runs it.
    argv, env, asked = list(eagle_argv), {}, f"{FLAG} 8"
    if how == "flag":
        argv += [FLAG, "8"]
    elif how == "env":
        env = {"SGLANG_SPEC_DISABLE_BATCH_THRESHOLD": "8"}
        asked = "SGLANG_SPEC_DISABLE_BATCH_THRESHOLD=8 in the environment"
    else:
        config = tmp_path / "server.yaml"
        config.write_text("speculative-disable-batch-threshold: 8\n")
        argv, asked = argv + ["--config", str(config)], f"speculative-disable-batch-threshold: 8 in {config}"
    result = run_python(["-c", f"""
import runpy, sys
import sglang
sglang.__version__ = "0.5.24"
sys.argv = ["launch_server"] + {argv!r}
runpy.run_module("sglang.launch_server", run_name="__main__")
"""], env=env)
    assert result.returncode == 1
    assert f"{asked} asks for the gate, but {SUPPORTED}, found 0.5.24. For the gate: {INSTALL}; " \
        f"or {removal}" in result.stderr
    assert "to run SGLang 0.5.24 without it." in result.stderr
    assert "Traceback" not in result.stderr


def test_an_engine_kwarg_on_another_sglang_is_refused_by_sglang_after_the_warning(model_dirs):
    # Documented limit (plugin.py): the kwarg is not visible when the plugin loads, so the
    # gate's warning comes first and SGLang's own ServerArgs refuses the unknown keyword.
    result = run_python(["-c", f"""
import sglang
sglang.__version__ = "0.5.24"
try:
    sglang.Engine(model_path={model_dirs[0]!r}, speculative_disable_batch_threshold=8)
except TypeError as e:
    print("REFUSED", e)
"""])
    assert "REFUSED" in result.stdout and "speculative_disable_batch_threshold" in result.stdout
    assert result.stderr.count(SUPPORTED) == 1


@pytest.mark.parametrize("gated", [True, False])
def test_an_sglang_without_a_name_the_gate_touches_refuses_the_gate_only(gated, eagle_argv):
    # The installed release with one hook target taken away, standing in for a build that
    # renamed it.
    argv = eagle_argv + ([FLAG, "8"] if gated else [])
    result = run_python(["-c", f"""
import sys
sys.argv = ["sglang"] + {argv!r}
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
del SpeculativeAlgorithm.create_worker
from sglang.srt.plugins import load_plugins
load_plugins()
print("still running")
"""])
    missing = ("sglang-specgate relies on SGLang internals this one lacks: sglang.srt.speculative.spec_info."
               "SpeculativeAlgorithm.create_worker (AttributeError: ")
    assert (f"{FLAG} 8 asks for the gate, but " if gated else "") + missing in result.stderr
    assert ("The gate is off in this process" in result.stderr) is not gated
    assert result.returncode == (1 if gated else 0)
    assert ("still running" in result.stdout) is not gated


def test_doctor_on_an_unsupported_sglang_reports_it_without_a_traceback():
    # Before 0.5.23 was supported, the doctor crashed on its wheel importing our ServerArgs
    # subclass (a dataclass over 0.5.23's msgspec Struct). So after a failed version check the
    # doctor must not import sglang_specgate.args at all: the next release may break it again.
    result = run_python(["-c", """
import sys
import sglang
sglang.__version__ = "0.5.24"
from sglang_specgate.doctor import run
code = run([])
print("args imported:", "sglang_specgate.args" in sys.modules)
sys.exit(code)
"""])
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"[FAIL] SGLang version: {SUPPORTED}, found 0.5.24. Install a supported SGLang ({INSTALL}), " \
        "or uninstall sglang-specgate." in result.stdout
    assert "args imported: False" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_doctor_without_sglang_says_to_install_it():
    # A meta path finder that refuses sglang stands in for an environment without it.
    result = run_python(["-c", """
import sys
class NoSGLang:
    def find_spec(self, name, path=None, target=None):
        if name == "sglang" or name.startswith("sglang."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoSGLang())
from sglang_specgate.doctor import run
sys.exit(run([]))
"""])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[FAIL] SGLang version: SGLang does not import here (No module named 'sglang'). " \
        f"Install it: {INSTALL}" in result.stdout
    assert "SGLang internal resolves" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_a_target_whose_module_fails_to_import_is_reported_not_raised(tmp_path, monkeypatch):
    # An incompatible SGLang can fail inside a module's import with any exception (a TypeError
    # from a dataclass over a changed base, say); doctor and the plugin report it as unresolved.
    (tmp_path / "broken_sglang_module.py").write_text("raise TypeError('changed base class')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = dataclasses.replace(hooks.HOOKS[0], target="broken_sglang_module.Thing")
    monkeypatch.setattr(hooks, "HOOKS", (broken,))
    assert hooks.unresolved_targets() == [
        "broken_sglang_module.Thing (TypeError: changed base class)"]


def test_doctor_passes(eagle_argv):
    result = run_python(["-m", "sglang_specgate", "doctor", *eagle_argv, FLAG, "16",
                         "--max-running-requests", "64"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[FAIL]" not in result.stdout
    assert result.stdout.count("applied") == len(OURS)
    assert "effective gate: threshold 16, re-enable <= 16 after 8 steps" in result.stdout
    if RELEASE in FAST_OFF_PATH_RELEASES:
        assert f"[ok] verified on a GPU: SGLang {RELEASE}: the gate and its fast off path" in result.stdout
        assert "[ok] fast off path: triton attention" in result.stdout
    else:
        assert f"[warn] verified on a GPU: not SGLang {RELEASE}: its hooks pass the CPU suite only, so the fast " \
            "off path stays off and off steps run upstream's steps-0 state (correct, slower); verified on a " \
            "GPU: SGLang 0.5.17" in result.stdout
        assert f"[warn] fast off path: speculation-off steps run upstream's steps-0 state on SGLang {RELEASE}" \
            in result.stdout
    assert "[ok] host sequence lengths for plain steps (FlashInfer): on (SGLANG_SPEC_GATE_HOST_SEQ_LENS=<unset>)" \
        in result.stdout
    assert "[ok] FA3's decode path for off steps: on (SGLANG_SPEC_GATE_FA3_OFF_PATH=<unset>)" \
        in result.stdout


def test_doctor_describes_the_auto_gate(eagle_argv):
    result = run_python(["-m", "sglang_specgate", "doctor", *eagle_argv, FLAG, "auto",
                         "--speculative-gate-candidate-steps", "0,1,3"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ok] effective gate: auto: draft steps chosen per decode step from [0, 1, 3], a move " \
        "held for 8 steps; its cost table is measured at start-up" in result.stdout
    fast_off_path = ("[ok] fast off path: triton attention" if RELEASE in FAST_OFF_PATH_RELEASES else
                     f"[warn] fast off path: speculation-off steps run upstream's steps-0 state on SGLang {RELEASE}")
    assert fast_off_path in result.stdout  # the off path the auto gate's k = 0 runs


@pytest.mark.parametrize("drafting, block, reserved", [
    ([], '{"shape": "chain", "topk": 1, "num_steps": 3, "num_draft_tokens": 4, "chosen_by": "user"}', 8),
    (["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
     '{"shape": "tree", "topk": 4, "num_steps": 3, "num_draft_tokens": 8, "chosen_by": "user"}', 24),
], ids=["chain", "tree"])
def test_doctor_reports_the_drafting_and_what_it_plans(drafting, block, reserved, eagle_argv):
    result = run_python(["-m", "sglang_specgate", "doctor", *eagle_argv, *drafting, FLAG, "16",
                         "--max-running-requests", "32"])
    if drafting and RELEASE not in FAST_OFF_PATH_RELEASES:  # trees are refused there
        assert "tree drafting needs the gate's fast off path" in result.stderr
        return
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"[ok] drafting: {block}" in result.stdout
    assert f"[ok] KV reserved each decode step: {reserved} tokens a request" in result.stdout
    width = 8 if drafting else 4
    assert (f"[ok] planned CUDA graphs: draft steps 3: target verify at 20 batch sizes 1..32, {width} tokens a "
            "request; draft decode at 20 batch sizes 1..32") in result.stdout
    assert "[ok] planned CUDA graphs: draft steps 0: target verify at 20 batch sizes 1..32, 1 token a request" \
        in result.stdout


@pytest.mark.parametrize("fa3_switch", [None, "0"])
def test_doctor_warns_where_the_off_path_is_upstreams(fa3_switch, eagle_argv):
    result = run_python(["-m", "sglang_specgate", "doctor", *eagle_argv, FLAG, "16",
                         "--max-running-requests", "64", "--attention-backend", "fa3"],
                        env={} if fa3_switch is None else {"SGLANG_SPEC_GATE_FA3_OFF_PATH": fa3_switch})
    assert result.returncode == 0, result.stdout + result.stderr  # slower, not broken
    if RELEASE not in FAST_OFF_PATH_RELEASES:
        expected = f"[warn] fast off path: speculation-off steps run upstream's steps-0 state on SGLang {RELEASE}"
    elif fa3_switch is None:  # FA3's own decode path serves chains
        expected = "[ok] fast off path: fa3 attention"
    else:
        expected = ("[warn] fast off path: speculation-off steps are fast on triton or flashinfer attention only; "
                    "with --attention-backend fa3 they run upstream's steps-0 kernels")
    assert expected in result.stdout
    assert "doctor: all checks passed" in result.stdout


@pytest.mark.parametrize("env", ["SGLANG_SPEC_GATE_HOST_SEQ_LENS", "SGLANG_SPEC_GATE_FA3_OFF_PATH"])
def test_doctor_names_a_bad_switch_setting(env):
    result = run_python(["-m", "sglang_specgate", "doctor"], env={env: "maybe"})
    assert result.returncode == 1
    assert f"[FAIL] {env}: {env} must be 1" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_doctor_reports_server_arguments_that_do_not_resolve(tmp_path):
    missing = str(tmp_path / "no-such-model")
    result = run_python(["-m", "sglang_specgate", "doctor", "--model-path", missing, "--device", "cuda",
                         FLAG, "16"])
    assert result.returncode == 1
    assert "[FAIL] server arguments resolve: " in result.stdout and "no-such-model" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert "doctor: 1 problem(s)" in result.stdout


def test_doctor_reports_a_refused_gate_with_its_summary(eagle_argv):
    # The gate's refusal (args.exit_on_config_error) ends resolution with SystemExit(2).
    result = run_python(["-m", "sglang_specgate", "doctor", *eagle_argv, FLAG, "16",
                         "--speculative-use-rejection-sampling"])
    assert result.returncode == 1
    assert "cannot be combined with --speculative-use-rejection-sampling" in result.stderr
    assert "[FAIL] server arguments resolve: refused with exit status 2" in result.stdout
    assert "doctor: 1 problem(s)" in result.stdout


def test_doctor_checks_the_threshold_variable_without_server_arguments():
    result = run_python(["-m", "sglang_specgate", "doctor"], env={"SGLANG_SPEC_DISABLE_BATCH_THRESHOLD": "lots"})
    assert result.returncode == 1
    assert "[FAIL] SGLANG_SPEC_DISABLE_BATCH_THRESHOLD: SGLANG_SPEC_DISABLE_BATCH_THRESHOLD must be a " \
        "non-negative integer or 'auto', got 'lots'." in result.stdout
    result = run_python(["-m", "sglang_specgate", "doctor"], env={"SGLANG_SPEC_DISABLE_BATCH_THRESHOLD": " 12 "})
    assert "[ok] SGLANG_SPEC_DISABLE_BATCH_THRESHOLD: 12" in result.stdout


def test_doctor_leaves_the_variable_to_resolution_when_given_server_arguments(eagle_argv):
    # The flag wins over the variable, so a bad value there is no problem for this server.
    result = run_python(["-m", "sglang_specgate", "doctor", *eagle_argv, FLAG, "16", "--max-running-requests", "64"],
                        env={"SGLANG_SPEC_DISABLE_BATCH_THRESHOLD": "lots"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "effective gate: threshold 16" in result.stdout


def test_doctor_fails_when_plugin_excluded():
    result = run_python(["-m", "sglang_specgate", "doctor"], env={"SGLANG_PLUGINS": "other"})
    assert result.returncode == 1
    assert "[FAIL] SGLANG_PLUGINS" in result.stdout


def test_module_usage():
    result = run_python(["-m", "sglang_specgate"])
    assert result.returncode == 2
    assert "usage: python -m sglang_specgate doctor" in result.stdout


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("sglang-specgate")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "doctor" in result.stdout


@pytest.mark.parametrize("version, release", [
    ("0.5.17", "0.5.17"), ("0.5.17.post1", "0.5.17"), ("0.5.17.post1+cu130", "0.5.17"), ("0.5.17.0", "0.5.17"),
    ("0.5.23", "0.5.23"), ("0.5.23.post2", "0.5.23"), ("0.5.23+cu130", "0.5.23"), ("0.5.23rc1", "0.5.23"),
])
def test_the_version_check_compares_releases(version, release):
    assert check_sglang_version(version) == release


@pytest.mark.parametrize("version", ["0.5.16", "0.5.18", "0.5.22", "0.5.24", "0.5.17.1", "1.0.0", "unknown"])
def test_the_version_check_names_the_supported_releases(version):
    with pytest.raises(IncompatibleSGLangError, match=re.escape(f"{SUPPORTED}, found {version}.")):
        check_sglang_version(version)
