"""docs/hooks.md, rendered from the two registries so that the page cannot drift from the code.

    python -m sglang_specgate registry-doc > docs/hooks.md

test_registry_doc.py fails when the committed page differs from what this renders.
"""

from __future__ import annotations

from sglang_specgate.hooks import HOOKS, SUPPORTED_SGLANG_VERSIONS
from sglang_specgate.runtime_patches import RUNTIME_PATCHES

HEADER = f"""# Every change sglang-specgate makes to SGLang

Generated from `python/sglang_specgate/hooks.py` and `python/sglang_specgate/runtime_patches.py`
by `python -m sglang_specgate registry-doc > docs/hooks.md`; a test fails when this page and the
code differ. Verified against SGLang {", ".join(SUPPORTED_SGLANG_VERSIONS)}. At start-up every target
and every name below is checked on the installed SGLang; a server that asks for the gate refuses
to start if one is missing (`python -m sglang_specgate doctor` lists them).
"""


def _entry(title: str, fields: list[tuple[str, str]]) -> str:
    return "\n".join([f"### {title}", "", *(f"- **{name}:** {text}" for name, text in fields), ""])


def render() -> str:
    hooks = [_entry(f"`{h.target}` ({h.kind})", [
        ("implementation", f"`{h.implementation}`"), ("why", h.why), ("how", h.how),
        ("upstream", h.upstream), ("removal", h.removal)]) for h in HOOKS]
    patches = [_entry(", ".join(f"`{owner}`" for owner in p.owners), [
        ("attributes", ", ".join(f"`{name}`" for name in p.attributes)),
        ("checked as", p.check), ("by", f"`{p.by}`"), ("why", p.why), ("how", p.how),
        ("upstream", p.upstream), ("removal", p.removal)]) for p in RUNTIME_PATCHES]
    return "\n".join([
        HEADER,
        f"## Hooks: what SGLang's HookRegistry patches at plugin load ({len(HOOKS)})", "", *hooks,
        f"## Runtime changes: what the gate sets on SGLang objects while it runs "
        f"({len(RUNTIME_PATCHES)})", "", *patches,
    ])
