"""Coding and agentic prompts, as a `custom` dataset for ``sglang.benchmark.serving``.

EAGLE-3 drafters are trained on chat, code and tool-use traffic, and acceptance depends on the
text, so the suite benchmarks with prompts of that kind rather than random token ids. Two kinds,
both built from installed Python sources (nothing is downloaded):

* ``complete``: a function's signature and docstring, with the source lines before it in its
  file as context; the assistant turn is the function's body.
* ``tool``: two to five JSON tool schemas derived from real function signatures, and a request
  that needs one of them; the assistant turn is the tool call as JSON.

Each line is ``{"conversations": [{"role": "user", ...}, {"role": "assistant", ...}],
"kind": ..., "source": ...}``. SGLang's custom loader (``sglang/benchmark/datasets/custom.py``)
reads only ``conversations`` (turn 0 is the prompt; turn 1 gives the output length unless
``--sharegpt-output-len`` is passed) and ignores the other keys.

The same sources, seed and options give the same file. The default source is the running
interpreter's standard library, so files made by different Python versions differ: the sweep
records the file's sha256 next to its results.

    python -m benchmark.client.prompts -o prompts.jsonl --rows 4096 --seed 0
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import random
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

# Directories whose code is unlike what users ask for (test suites) or is not the stdlib.
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test",
                           "__pycache__"})
MIN_BODY_LINES, MAX_BODY_LINES = 3, 40
# Annotation or default-value type name -> JSON Schema type.
JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean",
              "list": "array", "tuple": "array", "dict": "object"}
WORDS = ("config.json", "report", "utf-8", "users", "/tmp/data", "main", "cache", "42",
         "https://example.com", "payload", "index", "alpha")


@dataclass(frozen=True)
class Param:
    name: str
    json_type: str
    required: bool
    default: Optional[str]  # source text of the default value


@dataclass(frozen=True)
class Function:
    source: str  # "relative/path.py:QualName"
    context: str  # source lines before the function in its file
    header: str  # decorators, signature and docstring, dedented
    body: str  # the rest of the function, dedented
    summary: str  # first line of the docstring
    params: tuple[Param, ...]  # without self/cls; empty if it takes *args or **kwargs


def python_files(roots: Iterable[Path]) -> Iterator[tuple[Path, Path]]:
    """(root, file) for every .py file under the roots, in a stable order."""
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if not EXCLUDED_DIRS.intersection(path.relative_to(root).parts[:-1]):
                yield root, path


def functions_in(root: Path, path: Path) -> list[Function]:
    """Module-level functions and methods of module-level classes that have a docstring."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return []  # a few stdlib files are deliberately broken or not UTF-8
    lines = text.split("\n")  # ast numbers lines by \n only (splitlines also splits on \f)
    rel = path.relative_to(root).as_posix()
    found = []
    for node, owner in _candidate_defs(tree):
        fn = _function(node, owner, lines, rel)
        if fn is not None:
            found.append(fn)
    return found


def _candidate_defs(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef, str]]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, ""
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield item, node.name + "."


def _function(node: ast.FunctionDef, owner: str, lines: list[str], rel: str) -> Optional[Function]:
    docstring = ast.get_docstring(node)
    if not docstring or len(node.body) < 2:
        return None
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    doc_end = node.body[0].end_lineno
    block = textwrap.dedent("\n".join(lines[start:node.end_lineno])).split("\n")
    split = doc_end - start
    body = "\n".join(block[split:]).rstrip()
    if not MIN_BODY_LINES <= body.count("\n") + 1 <= MAX_BODY_LINES:
        return None
    return Function(
        source=f"{rel}:{owner}{node.name}",
        context="\n".join(lines[:start]),
        header="\n".join(block[:split]),
        body=body,
        summary=docstring.strip().splitlines()[0].strip(),
        params=_params(node.args),
    )


def _params(args: ast.arguments) -> tuple[Param, ...]:
    if args.vararg or args.kwarg:
        return ()  # no fixed schema
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
    return tuple(
        Param(
            name=arg.arg,
            json_type=_json_type(arg.annotation, default),
            required=default is None,
            default=None if default is None else ast.unparse(default),
        )
        for arg, default in pairs
        if arg.arg not in ("self", "cls")
    )


def _json_type(annotation: Optional[ast.expr], default: Optional[ast.expr]) -> str:
    if isinstance(annotation, ast.Name) and annotation.id in JSON_TYPES:
        return JSON_TYPES[annotation.id]
    if isinstance(default, ast.Constant) and default.value is not None:
        return JSON_TYPES.get(type(default.value).__name__, "string")
    return "string"


def completion_row(fn: Function, context_chars: int) -> dict:
    # The last lines of the file before the function, cut at a line boundary.
    context = fn.context[-context_chars:] if context_chars > 0 else ""
    if len(context) < len(fn.context):
        context = context.partition("\n")[2]
    path = fn.source.partition(":")[0]
    prompt = (
        f"You are editing `{path}`. Here is the code that comes before the function:\n\n"
        f"```python\n{context}\n```\n\n"
        "Write the body of the following function. Reply with the body only, indented as "
        f"in the file, without repeating the signature or docstring.\n\n"
        f"```python\n{fn.header}\n```"
    )
    return _row(prompt, fn.body, "complete", fn.source)


def tool_row(target: Function, others: list[Function], rng: random.Random) -> dict:
    tools = others + [target]
    rng.shuffle(tools)
    arguments = {p.name: _value(p, rng) for p in target.params if p.required or rng.random() < 0.3}
    task = target.summary.rstrip(".") + "."
    if arguments:
        task += " Use " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in arguments.items()) + "."
    prompt = (
        "You are an agent that acts by calling tools. Answer with exactly one JSON object "
        '{"name": <tool name>, "arguments": {...}} and nothing else.\n\n'
        f"Tools:\n{json.dumps([_schema(t) for t in tools], indent=2)}\n\nTask: {task}"
    )
    call = json.dumps({"name": _tool_name(target), "arguments": arguments}, indent=2)
    return _row(prompt, call, "tool", target.source)


def _tool_name(fn: Function) -> str:
    path, _, qualname = fn.source.partition(":")
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", "_")
    return f"{module}_{qualname.replace('.', '_')}"


def _schema(fn: Function) -> dict:
    properties = {}
    for p in fn.params:
        described = f"{p.name} ({p.json_type})" + (f", default {p.default}" if p.default else "")
        properties[p.name] = {"type": p.json_type, "description": described}
    return {
        "type": "function",
        "function": {
            "name": _tool_name(fn),
            "description": fn.summary,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [p.name for p in fn.params if p.required],
            },
        },
    }


def _value(p: Param, rng: random.Random) -> object:
    return {
        "integer": lambda: rng.randint(0, 100),
        "number": lambda: round(rng.uniform(0, 10), 2),
        "boolean": lambda: rng.random() < 0.5,
        "array": lambda: rng.sample(WORDS, 2),
        "object": lambda: {rng.choice(WORDS): rng.randint(0, 9)},
    }.get(p.json_type, lambda: rng.choice(WORDS))()


def _row(prompt: str, answer: str, kind: str, source: str) -> dict:
    return {
        "conversations": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ],
        "kind": kind,
        "source": source,
    }


def default_sources() -> list[Path]:
    return [Path(sysconfig.get_paths()["stdlib"])]


def generate(
    rows: int,
    seed: int = 0,
    tool_fraction: float = 0.3,
    context_chars: int = 1500,
    sources: Optional[list[Path]] = None,
) -> list[dict]:
    """``rows`` prompts, about ``tool_fraction`` of them tool calls; each function used once."""
    rng = random.Random(seed)
    pool = [fn for root, path in python_files(sources or default_sources())
            for fn in functions_in(root, path)]
    n_tool = round(rows * tool_fraction)
    n_complete = rows - n_tool
    if n_complete > len(pool):
        raise ValueError(
            f"{rows} rows need {n_complete} distinct functions, the sources have {len(pool)}: "
            "lower --rows or --tool-fraction, or add --source directories."
        )
    # Distinct prompts per row: repeated prompts would hit SGLang's prefix cache.
    chosen = rng.sample(pool, n_complete)
    out = [completion_row(fn, context_chars) for fn in chosen]
    callable_pool = [fn for fn in pool if fn.params]
    if n_tool and len(callable_pool) < 5:
        raise ValueError(f"only {len(callable_pool)} functions with fixed parameters for tool rows")
    for _ in range(n_tool):
        picked = rng.sample(callable_pool, rng.randint(2, 5))
        out.append(tool_row(picked[0], picked[1:], rng))
    rng.shuffle(out)
    return out


def write_jsonl(rows: list[dict], path: Path) -> str:
    """Write the rows; return the file's sha256."""
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The generator's options, shared with sweep.py."""
    parser.add_argument("--rows", type=int, default=4096, help="number of prompts (default 4096)")
    parser.add_argument("--prompt-seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument("--tool-fraction", type=float, default=0.3,
                        help="share of tool-call prompts (default 0.3)")
    parser.add_argument("--context-chars", type=int, default=1500,
                        help="characters of preceding file context in completion prompts")
    parser.add_argument("--source", type=Path, action="append", default=None,
                        help="directory of Python sources (repeatable; default: the stdlib)")


def generate_from_args(args: argparse.Namespace) -> list[dict]:
    return generate(args.rows, args.prompt_seed, args.tool_fraction, args.context_chars,
                    args.source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, required=True, help="JSONL file to write")
    add_arguments(parser)
    args = parser.parse_args()
    rows = generate_from_args(args)
    digest = write_jsonl(rows, args.output)
    kinds = {k: sum(r["kind"] == k for r in rows) for k in ("complete", "tool")}
    print(f"wrote {len(rows)} prompts {kinds} to {args.output} (sha256 {digest})")


if __name__ == "__main__":
    main()
