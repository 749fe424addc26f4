"""Where a server process's Python time goes, from py-spy's raw samples.

``py-spy record --threads --idle -f raw -p PID -o FILE`` writes one line per distinct stack:
``thread (TID): NAME;frame;...;frame COUNT``, each frame ``function (file:line)``, outermost
first. For one thread (the scheduler's event loop runs on its ``MainThread``) this gives each
function's share of the samples: inclusive (anywhere on the stack) and self (on top). With
``--idle``, waiting (on the GPU, a lock, a socket) counts too, so the shares are of wall time.

Comparing a gated server's off steps with a plain server's under the same load shows what the
off state adds on the CPU side (the synchronize in SGLang's speculative prefill that
chunked_prefill_tail.py removes was found so).

    python -m benchmark.analysis.cpu_profile pyspy-idle-plain-c64.txt pyspy-idle-gate-9-c64.txt --top 30

``sweep.py --cpu-profile-level C`` records these files itself, one per server, with
``record_command`` on the process ``servers.processes.scheduler_pid`` finds, and writes the
table beside them.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

# torch's Event.synchronize and Stream.synchronize: where the host waits for the GPU.
GPU_WAIT = "synchronize (streams.py)"

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


@dataclass
class Shares:
    samples: int
    inclusive: Counter  # function -> samples with it on the stack
    self_time: Counter  # function -> samples with it on top
    gpu_waits: Counter  # function -> samples of it waiting for the GPU (its callee on top)

    def percent(self, counter: Counter, function: str) -> float:
        return 100 * counter[function] / self.samples if self.samples else 0.0


def record_command(py_spy: str, pid: int | str, out: Path) -> list[str]:
    """py-spy sampling ``pid`` until interrupted, every thread, waits included (wall time)."""
    return [py_spy, "record", "--threads", "--idle", "-f", "raw", "-p", str(pid), "-o", str(out)]


def function_of(frame: str) -> str:
    """``"run_batch (sglang/srt/managers/scheduler.py:1204)"`` -> ``"run_batch (scheduler.py)"``:
    one entry per function, whatever line was running."""
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    return f"{match['function']} ({Path(match['file']).name})"


def shares(raw_text: str, thread: str = "MainThread") -> Shares:
    """The samples of the threads named ``thread`` (all samples when py-spy ran without
    ``--threads``)."""
    inclusive: Counter = Counter()
    self_time: Counter = Counter()
    gpu_waits: Counter = Counter()
    total = 0
    for line in raw_text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames[0].startswith("thread ("):
            if frames[0].split(": ", 1)[-1] != thread:
                continue
            frames = frames[1:]
        n = int(count)
        total += n
        functions = [function_of(f) for f in frames]
        for function in set(functions):
            inclusive[function] += n
        if functions:
            self_time[functions[-1]] += n
        if len(functions) > 1 and functions[-1].endswith(GPU_WAIT):
            gpu_waits[functions[-2]] += n
    return Shares(total, inclusive, self_time, gpu_waits)


def ranked_table(profiles: dict[str, Shares], top: int, by: Callable[[Shares], Counter], first: str,
                 column: str, cell: Callable[[Shares, str], str]) -> str:
    """The ``top`` functions of the last profile's ``by`` counter, a column for every profile."""
    ranked = [f for f, _ in by(list(profiles.values())[-1]).most_common(top)]
    header = [first] + [f"{n} {column}" for n in profiles]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for function in ranked:
        lines.append(f"| `{function}` | " + " | ".join(cell(p, function) for p in profiles.values()) + " |")
    return "\n".join(lines) + "\n"


def table(profiles: dict[str, Shares], top: int) -> str:
    """The ``top`` functions by inclusive share in the last profile, with every profile's
    inclusive and self share."""
    text = ranked_table(profiles, top, lambda p: p.inclusive, "function", "incl. % / self %",
                        lambda p, f: f"{p.percent(p.inclusive, f):.1f} / {p.percent(p.self_time, f):.1f}")
    samples = " · ".join(f"{n}: {p.samples} samples" for n, p in profiles.items())
    return text + f"\n{samples}\n"


def waits_table(profiles: dict[str, Shares], top: int) -> str:
    """Where each host waited for the GPU: the function that called the synchronize, ranked in
    the last profile. A wait while results are processed is slack; a wait before a launch holds
    the next step back."""
    return ranked_table(profiles, top, lambda p: p.gpu_waits, "waiting for the GPU in", "% of samples",
                        lambda p, f: f"{p.percent(p.gpu_waits, f):.1f}")


def tables(profiles: dict[str, Shares], top: int) -> str:
    """Both tables: every function's share, then where each host waited for the GPU."""
    return table(profiles, top) + "\n" + waits_table(profiles, top)


def column_names(paths: list[Path]) -> list[str]:
    """Each file's name without suffix, or with its folder where two runs named theirs alike."""
    stems = [path.stem for path in paths]
    return [f"{path.parent.name}/{path.stem}" if stems.count(path.stem) > 1 else path.stem
            for path in paths]


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("raw", type=Path, nargs="+", help="py-spy raw files; the last one ranks")
    p.add_argument("--thread", default="MainThread")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    missing = [str(path) for path in args.raw if not path.is_file()]
    if missing:
        p.error(f"no py-spy raw file at {', '.join(missing)}")
    profiles = {name: shares(path.read_text(), args.thread)
                for name, path in zip(column_names(args.raw), args.raw)}
    print(tables(profiles, args.top), end="")


if __name__ == "__main__":
    main()
