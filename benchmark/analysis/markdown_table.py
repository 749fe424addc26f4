"""Markdown tables and their cells, as every table of the report writes them."""

from __future__ import annotations

from typing import Optional


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(value: Optional[float], digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def in_order(values: list[float], digits: int) -> str:
    """A level's runs, in the order they ran."""
    return " · ".join(fmt(v, digits) for v in values)
