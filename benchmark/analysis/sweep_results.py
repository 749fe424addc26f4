"""A sweep's rows as the report reads them: each run folder's raw.jsonl (closed levels),
gate.jsonl (the gate's counters and what was read around each level), bursty.jsonl and
profiles, pooled over several folders, the later row winning for the same tag."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

BASELINES = ("plain", "spec")


def load_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def config_of(tag: str) -> str:
    """``"gate-8,c=16"`` -> ``"gate-8"``: the sweep starts every tag with its configuration."""
    return tag.split(",")[0]


def tag_fields(tag: str) -> dict[str, str]:
    """``"gate-8,bursty,phase=1,rate=32,s=60"`` -> ``{"phase": "1", "rate": "32", "s": "60"}``."""
    return dict(part.split("=", 1) for part in tag.split(",") if "=" in part)


@dataclass
class Results:
    closed: dict[str, dict[int, dict]] = field(default_factory=dict)  # config -> C -> row
    # config -> C -> rows of a repeated level, in run order (its row in ``closed``: median_level)
    repeats: dict[str, dict[int, list[dict]]] = field(default_factory=dict)
    gate: dict[str, dict] = field(default_factory=dict)  # tag -> gate.jsonl row
    bursty: dict[str, list[dict]] = field(default_factory=dict)  # config -> phase rows
    # phase (decode, prefill, level) -> config -> profile-[<phase>-]<config>.json
    profiles: dict[str, dict[str, dict]] = field(default_factory=dict)

    def envelope(self) -> dict[int, float]:
        """max(plain, always-on) output tok/s at each concurrency measured for both."""
        plain, spec = (self.closed.get(name, {}) for name in BASELINES)
        return {c: max(plain[c]["output_throughput"], spec[c]["output_throughput"])
                for c in sorted(plain.keys() & spec.keys())}

    def gated(self) -> list[str]:
        return [name for name in self.closed if name not in BASELINES]

    def against_plain(self) -> Iterator[tuple[str, int, dict, dict]]:
        """Each gate's closed-loop level where plain ran the same concurrency: (the gate, C, its
        row, plain's row)."""
        plain = self.closed.get("plain", {})
        for name in self.gated():
            for c in sorted(plain.keys() & self.closed[name].keys()):
                yield name, c, self.closed[name][c], plain[c]


def repeat_of(tag: str) -> int:
    return int(tag_fields(tag).get("rep", 1))


def median_level(rows: list[dict]) -> dict:
    """The run of median throughput, the lower middle one of an even count: a level that ran, so
    its latencies and gate counters (gate.jsonl, by its tag) come with it."""
    return sorted(rows, key=lambda r: r["output_throughput"])[(len(rows) - 1) // 2]


def load(run_dirs: Iterable[Path]) -> Results:
    res = Results()
    latest: dict[str, dict] = {}  # tag -> closed-loop row
    for run in run_dirs:
        for row in load_jsonl(run / "raw.jsonl"):
            latest[row["tag"]] = row
        for row in load_jsonl(run / "gate.jsonl"):
            res.gate[row["tag"]] = row
        phases: dict[str, dict[int, dict]] = {}
        for row in load_jsonl(run / "bursty.jsonl"):
            phases.setdefault(config_of(row["tag"]), {})[int(tag_fields(row["tag"])["phase"])] = row
        for name, by_phase in phases.items():
            res.bursty[name] = [by_phase[k] for k in sorted(by_phase)]
        for path in sorted(run.glob("profile-*.json")):
            profile = json.loads(path.read_text())
            # Profiles written before prefill ones existed carry no phase: they are decode.
            res.profiles.setdefault(profile.get("phase", "decode"), {})[profile["config"]] = profile
    levels: dict[str, dict[int, list[dict]]] = {}
    for row in latest.values():
        levels.setdefault(config_of(row["tag"]), {}).setdefault(row["max_concurrency"], []).append(row)
    for name, by_c in levels.items():
        res.closed[name] = {c: median_level(rows) for c, rows in by_c.items()}
        repeated = {c: sorted(rows, key=lambda r: repeat_of(r["tag"])) for c, rows in by_c.items() if len(rows) > 1}
        if repeated:
            res.repeats[name] = repeated
    return res
