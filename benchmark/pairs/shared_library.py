"""Whether a shared library built on a CPU host will load on the GPU host: the symbols it leaves
undefined, against those the libraries it needs define (read with binutils' readelf and nm)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def needed(library: Path) -> list[str]:
    """The libraries ``library`` names for the dynamic loader (its DT_NEEDED entries)."""
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].split("]", 1)[0] for line in dynamic.splitlines() if "(NEEDED)" in line]


def dynamic_symbols(library: Path, *, defined: bool) -> set[str]:
    """Its dynamic symbols, defined or undefined (weak undefined ones, which may stay so, left
    out), each without its version."""
    listing = subprocess.run(["nm", "-D", "--format=posix", "--defined-only" if defined else "--undefined-only",
                              str(library)], capture_output=True, text=True, check=True).stdout
    symbols = set()
    for line in listing.splitlines():
        name, kind = line.split()[:2]
        if kind not in "wv":  # weak and undefined; "W" and "V" are weak definitions, which count
            symbols.add(name.split("@", 1)[0])
    return symbols


def loader_paths() -> dict[str, Path]:
    """Where the dynamic loader finds each system library, by name (ldconfig's cache)."""
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in cache.splitlines()[1:]:
        name, _, path = line.strip().partition(" => ")
        found.setdefault(name.split(" (", 1)[0], Path(path))
    return found


def unresolved_symbols(library: Path, search_dirs: tuple[Path, ...]) -> list[str]:
    """``library``'s undefined symbols that none of the libraries it needs defines, each looked
    for in ``search_dirs`` first, then where the loader looks."""
    system = loader_paths()
    defined: set[str] = set()
    for name in needed(library):
        path = next((d / name for d in search_dirs if (d / name).exists()), system.get(name))
        if path is None:
            raise FileNotFoundError(f"{library.name} needs {name}, which is on none of {search_dirs} nor the loader's path")
        defined |= dynamic_symbols(path, defined=True)
    return sorted(dynamic_symbols(library, defined=False) - defined)
