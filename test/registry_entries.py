"""What every entry of the gate's registries (hooks.HOOKS, runtime_patches.RUNTIME_PATCHES) must
say, so that docs/hooks.md, rendered from them, carries no placeholder: a why and a how of their
own, an upstream that opens on a file:line of SGLang (checked on the installed release, when it is
the one cited: a "0.5.23: " prefix names it, and without one the entry cites 0.5.17), and a
removal that says when the entry can go."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

from sglang_specgate.sglang_versions import installed_release

SGLANG = Path(importlib.util.find_spec("sglang").origin).parent
# As SGLang's sources are cited: [0.5.23: ]srt/managers/x.py:123
LOCATION = re.compile(r"(?:(\d+\.\d+\.\d+): )?srt/([\w/]+\.py):(\d+)")
CITED_RELEASE = "0.5.17"  # the release an entry without a prefix cites
REMOVAL = re.compile(r"(When|With|\d+\.\d+(\.\d+)?) ")  # a condition, a replacement, or a release
MIN_WORDS = 8  # a why or a how explains: the shortest committed one has 9 words


def documentation_errors(entries: Sequence, name: Callable[[object], str]) -> list[str]:
    """What is wrong with how ``entries`` are documented, entry by entry; empty when nothing."""
    errors = []
    for field in ("why", "how"):
        errors += [f"the same {field} for two entries: {text!r}"
                   for text, n in Counter(getattr(e, field) for e in entries).items() if n > 1]
    for entry in entries:
        label = name(entry)
        for field in ("why", "how"):
            text = getattr(entry, field)
            if len(text.split()) < MIN_WORDS or not text.endswith("."):
                errors.append(f"{label}: {field} is not a sentence of {MIN_WORDS} words or more: {text!r}")
        location = LOCATION.match(entry.upstream)
        cited_here = location and (location.group(1) or CITED_RELEASE) == installed_release()
        source = location and SGLANG / "srt" / location.group(2)
        if not location or cited_here and not (
                source.is_file() and len(source.read_text().splitlines()) >= int(location.group(3))):
            errors.append(f"{label}: upstream does not open on a file:line of SGLang: "
                          f"{entry.upstream!r}")
        if not REMOVAL.match(entry.removal) or not entry.removal.endswith("."):
            errors.append(f"{label}: removal does not say when it can go: {entry.removal!r}")
    return errors
