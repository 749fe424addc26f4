"""docs/hooks.md, rendered from the two registries so that the page cannot drift from the code.

    python -m sglang_specgate registry-doc > docs/hooks.md

test_registry_doc.py fails when the committed page differs from what this renders.
"""

from __future__ import annotations

from sglang_specgate.hooks import HOOKS
from sglang_specgate.runtime_patches import RUNTIME_PATCHES
from sglang_specgate.sglang_versions import CPU, FAST_OFF_PATH_RELEASES, GPU, SUPPORTED_SGLANG_VERSIONS

HEADER = f"""# Every change sglang-specgate makes to SGLang

Generated from `python/sglang_specgate/hooks.py` and `python/sglang_specgate/runtime_patches.py`
by `python -m sglang_specgate registry-doc > docs/hooks.md`; a test fails when this page and the
code differ. Supported: SGLang {", ".join(SUPPORTED_SGLANG_VERSIONS)}. Each entry says on which releases
it is verified: **{GPU}**, the GPU suite and the benchmarks ran with it; **{CPU}**, its names resolve
and the CPU suite checks its contract there, but it has never run on a GPU with that release. An
entry is registered, and its names checked, only on the releases it lists. At start-up every
target and every name of the installed release is checked; a server that asks for the gate
refuses to start if one is missing (`python -m sglang_specgate doctor` lists them). The fast off
path runs on SGLang {", ".join(FAST_OFF_PATH_RELEASES)} only; elsewhere the gate's off steps run
upstream's steps-0 state. Porting to a new release: [UPGRADING.md](../UPGRADING.md).
"""


def _verified(entry) -> str:
    return ", ".join(f"{release} ({how})" for release, how in entry.verified_on.items())


def _entry(title: str, fields: list[tuple[str, str]]) -> str:
    return "\n".join([f"### {title}", "", *(f"- **{name}:** {text}" for name, text in fields), ""])


def render() -> str:
    hooks = [_entry(f"`{h.target}` ({h.kind})", [
        ("verified on", _verified(h)), ("implementation", f"`{h.implementation}`"), ("why", h.why),
        ("how", h.how), ("upstream", h.upstream), ("removal", h.removal)]) for h in HOOKS]
    patches = [_entry(", ".join(f"`{owner}`" for owner in p.owners), [
        ("verified on", _verified(p)), ("attributes", ", ".join(f"`{name}`" for name in p.attributes)),
        ("checked as", p.check), ("by", f"`{p.by}`"), ("why", p.why), ("how", p.how),
        ("upstream", p.upstream), ("removal", p.removal)]) for p in RUNTIME_PATCHES]
    return "\n".join([
        HEADER,
        f"## Hooks: what SGLang's HookRegistry (and 0.5.23's resolution pipeline) patches at plugin load "
        f"({len(HOOKS)})", "", *hooks,
        f"## Runtime changes: what the gate sets on SGLang objects while it runs "
        f"({len(RUNTIME_PATCHES)})", "", *patches,
    ])
