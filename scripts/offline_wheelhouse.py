"""Build a wheelhouse for installing sglang-specgate (and its pinned SGLang) without a network.

On a machine that reaches PyPI (any OS, any Python >= 3.10 with pip):

    python scripts/offline_wheelhouse.py --dest wheelhouse [--sglang 0.5.17] [--python-version 3.12]
        [--platform manylinux_2_34_x86_64] [--dry-run] [-- EXTRA PIP ARGS]

Then copy the folder and, on the air-gapped host (Python and platform as given):

    python3 -m pip install --no-index --find-links wheelhouse -r wheelhouse/requirements.txt

The resolution is pip's own (`pip install --dry-run --report`, kept as report.json), done
once; its pins and sha256 hashes become wheelhouse/requirements.txt, and the download fetches
exactly those files. --dry-run stops after writing requirements.txt: it reads wheel metadata
(PEP 658 files, or HTTP range requests into each wheel where an index has none) instead of
downloading the ~4 GB of wheels. Extra pip args (after --), e.g. an internal mirror's
--index-url, go to both the resolution and the download.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# sglang 0.5.17 ships manylinux_2_34 wheels only, so that is the oldest glibc it runs on.
DEFAULT_PLATFORM = "manylinux_2_34_x86_64"
# The upstream CUDA 13 image and the project's GPU host both run CPython 3.12.
DEFAULT_PYTHON = "3.12"


def platform_tags(platform: str) -> list[str]:
    """pip takes --platform literally: manylinux_2_34 does not admit manylinux_2_28 wheels
    (pip expands only the legacy manylinux2014/2010 names). Spell out every older glibc."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    newest, arch = int(m.group(1)), m.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(newest, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return tags


def target_args(python_version: str, platform: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in platform_tags(platform):
        args += ["--platform", tag]
    return args


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def build_own_wheel(dest: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        pip("wheel", "--quiet", "--no-deps", "--wheel-dir", tmp, str(ROOT))
        (built,) = Path(tmp).glob("*.whl")
        return Path(shutil.copy2(built, dest))


def resolve(wheel: str, sglang: str, target: list[str], pip_args: list[str], report: Path) -> list[str]:
    """Pins with hashes for every wheel the target needs, with SGLang ``sglang``:
    requirements.txt lines."""
    with tempfile.TemporaryDirectory() as scratch:
        # --target: pip refuses --platform/--python-version for an install into this
        # interpreter; --dry-run writes nothing there. fast-deps: see the module docstring.
        dry_run = ["--dry-run", "--ignore-installed", "--target", scratch, "--report", str(report)]
        pip("install", "--quiet", "--use-feature=fast-deps", *dry_run, *target, *pip_args, wheel, f"sglang=={sglang}")
    lines = []
    for item in json.loads(report.read_text())["install"]:
        meta = item["metadata"]
        sha256 = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{meta['name']}=={meta['version']} --hash=sha256:{sha256}")
    return sorted(lines, key=str.lower)


def download(requirements: Path, dest: Path, target: list[str], pip_args: list[str]) -> None:
    # The pins carry hashes, so pip checks every file it fetches against the resolution.
    fetch = ["--no-deps", "--dest", str(dest), "--find-links", str(dest)]
    pip("download", "--quiet", *fetch, *target, *pip_args, "-r", str(requirements))


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    ours, pip_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, required=True, help="wheelhouse folder")
    # The plugin allows every supported release; the default is the one its fast off path has
    # run on a GPU with (sglang_versions.FAST_OFF_PATH_RELEASES). pip refuses an unsupported one.
    parser.add_argument("--sglang", default="0.5.17", help="the SGLang release to pin (a supported one)")
    parser.add_argument("--python-version", default=DEFAULT_PYTHON, help="target X.Y")
    parser.add_argument("--platform", default=DEFAULT_PLATFORM, help="target wheel platform tag")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve and write requirements.txt; download no dependency",
    )
    args = parser.parse_args(ours)
    if sys.version_info[:2] != tuple(int(x) for x in args.python_version.split(".")):
        # pip evaluates dependency markers (python_version < "3.12", ...) for the running
        # interpreter, whatever --python-version says.
        print(
            f"note: markers are evaluated for this Python {sys.version_info.major}."
            f"{sys.version_info.minor}; run with Python {args.python_version} for an exact "
            "set.",
            file=sys.stderr,
        )

    args.dest.mkdir(parents=True, exist_ok=True)
    target = target_args(args.python_version, args.platform)
    pins = resolve(str(build_own_wheel(args.dest)), args.sglang, target, pip_args, args.dest / "report.json")
    requirements = args.dest / "requirements.txt"
    requirements.write_text("".join(f"{line}\n" for line in pins))
    print(f"{len(pins)} wheels pinned in {requirements}")
    if args.dry_run:
        return 0
    download(requirements, args.dest, target, pip_args)
    print(
        "install on the air-gapped host with:\n"
        f"  python3 -m pip install --no-index --find-links {args.dest} -r {requirements}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
