"""Command-line types the benchmark's commands share."""

from __future__ import annotations

import argparse


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated integers, e.g. 16,32,64") from None
