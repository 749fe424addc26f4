"""Deployment: docker/, .github/workflows/ and scripts/offline_wheelhouse.py.

There is no Docker engine, GitHub runner or GPU here, so: the Dockerfile and the workflows are
linted by pinned hadolint and actionlint (from the `test` extra); the Dockerfile's own install
commands run against this environment's SGLang as if it were the base image's; its HEALTHCHECK
command runs against a stub server; the offline wheelhouse resolves in full without
downloading the wheels. Needs PyPI (pip builds the plugin and resolves the wheelhouse).
"""

from __future__ import annotations

import http.server
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest
import yaml

from sglang_specgate.sglang_versions import SGLANG_REQUIREMENT, SUPPORTED_SGLANG_VERSIONS

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
# Where the Dockerfile puts the plugin's sources inside the image.
INSTALL_DIR = "/opt/sglang-specgate"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
WHEELHOUSE_SCRIPT = ROOT / "scripts" / "offline_wheelhouse.py"


def tool(name: str) -> str:
    """A linter binary from the `test` extra, installed next to this interpreter's scripts."""
    path = shutil.which(name, path=sysconfig.get_path("scripts"))
    assert path, f"{name} is missing: pip install '.[test]' installs it"
    return path


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of each Dockerfile instruction, continuation lines joined."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (keyword.upper(), rest.strip())
        for keyword, _, rest in (line.partition(" ") for line in lines if line and line[0] != "#")
    ]


def build_args() -> dict[str, str]:
    return dict(value.split("=", 1) for keyword, value in instructions() if keyword == "ARG")


def in_image(text: str, image_root: Path) -> str:
    return text.replace(INSTALL_DIR, str(image_root / INSTALL_DIR.lstrip("/")))


@pytest.fixture(scope="module")
def image_root(tmp_path_factory) -> Path:
    """The Dockerfile's COPY instructions carried out into a scratch 'image' filesystem."""
    root = tmp_path_factory.mktemp("image")
    for keyword, value in instructions():
        if keyword == "COPY":
            *sources, dest = value.split()
            assert dest.startswith(INSTALL_DIR), dest
            for source in sources:
                target = Path(in_image(dest, root))
                if dest.endswith("/"):
                    target = target / Path(source).name
                target.parent.mkdir(parents=True, exist_ok=True)
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target)
                else:
                    shutil.copy2(ROOT / source, target)
    return root


def test_hadolint_reports_a_known_problem():
    # Guards against a linter that passes everything (a broken wheel, a wrong binary).
    result = run([tool("hadolint"), "--no-color", "-"], input="FROM ubuntu\n")
    assert result.returncode != 0 and "DL3006" in result.stdout


def test_dockerfile_passes_hadolint(tmp_path):
    # HOME elsewhere: no personal hadolint config may relax the check; -t style: fail on any
    # finding, not only on warnings and errors.
    result = run(
        [tool("hadolint"), "--no-color", "-t", "style", str(DOCKERFILE)],
        env={"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_builds_on_the_pinned_sglang_release():
    args = build_args()
    (base,) = [value for keyword, value in instructions() if keyword == "FROM"]
    resolved = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    assert resolved == "lmsysorg/sglang:v0.5.17-cu130"  # the release the fast off path ran on a GPU with
    assert args["SGLANG_VERSION"] in SUPPORTED_SGLANG_VERSIONS


def test_the_dependency_allows_the_supported_releases():
    from packaging.requirements import Requirement

    (requirement,) = [Requirement(r) for r in importlib.metadata.requires("sglang-specgate") if r.startswith("sglang")]
    assert requirement == Requirement(SGLANG_REQUIREMENT)
    assert all(requirement.specifier.contains(release) for release in SUPPORTED_SGLANG_VERSIONS)


def test_dockerignore_lets_every_copy_source_through():
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for keyword, value in instructions():
        if keyword == "COPY":
            for source in value.split()[:-1]:
                assert source.rstrip("/") in allowed, f"{source} is excluded by .dockerignore"


def test_dockerfile_install_commands_work_on_the_installed_sglang(image_root, tmp_path):
    """The RUN steps, verbatim but for the install path, in a fresh venv that sees this
    environment's SGLang the way the plugin sees the base image's."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    query = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = run([str(venv / "bin" / "python"), "-c", query], check=True).stdout.strip()
    base_site = sysconfig.get_path("purelib")
    Path(site, "base_image.pth").write_text(f"import site; site.addsitedir({base_site!r})\n")
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    steps = [value for keyword, value in instructions() if keyword == "RUN"]
    assert steps
    for step in steps:
        result = run(["/bin/sh", "-c", in_image(step, image_root)], env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    assert "doctor: all checks passed" in result.stdout


class _Health(http.server.BaseHTTPRequestHandler):
    status = 503

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_healthcheck_follows_server_state(image_root, tmp_path):
    (healthcheck,) = [value for keyword, value in instructions() if keyword == "HEALTHCHECK"]
    command = json.loads(in_image(healthcheck.split(" CMD ", 1)[1], image_root))
    assert command[0] == "python3"
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = str(server.server_address[1])

    def probe(**env) -> int:
        env = {"SPECGATE_HEALTH_PORT": port, "HOME": str(tmp_path), **env}
        return run([sys.executable, *command[1:]], env=env, timeout=30).returncode

    try:
        assert probe() == 1  # starting: 503
        _Health.status = 200
        assert probe() == 0
        # A proxy for the whole container must not intercept the loopback probe.
        assert probe(HTTP_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9") == 0
    finally:
        server.shutdown()
        server.server_close()
    assert probe() == 1  # nothing listens any more


def test_actionlint_reports_a_known_problem():
    bad = "on: push\njobs:\n  a:\n    runs-on: no-such-runner\n    steps:\n      - run: x\n"
    assert run([tool("actionlint"), "-"], input=bad).returncode != 0


def test_workflows_pass_actionlint():
    result = run(
        [
            tool("actionlint"),
            "-config-file",
            str(ROOT / ".github" / "actionlint.yaml"),
            "-shellcheck",
            tool("shellcheck"),
            *map(str, WORKFLOWS),
        ],
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_pass_shellcheck():
    # The device plans are sourced by gpu_job.sh, which runs them under bash; a mistake in one
    # shows only on the GPU host, after its install, in device minutes.
    listed = run(["git", "ls-files", "*.sh", ".ci/run"], cwd=ROOT, check=True).stdout.split()
    assert "benchmark/gpu_job.sh" in listed and "benchmark/plans/robustness.sh" in listed
    result = run([tool("shellcheck"), "--severity=warning", "--shell=bash", *listed], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _run_steps(workflow: str) -> list[str]:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / workflow).read_text())["jobs"]
    return [step["run"] for job in jobs.values() for step in job["steps"] if "run" in step]


def test_workflows_run_the_documented_commands():
    assert "python -m pytest test -q" in _run_steps("ci.yml")
    gpu = "\n".join(_run_steps("gpu.yml"))
    assert "python -m pytest test/gpu -m gpu" in gpu
    assert "bash benchmark/run_sweep.sh --quick" in gpu
    for script in re.findall(r"(?:bash|python) ([\w/.-]+\.(?:sh|py))", gpu):
        assert (ROOT / script).is_file(), f"gpu.yml runs {script}, which does not exist"


def test_ci_builds_a_venv_afresh_per_release_and_runs_the_readme_test_command_in_each():
    script = (ROOT / ".ci" / "run").read_text()
    # One venv per supported release, each pinned to it.
    assert re.search(r"^RELEASES=\(([\d. ]+)\)$", script, re.M).group(1).split() == list(SUPPORTED_SGLANG_VERSIONS)
    # Without --clear, packages an earlier run left in a venv could turn a broken install green.
    assert re.search(r"^\s*python3 -m venv --clear \"\$venv\"$", script, re.M)
    assert re.search(r'^\s*"\$venv/bin/python" -m pip install .*"\.\[test,bench\]" "sglang==\$release"$', script, re.M)
    readme = re.search(r"^python -m pytest test -q.*$", (ROOT / "README.md").read_text(), re.M)
    ci = re.search(r"^\s*python -m pytest .*$", script, re.M)
    assert readme and ci and ci.group().strip().startswith(readme.group()), (readme, ci)


def test_the_gpu_workflow_fails_where_torch_sees_no_gpu():
    # Every GPU test skips without CUDA, and pytest passes a run of skips; the workflow
    # asks test/gpu/conftest.py to make that an error.
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())["jobs"]
    (step,) = [s for job in jobs.values() for s in job["steps"] if "pytest test/gpu" in s.get("run", "")]
    assert step["env"]["SPECGATE_REQUIRE_GPU"] == "1"
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the GPU tests run here")
    result = subprocess.run([sys.executable, "-m", "pytest", "test/gpu", "-m", "gpu", "-q", "-p", "no:cacheprovider"],
                            cwd=ROOT, env={**os.environ, "SPECGATE_REQUIRE_GPU": "1"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "SPECGATE_REQUIRE_GPU=1, but torch sees no CUDA device" in result.stdout + result.stderr


def _load_wheelhouse_script():
    spec = importlib.util.spec_from_file_location("offline_wheelhouse", WHEELHOUSE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wheelhouse = _load_wheelhouse_script()


def test_platform_tags_admit_older_glibc_wheels():
    tags = wheelhouse.platform_tags("manylinux_2_34_x86_64")
    assert tags[0] == "manylinux_2_34_x86_64"
    assert {"manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert wheelhouse.platform_tags("musllinux_1_2_x86_64") == ["musllinux_1_2_x86_64"]


@pytest.fixture(scope="module")
def dry_run_wheelhouse(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("wheelhouse")
    result = run(
        [sys.executable, str(WHEELHOUSE_SCRIPT), "--dest", str(dest), "--dry-run"], timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return dest


def test_wheelhouse_dry_run_resolves_the_full_set_without_downloading(dry_run_wheelhouse):
    dest = dry_run_wheelhouse
    pins = (dest / "requirements.txt").read_text().splitlines()
    names = {line.split("==")[0].lower() for line in pins}
    ours = importlib.metadata.version("sglang-specgate")
    assert {f"sglang-specgate=={ours}", "sglang==0.5.17"} <= {line.split()[0] for line in pins}  # the default
    assert {"torch", "sglang-kernel", "flashinfer-python"} <= names
    assert all(re.search(r" --hash=sha256:[0-9a-f]{64}$", line) for line in pins)
    # Only the plugin's own wheel: the ~4 GB of dependency wheels were resolved, not fetched.
    assert [p.name for p in dest.glob("*.whl")] == [f"sglang_specgate-{ours}-py3-none-any.whl"]


def test_wheelhouse_download_fetches_the_resolved_files(dry_run_wheelhouse, tmp_path):
    """The download step on a small slice of the pins: the plugin and one binary wheel
    (PyYAML, cp312 manylinux) must come with exactly the hashes the resolution recorded."""
    dest = dry_run_wheelhouse
    pins = (dest / "requirements.txt").read_text().splitlines()
    chosen = [line for line in pins if line.lower().startswith(("sglang-specgate==", "pyyaml=="))]
    assert len(chosen) == 2
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(chosen) + "\n")
    shutil.copy2(next(dest.glob("sglang_specgate-*.whl")), tmp_path)
    target = wheelhouse.target_args(wheelhouse.DEFAULT_PYTHON, wheelhouse.DEFAULT_PLATFORM)
    wheelhouse.download(requirements, tmp_path, target, [])
    assert [
        p
        for p in tmp_path.iterdir()
        if re.match(r"pyyaml-.*-cp312-cp312-manylinux", p.name, re.IGNORECASE)
    ]
