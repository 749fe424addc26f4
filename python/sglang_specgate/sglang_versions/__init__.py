"""The SGLang releases the gate supports, and the adapter for each: the only version switch.

Each supported release has one module here (``v0_5_17.py``, ``v0_5_23.py``) with what differs
between releases: the ServerArgs subclass that carries the gate's fields, how a record is
resolved and read back, how the adaptive controller takes the gate's policy, and whether the
fast off path has run on a GPU there. Everything else in the package is written once, against
the adapter's functions. ``installed()`` picks the module for the installed SGLang; releases are
compared, not strings, so a build of a supported release (0.5.17.post1, 0.5.17+cu130) is that
release.

Porting to a new release: UPGRADING.md.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Optional

from packaging.version import InvalidVersion, Version

# release -> its adapter module, oldest first.
ADAPTERS = {"0.5.17": "v0_5_17", "0.5.23": "v0_5_23"}
SUPPORTED_SGLANG_VERSIONS = tuple(ADAPTERS)
SUPPORTED_SGLANG = "SGLang " + " or ".join(SUPPORTED_SGLANG_VERSIONS) + " (any build of them)"
# Releases on which the GPU suite (test/gpu, docs/benchmarks.md) has passed with the gate's fast
# off path. On the others the gate runs its off steps through upstream's own steps-0 state: the
# fast off path stays off where it has not run on a GPU (worker.fast_off_path_blocker).
FAST_OFF_PATH_RELEASES = ("0.5.17",)
# How a release was verified, in the registries' ``verified_on`` (hooks.py, runtime_patches.py).
GPU = "GPU"  # the GPU suite (test/gpu) and the benchmarks ran with it
CPU = "CPU"  # its names resolve and the CPU suite checks its contract; it never ran on a GPU
GPU_0_5_17 = {"0.5.17": GPU}
CPU_0_5_17 = {"0.5.17": CPU}  # a fast-off-path change no GPU has run yet (tree drafting, FA3)
GPU_0_5_17_CPU_0_5_23 = {"0.5.17": GPU, "0.5.23": CPU}
CPU_0_5_23 = {"0.5.23": CPU}
# What pyproject.toml's dependency allows; a test keeps the two in step.
SGLANG_REQUIREMENT = f"sglang>={SUPPORTED_SGLANG_VERSIONS[0]},<0.5.24"
INSTALL_HINT = f"pip install 'sglang=={SUPPORTED_SGLANG_VERSIONS[-1]}' (or =={SUPPORTED_SGLANG_VERSIONS[0]})"


class IncompatibleSGLangError(RuntimeError):
    """The installed SGLang is not a release the gate was written and tested against."""


def release_of(version: str) -> Optional[str]:
    """The supported release ``version`` is a build of, or None. Pre-, post- and local parts
    do not count: 0.5.17.post1 and 0.5.17+cu130 are 0.5.17."""
    try:
        release = Version(Version(version).base_version)
    except InvalidVersion:
        return None
    return next((v for v in SUPPORTED_SGLANG_VERSIONS if Version(v) == release), None)


def check_sglang_version(version: str) -> str:
    """The supported release ``version`` is, or IncompatibleSGLangError naming the range."""
    release = release_of(version)
    if release is None:
        raise IncompatibleSGLangError(f"sglang-specgate supports {SUPPORTED_SGLANG}, found {version}.")
    return release


def installed_release() -> str:
    import sglang

    return check_sglang_version(sglang.__version__)


@functools.cache
def installed() -> ModuleType:
    """The adapter module of the installed SGLang (IncompatibleSGLangError if unsupported)."""
    return importlib.import_module(f"{__name__}.{ADAPTERS[installed_release()]}")
