"""CPU tests of benchmark/pairs/fa3_kernels.py: what its build compiles for the pair's shapes and
how, the ops' schemas against sgl-kernel's Python wrapper and its own library, the sources'
fetch and the library's symbol check, and gpu_job.sh's use of the archive (test_carried_kernels.py
has the probe's verdict). The build itself (minutes of nvcc) and the probe's run (a GPU) are not
tested here: gpu_job.sh probes the carried ops before a plan serves with them."""

from __future__ import annotations

import ast
import importlib.util
import json
import mmap
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmark.pairs import fa3_kernels
from benchmark.pairs.shared_library import unresolved_symbols

BENCH = Path(__file__).resolve().parents[1] / "benchmark"
SGL_KERNEL = Path(importlib.util.find_spec("sgl_kernel").submodule_search_locations[0])  # not imported: no GPU


def test_the_pairs_shapes_build_the_paged_kernels_of_their_head_dims():
    assert fa3_kernels.kernel_head_dims(["1b", "8b"]) == [64, 128]
    assert fa3_kernels.kernel_head_dims(["8b", "70b"]) == [128]
    assert fa3_kernels.instantiations([64, 128]) == [
        "instantiations/flash_fwd_hdim64_bf16_paged_sm90.cu", "instantiations/flash_fwd_hdim64_bf16_paged_split_sm90.cu",
        "instantiations/flash_fwd_hdim128_bf16_paged_sm90.cu", "instantiations/flash_fwd_hdim128_bf16_paged_split_sm90.cu"]


def test_the_defines_turn_off_what_the_build_leaves_out():
    flags = fa3_kernels.defines([128])
    assert {f"-DFLASHATTENTION_DISABLE_HDIM{d}" for d in (64, 96, 192, 256)} <= set(flags)
    assert "-DFLASHATTENTION_DISABLE_HDIM128" not in flags
    for feature in ("BACKWARD", "SM8x", "FP16", "FP8", "SOFTCAP", "LOCAL", "APPENDKV", "PACKGQA"):
        assert f"-DFLASHATTENTION_DISABLE_{feature}" in flags
    # Split KV and the paged KV cache are what SGLang runs: never off.
    assert not {"-DFLASHATTENTION_DISABLE_SPLIT", "-DFLASHATTENTION_DISABLE_PAGEDKV"} & set(flags)
    assert len(flags) == len(set(flags))


def fake_toolchain(root: Path) -> fa3_kernels.Toolchain:
    nvcc = root / "nvcc"  # says what it was asked
    nvcc.write_text('#!/bin/sh\necho "$@"\n')
    nvcc.chmod(0o755)
    return fa3_kernels.Toolchain(nvcc, "echo", (root / "fa/hopper", root / "cutlass/include"),
                                 True, (root / "torch/lib", root / "cuda/lib64"))


def test_compile_commands_take_nvcc_for_kernels_and_the_cxx_compiler_for_host_code(tmp_path):
    tools = fake_toolchain(tmp_path)
    commands = fa3_kernels.compile_commands(tools, [64, 128], tmp_path / "objects")
    sources = {Path(c[c.index("-c") + 1]).name: c for c in commands.values()}
    assert set(sources) == {"flash_api.cpp", "flash_fwd_combine.cu", "flash_prepare_scheduler.cu", "fa3_ops.cc",
                            *(Path(f).name for f in fa3_kernels.instantiations([64, 128]))}
    assert len({out.name for out in commands}) == len(commands)  # one object each
    for name, command in sources.items():
        assert command[0] == (str(tmp_path / "nvcc") if name.endswith(".cu") else "echo")
        assert "-D_GLIBCXX_USE_CXX11_ABI=1" in command and f"-I{tmp_path / 'cutlass/include'}" in command
        assert set(fa3_kernels.defines([64, 128])) <= set(command)
        if name.endswith(".cu"):
            assert "-gencode=arch=compute_90a,code=sm_90a" in command
    ops = sources["fa3_ops.cc"]
    assert ops[ops.index("-c") + 1] == str(BENCH / "pairs/fa3_ops.cc")
    # The schemas reach fa3_ops.cc as string literals of the macros it registers them by.
    cc = (BENCH / "pairs/fa3_ops.cc").read_text()
    for macro, schema in (("SPECGATE_FWD_SCHEMA", fa3_kernels.FWD_SCHEMA),
                          ("SPECGATE_GET_SCHEDULER_METADATA_SCHEMA", fa3_kernels.GET_SCHEDULER_METADATA_SCHEMA)):
        assert f"-D{macro}={json.dumps(schema)}" in ops and f"m.def({macro})" in cc


def test_the_link_names_torch_and_the_cuda_runtime(tmp_path):
    tools = fake_toolchain(tmp_path)
    command = fa3_kernels.link_command(tools, [tmp_path / "a.o"], tmp_path / fa3_kernels.LIBRARY)
    assert command[:4] == ["echo", "-shared", "-o", str(tmp_path / "flash_ops.abi3.so")]
    assert {"-ltorch", "-ltorch_cuda", "-lc10_cuda", "-lcudart", f"-L{tmp_path / 'torch/lib'}"} <= set(command)


def test_the_command_line_defaults_to_the_pairs_shapes_and_the_pinned_repositories():
    args = fa3_kernels.arguments().parse_args(["build", ".gpu/fa3-ops.tar.xz"])
    assert args.shapes == ["1b", "8b"] and args.jobs == 2
    assert (args.flash_attention, args.cutlass) == (fa3_kernels.FLASH_ATTENTION.repository,
                                                    fa3_kernels.CUTLASS.repository)
    for source in (fa3_kernels.FLASH_ATTENTION, fa3_kernels.CUTLASS):
        assert re.fullmatch("[0-9a-f]{40}", source.commit) and source.repository.startswith("https://github.com/")


def test_the_manifest_records_sources_shapes_and_flags(tmp_path):
    repositories = {"flash-attention": "/mirror/fa", "cutlass": "https://github.com/NVIDIA/cutlass.git"}
    manifest = fa3_kernels.manifest(["1b", "8b"], repositories, fake_toolchain(tmp_path))
    assert manifest["sources"]["flash-attention"] == {
        "repository": "/mirror/fa", "commit": fa3_kernels.FLASH_ATTENTION.commit, "paths": ["hopper"]}
    assert manifest["sources"]["cutlass"]["commit"] == fa3_kernels.CUTLASS.commit
    assert manifest["head_dims"] == [64, 128] and manifest["defines"] == fa3_kernels.defines([64, 128])
    assert manifest["nvcc_flags"] == list(fa3_kernels.NVCC_FLAGS)
    assert manifest["toolchain"] == {"nvcc": "--version", "cxx": "-dumpfullversion",  # what each was asked
                                     "torch": __import__("torch").__version__}
    json.dumps(manifest)


def schema_arguments(schema: str) -> list[str]:
    """The names of a schema's arguments, in order."""
    arguments = schema[schema.index("(") + 1:schema.index(") ->")]
    return [argument.split("=")[0].split()[-1] for argument in arguments.split(",")]


def op_calls(source: str, op: str) -> list[ast.Call]:
    """The calls of torch.ops.sgl_kernel.<op> (or its .default) in a Python source."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name in (f"torch.ops.sgl_kernel.{op}", f"torch.ops.sgl_kernel.{op}.default"):
                calls.append(node)
    return calls


@pytest.mark.parametrize("op, schema", [("fwd", fa3_kernels.FWD_SCHEMA),
                                        ("get_scheduler_metadata", fa3_kernels.GET_SCHEDULER_METADATA_SCHEMA)])
def test_each_call_in_sgl_kernels_wrapper_fits_the_schema(op, schema):
    calls = op_calls((SGL_KERNEL / "flash_attn.py").read_text(), op)
    assert calls, f"sgl_kernel/flash_attn.py no longer calls {op}"
    names = schema_arguments(schema)
    for call in calls:
        # Every argument passed, by position and then by name in the schema's order.
        assert [k.arg for k in call.keywords] == names[len(call.args):], ast.unparse(call)[:200]


def official_schema(library: Path, op: str) -> str:
    with library.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start = data.find(f"\0{op}(".encode()) + 1
        return data[start:data.find(b"\0", start)].decode()


def normalized(schema: str) -> str:
    return re.sub(r"\(\s+", "(", re.sub(r"\s+", " ", schema))


@pytest.mark.skipif(not (SGL_KERNEL / "flash_ops.abi3.so").exists(),
                    reason="sgl-kernel's own FA3 library is not installed here (the GPU kit drops it)")
@pytest.mark.parametrize("op, schema", [("fwd", fa3_kernels.FWD_SCHEMA),
                                        ("get_scheduler_metadata", fa3_kernels.GET_SCHEDULER_METADATA_SCHEMA)])
def test_the_schemas_are_sgl_kernels_own(op, schema):
    assert normalized(official_schema(SGL_KERNEL / "flash_ops.abi3.so", op)) == normalized(schema)


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_fetch_checks_out_only_the_sources_paths_at_the_pinned_commit(tmp_path):
    origin = tmp_path / "origin"
    for path in ("hopper/flash_api.cpp", "tests/test.py"):
        (origin / path).parent.mkdir(parents=True, exist_ok=True)
        (origin / path).write_text(path)
    git("init", "-q", cwd=origin)
    git("add", ".", cwd=origin)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "sources", cwd=origin)
    pinned = git("rev-parse", "HEAD", cwd=origin)
    (origin / "hopper/flash_api.cpp").write_text("later")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "later", cwd=origin)

    into = tmp_path / "checkout"
    fa3_kernels.fetch(fa3_kernels.Source("unused", pinned, ("hopper",)), str(origin), into, "--flash-attention")
    assert git("rev-parse", "HEAD", cwd=into) == pinned
    assert (into / "hopper/flash_api.cpp").read_text() == "hopper/flash_api.cpp"
    assert not (into / "tests").exists()


def test_a_source_that_cannot_be_fetched_is_an_error_naming_the_flag(tmp_path, monkeypatch, capsys):
    # A repository that is not there stands for GitHub on a host without network.
    missing = str(tmp_path / "no-such-repository")
    monkeypatch.setattr(fa3_kernels, "toolchain", lambda *a: pytest.fail("built past a failed fetch"))
    monkeypatch.setattr("sys.argv", ["fa3_kernels.py", "build", str(tmp_path / "fa3.tar.xz"),
                                     "--flash-attention", missing])
    assert fa3_kernels.main() == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fa3_kernels.py build: --flash-attention: could not fetch "
                          f"{fa3_kernels.FLASH_ATTENTION.commit[:12]} from {missing} (")
    assert "give --flash-attention a local git repository that holds it" in err
    assert "Traceback" not in err and not (tmp_path / "fa3.tar.xz").exists()


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_the_symbol_check_names_what_no_needed_library_defines(tmp_path):
    # A weak definition counts (libstdc++'s template instances are weak); a weak reference may stay undefined.
    (tmp_path / "a.c").write_text("int defined_in_a(void) { return 1; }\n"
                                  "__attribute__((weak)) int weak_in_a(void) { return 2; }\n")
    (tmp_path / "b.c").write_text("int defined_in_a(void); int weak_in_a(void); int nowhere(void);\n"
                                  "__attribute__((weak)) int maybe(void);\n"
                                  "int f(void) { return defined_in_a() + weak_in_a() + nowhere() + (maybe ? maybe() : 0); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "liba.so", tmp_path / "a.c"], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "libb.so", tmp_path / "b.c",
                    f"-L{tmp_path}", "-la"], check=True)
    assert unresolved_symbols(tmp_path / "libb.so", (tmp_path,)) == ["nowhere"]


def test_gpu_job_installs_the_archive_and_probes_it_before_fa3_runs():
    job = (BENCH / "gpu_job.sh").read_text()
    assert "tar xJf .gpu/fa3-ops.tar.xz -C /tmp/site/sgl_kernel" in job  # where the kit's sgl_kernel is
    assert 'if [ "$1" = fa3 ] && ! fa3_has_kernels "$2"' in job
    assert "fa3_has_kernels 8b" in (BENCH / "plans/fa3.sh").read_text()
