"""benchmark/ keeps the layout its README states: imports go one way between its packages
(client -> analysis -> servers; pairs, cli and results_index on their own), with no cycle, read
from the source with ``ast`` (nothing is imported); and no module grows past MAX_LINES, the size
past which one file held several concepts (sweep.py had reached 1,229 lines)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
# Each package may import its own modules and those of the packages after it in this order.
LAYERS = ("client", "analysis", "servers")
ON_THEIR_OWN = {"pairs": "benchmark.pairs", "cli": "benchmark.cli", "results_index": "benchmark.results_index"}
MAX_LINES = 500


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, package: str = "benchmark") -> dict[str, set[str]]:
    """Each module of ``package`` (under ``root``) and the modules of ``package`` it imports,
    function-level imports included."""
    paths = {module_name(path, root): path for path in (root / package).rglob("*.py")
             if "results" not in path.relative_to(root / package).parts}
    graph = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package this module is in
                    anchor = name.split(".")[:len(name.split(".")) - node.level + is_package]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import module` imports that module; `from module import name`, the module.
                imported |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                             for alias in node.names}
        graph[name] = {m for m in imported if m == package or m.startswith(package + ".")} - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    """A chain of imports that comes back to its start, or None."""
    done: set[str] = set()

    def visit(name: str, chain: list[str]) -> Optional[list[str]]:
        if name in chain:
            return chain[chain.index(name):] + [name]
        if name in done:
            return None
        for imported in sorted(graph.get(name, ())):
            cycle = visit(imported, chain + [name])
            if cycle:
                return cycle
        done.add(name)
        return None

    return next((cycle for name in sorted(graph) if (cycle := visit(name, []))), None)


def part_of(name: str) -> str:
    """The package a module belongs to (``client``, ``pairs``, ...), or its own name at the top."""
    return name.split(".")[1] if name.count(".") else ""


def test_benchmark_imports_have_no_cycle() -> None:
    assert find_cycle(import_graph(ROOT)) is None


def test_imports_go_one_way_between_the_packages() -> None:
    wrong = []
    for name, imported in import_graph(ROOT).items():
        part = part_of(name)
        for other in imported:
            target = part_of(other)
            if part in LAYERS:
                allowed = target in LAYERS[LAYERS.index(part):] or other == "benchmark.cli"
            elif part in ON_THEIR_OWN:
                allowed = other.startswith(ON_THEIR_OWN[part])
            else:  # the commands' entry scripts, and the package itself
                allowed = True
            if not allowed:
                wrong.append(f"{name} imports {other}")
    assert wrong == []


def test_no_module_passes_max_lines() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for path in (ROOT / "benchmark").rglob("*.py")
             if "results" not in path.relative_to(ROOT / "benchmark").parts}
    assert len(sizes) > 30  # the package's modules were found
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}


def test_the_checks_see_a_cycle_and_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "benchmark"
    (package / "client").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "client" / "__init__.py").write_text("from . import a\n")
    (package / "client" / "a.py").write_text("def f():\n    from benchmark.client.b import g\n")
    (package / "client" / "b.py").write_text("from .a import f\nimport json\n")
    graph = import_graph(tmp_path)
    assert graph == {"benchmark": set(), "benchmark.client": {"benchmark.client.a"},
                     "benchmark.client.a": {"benchmark.client.b"}, "benchmark.client.b": {"benchmark.client.a"}}
    assert find_cycle(graph) == ["benchmark.client.a", "benchmark.client.b", "benchmark.client.a"]
