"""Entry point of the ``sglang.srt.plugins`` group: the only code SGLang calls to load us.

SGLang runs it once in every process that loads plugins (launcher, Engine, each scheduler)
and only *logs* exceptions raised here, which would leave a server silently ungated. So an
incompatible SGLang ends the process with SystemExit, which the loader does not catch, and
with a message that says what to do.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    import sglang

    from sglang_specgate import hooks

    try:
        hooks.check_sglang_version(sglang.__version__)
    except hooks.IncompatibleSGLangError as e:
        raise SystemExit(str(e)) from None
    missing = hooks.unresolved_targets()
    if missing:
        raise SystemExit(
            "sglang-specgate: these SGLang internals the gate relies on are missing: "
            + "; ".join(missing)
            + ". The installed SGLang is incompatible: reinstall sglang=="
            + hooks.SUPPORTED_SGLANG_VERSIONS[-1]
            + " or uninstall sglang-specgate."
        )
    hooks.register_hooks()
    _registered = True
    logger.debug("sglang-specgate: registered %d hooks", len(hooks.HOOKS))
