"""Command line: ``python -m sglang_specgate doctor [server arguments...]``."""

from __future__ import annotations

import sys

USAGE = """usage: python -m sglang_specgate doctor [SERVER ARGS...]
       python -m sglang_specgate registry-doc

  doctor         check the SGLang version, plugin discovery and every hook; with server
                 arguments (as for `sglang serve`), also resolve them and print the gate.
  registry-doc   print docs/hooks.md: every change made to SGLang, from the registries.
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "doctor":
        from sglang_specgate.doctor import run

        return run(rest)
    if command == "registry-doc" and not rest:
        from sglang_specgate.registry_doc import render

        print(render(), end="")
        return 0
    print(f"sglang_specgate: unknown command {command!r}\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
