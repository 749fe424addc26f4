"""The threshold N and where it comes from: a flag, kwarg or YAML value, or the environment.

``threshold_setting`` is the precedence both readers share: GateServerArgs (args.py) on the
parsed arguments, and the plugin, which must know whether a process asks for the gate before
SGLang parses anything (``requested_before_parsing``). Nothing here imports SGLang, so the
plugin can read it on an SGLang whose ServerArgs the gate cannot extend.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Optional

THRESHOLD_FLAG = "--speculative-disable-batch-threshold"
THRESHOLD_ENV = "SGLANG_SPEC_DISABLE_BATCH_THRESHOLD"
# The threshold's other value: the gate chooses each decode step's draft steps itself (auto_policy.py).
AUTO = "auto"
ALGORITHM_FLAG = "--speculative-algorithm"
CONFIG_FLAG = "--config"

# Not str.isdigit, which takes "²" and other Unicode digits int() rejects.
_COUNT = re.compile(r"[+-]?[0-9]+")


def parse_threshold(value: object) -> int | str:
    """A threshold: ``AUTO`` (any case, surrounding blanks ignored) or what ``parse_count`` takes."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, str) and not _COUNT.fullmatch(value.strip()):
        raise ValueError(f"must be a non-negative integer or {AUTO!r}, got {value!r}")
    return parse_count(value)


def parse_count(value: object) -> int:
    """A non-negative integer from a CLI/env string or a Python int; ValueError says why not."""
    if isinstance(value, bool):  # bool is an int subclass: True would silently mean 1
        raise ValueError(f"must be a non-negative integer, got {value!r}")
    if isinstance(value, int):
        parsed = value
    elif isinstance(value, str) and _COUNT.fullmatch(value.strip()):
        parsed = int(value.strip())
    else:
        raise ValueError(f"must be a non-negative integer, got {value!r}")
    if parsed < 0:
        raise ValueError(f"must be >= 0, got {parsed}")
    return parsed


@dataclasses.dataclass(frozen=True)
class ThresholdSetting:
    """The resolved threshold (a count, or ``AUTO``) and where it came from, so that messages
    name what was set. Truthy ``n``: the gate is asked for."""

    n: int | str
    from_env: bool = False
    # The environment's threshold where it is ignored (n is then 0): an image-wide environment
    # meeting a server that does not speculate. 0 where nothing was ignored.
    ignored_env: int | str = 0
    # The --config file the value came from, where that is known (before SGLang merges it).
    config: Optional[str] = None

    def __str__(self) -> str:
        if self.from_env:
            return f"{THRESHOLD_ENV}={self.n} in the environment"
        if self.config:
            return f"{THRESHOLD_FLAG.lstrip('-')}: {self.n} in {self.config}"
        return f"{THRESHOLD_FLAG} {self.n}"

    @property
    def auto(self) -> bool:
        return self.n == AUTO

    @property
    def removal(self) -> str:
        if self.from_env:
            return f"unset {THRESHOLD_ENV}"
        if self.config:
            return f"remove {THRESHOLD_FLAG.lstrip('-')} from {self.config}"
        return f"drop {THRESHOLD_FLAG}"


def threshold_setting(explicit: int | str | None, from_env: Callable[[], int | str | None], speculates: bool,
                      config: Optional[str] = None) -> ThresholdSetting:
    """An explicit value wins, and leaves the environment unread. An environment set for every
    server (a container image's) leaves one that does not speculate ungated (``ignored_env``):
    there is nothing to gate, where a flag asking for it is refused."""
    if explicit is not None:
        return ThresholdSetting(explicit, config=config)
    env = from_env()
    if env is None:
        return ThresholdSetting(0)
    if env and not speculates:
        return ThresholdSetting(0, ignored_env=env)
    return ThresholdSetting(env, from_env=True)


def requested_before_parsing(argv: list[str], environ: Mapping[str, str]) -> ThresholdSetting:
    """What a process's command line, the ``--config`` YAML it names and its environment ask
    for, read as SGLang will merge them (config values under the command line's, last one
    wins) but without its parser: flags written out in full, values that are not thresholds taken
    as unset (a supported SGLang's parser refuses those later)."""
    config = _config_path(argv)
    from_config = _config_tokens(config) if config else []
    given = _last_value(argv, THRESHOLD_FLAG)
    in_config = _last_value(from_config, THRESHOLD_FLAG)
    explicit = given if given is not None else in_config
    return threshold_setting(
        _threshold_or_none(explicit),
        lambda: _threshold_or_none(environ.get(THRESHOLD_ENV, "").strip() or None),
        speculates=_last_value(from_config + argv, ALGORITHM_FLAG) is not None,
        config=config if given is None and in_config is not None else None,
    )


def _threshold_or_none(value: Optional[str]) -> int | str | None:
    try:
        return None if value is None else parse_threshold(value)
    except ValueError:
        return None


def _last_value(tokens: list[str], flag: str) -> Optional[str]:
    value = None
    for i, token in enumerate(tokens):
        if token == flag and i + 1 < len(tokens):
            value = tokens[i + 1]
        elif token.startswith(flag + "="):
            value = token[len(flag) + 1:]
    return value


def _config_path(argv: list[str]) -> Optional[str]:
    # SGLang looks for this exact token and the path after it (server_args.py:9359).
    if CONFIG_FLAG not in argv:
        return None
    i = argv.index(CONFIG_FLAG)
    return argv[i + 1] if i + 1 < len(argv) else None


def _config_tokens(path: str) -> list[str]:
    """The YAML's scalar values as SGLang turns them into flags (server_args_config_parser.py);
    none where it does not read, which SGLang reports when it parses."""
    try:
        import yaml  # what SGLang reads the same file with
    except ImportError:
        return []
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: not text
        return []
    if not isinstance(data, dict):
        return []
    return [token for key, value in data.items() if not isinstance(value, (bool, list, dict))
            for token in (f"--{key}", str(value))]
