"""The sweep's server configurations, and the command line that starts each one.

``plain`` decodes without speculation; ``spec`` runs EAGLE drafting (a chain, or a tree with
``--speculative-eagle-topk``) always; ``upstream-gate`` is upstream's own hard gate
(``--speculative-adaptive``) and ``gate`` this plugin's, each once per threshold N; ``gate-auto``
is this plugin's gate choosing its draft steps itself, and ``upstream-adaptive`` upstream's
``--speculative-adaptive`` with its defaults. Every server gets the same batch range, so that only
the decoding differs. With ``--upstream-as-shipped`` upstream's configurations run without this
plugin loaded: SGLang as its users get it, and a failure there is upstream's own.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

CONFIG_KINDS = ("plain", "spec", "upstream-gate", "gate", "gate-auto", "upstream-adaptive")
GATE_KINDS = ("upstream-gate", "gate")
UPSTREAM_ADAPTIVE_KINDS = ("upstream-gate", "upstream-adaptive")  # upstream's --speculative-adaptive

# SGLang loads only the plugins SGLANG_PLUGINS names, when set (plugins/__init__.py:51-70): no
# plugin is called this, so none loads.
NO_PLUGINS = ("SGLANG_PLUGINS", "none")

# --interleave: the servers share the GPU, all of them together this fraction of its memory
# (the rest is activations). SGLang makes a server's static memory --mem-fraction-static of the
# memory free when it starts (kv_cache_configurator.py:1616-1625, resized after graph capture
# to the same bound, kv_pool_runtime.py:53), so each later server gets a larger fraction of less.
INTERLEAVED_MEMORY = 0.85


@dataclass(frozen=True)
class Speculation:
    """The EAGLE flags shared by every speculative configuration: chain drafting (topk 1,
    S + 1 draft tokens) unless ``topk`` makes it a tree of ``num_draft_tokens``."""

    algorithm: str
    draft_model_path: str
    num_steps: int
    draft_load_format: Optional[str]
    topk: int = 1
    num_draft_tokens: Optional[int] = None  # None: S + 1, a chain's

    def flags(self) -> list[str]:
        flags = [
            "--speculative-algorithm", self.algorithm,
            "--speculative-draft-model-path", self.draft_model_path,
            "--speculative-num-steps", str(self.num_steps),
            "--speculative-eagle-topk", str(self.topk),
            "--speculative-num-draft-tokens", str(self.num_draft_tokens or self.num_steps + 1),
        ]
        if self.draft_load_format:
            flags += ["--speculative-draft-load-format", self.draft_load_format]
        return flags

    def why_not(self, kinds: list[str]) -> Optional[str]:
        """What in these configurations cannot run with this drafting, with the fix; None if nothing."""
        if self.topk == 1:
            return None
        if self.num_draft_tokens is None:
            return "--speculative-eagle-topk > 1 drafts a tree: give its size, --speculative-num-draft-tokens D"
        upstream = [kind for kind in kinds if kind in UPSTREAM_ADAPTIVE_KINDS]
        if upstream:
            # adaptive_spec_params.py:59-66: it logs a warning and runs the server always on.
            return (f"{', '.join(upstream)}: upstream's --speculative-adaptive turns itself off with "
                    "--speculative-eagle-topk > 1, so it would measure always-on speculation: drop it, "
                    "or use --speculative-eagle-topk 1")
        return None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Speculation":
        """From the options of ``add_server_arguments``."""
        return cls(args.speculative_algorithm, args.draft_model_path or "", args.speculative_num_steps,
                   args.draft_load_format, args.speculative_eagle_topk, args.speculative_num_draft_tokens)


@dataclass(frozen=True)
class ServerConfig:
    """One server of the sweep; ``name`` starts every tag of its rows."""

    name: str
    flags: tuple[str, ...]
    # Written to run_dir/<name>.json before the server starts (upstream gate only).
    adaptive_config: Optional[dict] = None
    port: Optional[int] = None  # None: the sweep's --port (servers that run one at a time)
    env: tuple[tuple[str, str], ...] = ()  # set for the server's processes only


@dataclass(frozen=True)
class UpstreamOptions:
    """How upstream's --speculative-adaptive servers start (add_upstream_argument)."""

    as_shipped: bool = False  # without this plugin loaded
    adaptive_steps: Optional[int] = None  # upstream-adaptive's draft steps; None: the others'

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "UpstreamOptions":
        return cls(args.upstream_as_shipped, args.upstream_adaptive_steps)


def server_configs(kinds: list[str], thresholds: list[int], spec: Speculation,
                   run_dir: Path, upstream: UpstreamOptions = UpstreamOptions()) -> list[ServerConfig]:
    """The configurations to compare, in the order given; gates once per threshold."""
    upstream_env = (NO_PLUGINS,) if upstream.as_shipped else ()
    configs = []
    for kind in kinds:
        if kind == "plain":
            configs.append(ServerConfig("plain", ()))
        elif kind == "spec":
            configs.append(ServerConfig("spec", tuple(spec.flags())))
        elif kind == "upstream-gate":
            # Upstream's own hard gate (--speculative-adaptive with single-candidate slots):
            # S steps up to batch N, the steps-0 state above.
            for n in thresholds:
                name = f"upstream-gate-{n}"
                configs.append(ServerConfig(
                    name,
                    (*spec.flags(), "--speculative-adaptive",
                     "--speculative-adaptive-config", str(run_dir / f"{name}.json")),
                    adaptive_config={"1": {"candidate_steps": [spec.num_steps]},
                                     str(n + 1): {"candidate_steps": [0]}},
                    env=upstream_env,
                ))
        elif kind == "gate":
            for n in thresholds:
                configs.append(ServerConfig(
                    f"gate-{n}",
                    (*spec.flags(), "--speculative-disable-batch-threshold", str(n)),
                ))
        elif kind == "gate-auto":
            configs.append(ServerConfig("gate-auto", (*spec.flags(), "--speculative-disable-batch-threshold", "auto")))
        elif kind == "upstream-adaptive":
            # Upstream's acceptance-driven step choice with its default slots (adaptive_spec_params.py).
            adaptive = spec if upstream.adaptive_steps is None else replace(
                spec, num_steps=upstream.adaptive_steps, num_draft_tokens=None)
            configs.append(ServerConfig("upstream-adaptive", (*adaptive.flags(), "--speculative-adaptive"),
                                        env=upstream_env))
        else:
            raise ValueError(f"unknown configuration {kind!r}; choose from {CONFIG_KINDS}")
    return configs


def server_command(args: argparse.Namespace, config: ServerConfig) -> list[str]:
    return [
        *(["env", *(f"{name}={value}" for name, value in config.env)] if config.env else []),
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", args.model_path,
        "--host", args.host, "--port", str(server_port(args, config)),
        # The same batch range for every configuration: SGLang's defaults differ between
        # plain and speculative servers (48 running requests under speculation).
        "--max-running-requests", str(args.max_running_requests),
        "--cuda-graph-max-bs", str(args.cuda_graph_max_bs),
        *config.flags, *args.server_flags,
    ]


def server_port(args: argparse.Namespace, config: ServerConfig) -> int:
    return args.port if config.port is None else config.port


def base_url(args: argparse.Namespace, config: Optional[ServerConfig] = None) -> str:
    """Where ``config``'s server listens; without one, the sweep's --port."""
    return f"http://{args.host}:{args.port if config is None else server_port(args, config)}"


def side_by_side(args: argparse.Namespace, configs: list[ServerConfig]) -> list[ServerConfig]:
    """--interleave: each server on its own port with an equal share of the GPU's memory
    (INTERLEAVED_MEMORY), sleeping while idle so that its scheduler does not spin on a CPU the
    measured server's processes could use."""
    share = INTERLEAVED_MEMORY / len(configs)
    return [replace(config, port=args.port + k,
                    flags=(*config.flags, "--mem-fraction-static", f"{share / (1 - k * share):.3f}",
                           "--sleep-on-idle"))
            for k, config in enumerate(configs)]


def split_server_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """The script's own arguments, and those after ``--`` (passed to every server)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def add_server_arguments(p: argparse.ArgumentParser, *, model_required: bool,
                         max_running_default: str) -> None:
    """The options that say how to start a server (``server_command``); soak.py shares them."""
    p.add_argument("--model-path", required=model_required, help="target model")
    p.add_argument("--draft-model-path", help="EAGLE-3 draft model")
    p.add_argument("--speculative-algorithm", default="EAGLE3")
    p.add_argument("--speculative-num-steps", type=int, default=3,
                   help="draft steps S (chain drafting: topk 1, S+1 draft tokens)")
    p.add_argument("--speculative-eagle-topk", type=int, default=1,
                   help="K > 1: tree drafting, with --speculative-num-draft-tokens")
    p.add_argument("--speculative-num-draft-tokens", type=int, help="a tree's draft tokens D")
    p.add_argument("--draft-load-format", help="e.g. dummy, for config-only draft models")
    p.add_argument("--max-running-requests", type=int,
                   help=f"for every server (default: {max_running_default})")
    p.add_argument("--cuda-graph-max-bs", type=int,
                   help="for every server (default: --max-running-requests)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--server-timeout", type=float, default=900, help="seconds to become healthy")


def _draft_steps(text: str) -> int:
    steps = int(text) if text.isdigit() else 0
    if steps < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of draft steps >= 1")
    return steps


def add_upstream_argument(p: argparse.ArgumentParser) -> None:
    """For the scripts that start upstream's configurations (server_configs' upstream_as_shipped)."""
    p.add_argument("--upstream-as-shipped", action="store_true",
                   help="start upstream's --speculative-adaptive servers (upstream-gate, upstream-adaptive) "
                   "without this plugin loaded, as SGLang ships")
    p.add_argument("--upstream-adaptive-steps", type=_draft_steps, metavar="S",
                   help="draft steps of the upstream-adaptive server (default: --speculative-num-steps): "
                   "its default slots reach 7, and on SGLang 0.5.17 a server of fewer steps crashes at start-up")
