"""docs/hooks.md is what the registries render: an entry added, changed or removed in code
without the page (or the reverse) fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sglang_specgate.hooks import HOOKS
from sglang_specgate.registry_doc import render
from sglang_specgate.runtime_patches import RUNTIME_PATCHES

PAGE = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
REGENERATE = "python -m sglang_specgate registry-doc > docs/hooks.md"


def test_the_committed_page_is_what_the_registries_render():
    assert PAGE.read_text() == render(), f"docs/hooks.md is stale: run `{REGENERATE}`"


def test_every_entry_appears_with_its_removal_plan():
    page = render()
    for hook in HOOKS:
        assert f"`{hook.target}` ({hook.kind})" in page and hook.removal in page
    for patch in RUNTIME_PATCHES:
        assert all(f"`{name}`" in page for name in patch.attributes) and patch.removal in page


def test_the_command_prints_the_page():
    out = subprocess.run([sys.executable, "-m", "sglang_specgate", "registry-doc"],
                         capture_output=True, text=True, check=True).stdout
    assert out == render()
