"""Entry point of the ``sglang.srt.plugins`` group: the only code SGLang calls to load us.

SGLang runs it once in every process that loads plugins (launcher, Engine, each scheduler;
0.5.23 also the detokenizer and the DP controller) and only *logs* exceptions raised here. On
a supported release (sglang_versions.SUPPORTED_SGLANG_VERSIONS) it registers that release's
hooks. On an SGLang the gate cannot run on (another release,
or one that lacks a name the gate touches), a process that asks for the gate ends with
SystemExit, which the loader does not catch, and a message that says what to do; any other
process starts as plain SGLang, with one warning, since the plugin loads into every SGLang
process on the machine. Whether it asks is read from its command line, the YAML its --config
names and its environment (threshold_setting.requested_before_parsing): an
``sglang.Engine(speculative_disable_batch_threshold=N)`` kwarg is not visible then, and
SGLang's own ServerArgs refuses it as an unexpected keyword.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    import sglang

    from sglang_specgate import hooks

    from sglang_specgate.sglang_versions import INSTALL_HINT

    problem = _incompatibility(sglang.__version__)
    if problem is None:
        hooks.register_hooks()
        logger.debug("sglang-specgate: registered the hooks of SGLang %s", sglang.__version__)
        return

    from sglang_specgate.threshold_setting import THRESHOLD_ENV, THRESHOLD_FLAG, requested_before_parsing

    setting = requested_before_parsing(sys.argv[1:], os.environ)
    if setting.n:
        raise SystemExit(
            f"{setting} asks for the gate, but {problem} For the gate: {INSTALL_HINT}; or "
            f"{setting.removal} to run SGLang {sglang.__version__} without it."
        )
    ignored = (f" {THRESHOLD_ENV}={setting.ignored_env} in the environment has no effect here (no "
               "--speculative-algorithm on the command line)." if setting.ignored_env else "")
    logger.warning("%s The gate is off in this process, which runs SGLang %s unchanged: %s and "
                   "sglang.Engine(speculative_disable_batch_threshold=N) are unknown to it; for them: "
                   "%s.%s", problem, sglang.__version__, THRESHOLD_FLAG, INSTALL_HINT, ignored)


def _incompatibility(version: str) -> str | None:
    """Why the gate cannot run on this SGLang, as a sentence, or None."""
    from sglang_specgate import hooks
    from sglang_specgate.sglang_versions import IncompatibleSGLangError, check_sglang_version

    try:
        check_sglang_version(version)
    except IncompatibleSGLangError as e:
        return str(e)
    missing = hooks.unresolved_targets()
    if missing:
        return f"sglang-specgate relies on SGLang internals this one lacks: {'; '.join(missing)}."
    return None
