"""The registry of what the gate changes on SGLang objects at run time (runtime_patches.py):
every name registered for the installed release exists in the installed SGLang, the package
changes nothing it does not list, and the helpers that make the changes restore and refuse as
they say."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest
import torch
from registry_entries import documentation_errors

import sglang_specgate
from sglang_specgate import runtime_patches
from sglang_specgate.runtime_patches import (CLASS_ATTRIBUTE, DECLARED_FIELD, MODULE_ATTRIBUTE, OURS,
                                             RUNTIME_PATCHES, SET_IN_A_METHOD, RuntimePatch,
                                             UnregisteredChange, assign, assign_item, overridden_methods, shadowed,
                                             swap_class)
from sglang_specgate.sglang_versions import CPU, GPU, SUPPORTED_SGLANG_VERSIONS, installed_release

PACKAGE = Path(sglang_specgate.__file__).parent
HELPERS = {"assign", "assign_item", "shadowed", "swap_class"}
OWN_OBJECTS = {"self", "cls"}


RELEASE = installed_release()


def test_every_registered_name_exists_in_the_installed_sglang():
    # Fails on each release when a name the package changes there no longer exists upstream.
    assert runtime_patches.unresolved_names(RELEASE) == []


def test_entries_are_documented():
    assert len(set(RUNTIME_PATCHES)) == len(RUNTIME_PATCHES)
    for patch in RUNTIME_PATCHES:
        assert patch.verified_on and set(patch.verified_on) <= set(SUPPORTED_SGLANG_VERSIONS), patch
        assert set(patch.verified_on.values()) <= {GPU, CPU}, patch
        assert patch.check in (CLASS_ATTRIBUTE, DECLARED_FIELD, SET_IN_A_METHOD, MODULE_ATTRIBUTE, OURS)
        assert patch.owners and patch.attributes
        importlib.import_module(patch.by)
    assert documentation_errors(RUNTIME_PATCHES, lambda patch: f"{patch.by}: {patch.attributes}") == []


def test_a_careless_entry_is_not_documented() -> None:
    careful = RUNTIME_PATCHES[0]
    placeholder = dataclasses.replace(careful, why="TODO: explain.", upstream="see the code", removal="n/a")
    misplaced = dataclasses.replace(careful, why=careful.why + " Again.", how=careful.why,
                                    upstream=f"{installed_release()}: srt/no_such_module.py:12 (where it was).")
    errors = documentation_errors([careful, placeholder, misplaced], lambda patch: patch.why[:4])
    assert errors == [
        f"the same how for two entries: {careful.how!r}",
        "TODO: why is not a sentence of 8 words or more: 'TODO: explain.'",
        "TODO: upstream does not open on a file:line of SGLang: 'see the code'",
        "TODO: removal does not say when it can go: 'n/a'",
        f"{careful.why[:4]}: upstream does not open on a file:line of SGLang: "
        f"'{installed_release()}: srt/no_such_module.py:12 (where it was).'",
    ]


@pytest.mark.parametrize("check, owner, present, absent", [
    (CLASS_ATTRIBUTE, "sglang.srt.model_executor.model_runner.ModelRunner", "_get_attention_backend",
     "graph_shared_output"),  # set on instances only
    (DECLARED_FIELD, "sglang.srt.managers.schedule_batch.ScheduleBatch", "seq_lens_cpu", "seq_lens_gpu"),
    (DECLARED_FIELD, "sglang.srt.managers.io_struct.GetInternalStateReqOutput", "internal_state", "state"),
    (DECLARED_FIELD, "sglang.srt.runtime_context.RuntimeContext", "_overrides_log", "_overrides"),  # __slots__
    (SET_IN_A_METHOD, "sglang.srt.model_executor.model_runner.ModelRunner", "graph_shared_output",
     "_get_attention_backend"),  # a method, not set on instances
    (SET_IN_A_METHOD, "sglang.srt.models.llama_eagle3.LlamaDecoderLayer", "self_attn", "attn"),  # a base's
    (MODULE_ATTRIBUTE, "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner",
     "get_batch_sizes_to_capture", "capture_sizes"),
    (OURS, "sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter",
     "_spec_gate_metrics", "current_scheduler_metrics_enabled"),
])
def test_each_check_tells_a_name_sglang_has_from_one_it_lacks(monkeypatch, check, owner, present, absent):
    patch = RuntimePatch(owners=(owner,), attributes=(present, absent), check=check, by="test",
                         why="", how="", upstream="", removal="", verified_on={RELEASE: CPU})
    monkeypatch.setattr(runtime_patches, "RUNTIME_PATCHES", (patch,))
    (missing,) = runtime_patches.unresolved_names(RELEASE)
    assert missing.startswith(f"{owner}.{absent} ({check}: ")


def test_an_owner_that_no_longer_imports_is_reported(monkeypatch):
    patch = RuntimePatch(owners=("sglang.srt.no_such_module.Thing",), attributes=("x",), check=CLASS_ATTRIBUTE,
                         by="test", why="", how="", upstream="", removal="", verified_on={RELEASE: CPU})
    monkeypatch.setattr(runtime_patches, "RUNTIME_PATCHES", (patch,))
    (missing,) = runtime_patches.unresolved_names(RELEASE)
    assert missing.startswith("sglang.srt.no_such_module.Thing (") and "no_such_module" in missing.split("(", 1)[1]


@pytest.mark.parametrize("check, present", [(CLASS_ATTRIBUTE, "forward"), (SET_IN_A_METHOD, "splits")])
def test_an_owner_that_cannot_be_imported_here_is_checked_in_its_source(check, present, tmp_path, monkeypatch):
    """As FA3's backend on a machine without CUDA: its class statement is what can be checked."""
    (tmp_path / "needs_cuda_backend.py").write_text(
        "import no_such_cuda_library\n\n\nclass Backend:\n    def forward(self):\n        self.splits = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    patch = RuntimePatch(owners=("needs_cuda_backend.Backend",), attributes=(present, "absent"), check=check,
                         by="test", why="", how="", upstream="", removal="", verified_on={RELEASE: CPU})
    monkeypatch.setattr(runtime_patches, "RUNTIME_PATCHES", (patch,))
    assert runtime_patches.unresolved_names(RELEASE) == [
        f"needs_cuda_backend.Backend.absent ({check}, read from its source as it cannot be imported here "
        f"(ModuleNotFoundError): {runtime_patches._CHECKS[check][1]})"]


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "runtime_patches.py":
            module = ".".join(("sglang_specgate", *path.relative_to(PACKAGE).with_suffix("").parts))
            yield module.removesuffix(".__init__"), ast.parse(path.read_text(), filename=str(path))


def _changed_object(node) -> ast.expr | None:
    """The object whose attribute a store or delete changes: ``x`` in ``x.a = v`` and in
    ``x.a[k] = v`` (an item of an attribute of x)."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return node.value
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) \
            and isinstance(node.value, ast.Attribute):
        return node.value.value
    return None


def test_the_package_changes_attributes_only_of_its_own_objects_or_through_the_registry():
    """Every attribute store or delete outside runtime_patches.py is on ``self``/``cls`` or on a
    function or class the module defines; anything else goes through the registry's helpers."""
    unregistered = []
    for module, tree in _modules():
        defined_here = {n.name for n in ast.walk(tree)
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        for node in ast.walk(tree):
            changed = _changed_object(node)
            if changed is not None and not (isinstance(changed, ast.Name)
                                            and changed.id in OWN_OBJECTS | defined_here):
                unregistered.append(f"{module}:{node.lineno} {ast.unparse(node)}")
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "delattr", "object.__setattr__"):
                # A frozen dataclass's __post_init__ sets its own fields with object.__setattr__.
                target = node.args[0] if node.args else None
                if not (isinstance(target, ast.Name) and target.id in OWN_OBJECTS):
                    unregistered.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    assert unregistered == []


def _registry_references(tree) -> tuple[dict[str, str], set[str]]:
    """Names the module imported from runtime_patches (local name: registry name), and the
    local names of the runtime_patches module itself."""
    names, modules = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "sglang_specgate.runtime_patches":
            names.update((alias.asname or alias.name, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "sglang_specgate":
            modules.update(alias.asname or alias.name for alias in node.names if alias.name == "runtime_patches")
    return names, modules


def _registry_name(node, names, modules) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
        return node.attr
    return None


def test_every_change_names_its_entry_its_module_and_only_the_entrys_names():
    """Each helper call's entry is made by the calling module and lists the names the call
    changes (where they are written out; computed ones are checked when the call runs), and
    every entry is made somewhere."""
    problems, used = [], set()
    for module, tree in _modules():
        names, modules = _registry_references(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _registry_name(node.func, names, modules) in HELPERS):
                continue
            where = f"{module}:{node.lineno}"
            entry_name = _registry_name(node.args[0], names, modules) if node.args else None
            patch = getattr(runtime_patches, entry_name or "", None)
            if not isinstance(patch, RuntimePatch):
                problems.append(f"{where}: the first argument is not a registry entry")
                continue
            used.add(patch)
            if patch.by != module:
                problems.append(f"{where}: {entry_name} is registered as made by {patch.by}")
            changed = [k.arg for k in node.keywords if k.arg is not None]
            if _registry_name(node.func, names, modules) == "assign_item" and isinstance(node.args[2], ast.Constant):
                changed.append(node.args[2].value)
            problems.extend(f"{where}: {entry_name} does not list {name}"
                            for name in changed if name not in patch.attributes)
    assert problems == []
    assert [p for p in RUNTIME_PATCHES if p not in used] == []


SOME = RuntimePatch(owners=("test",), attributes=("method", "value", "mlp", "items"), check=CLASS_ATTRIBUTE,
                    by="test", why="", how="", upstream="", removal="", verified_on={RELEASE: CPU})


class Owner:
    def method(self):
        return "class"

    def __init__(self):
        self.value = "own"
        self.items = [0, 0]


def test_shadowed_puts_back_own_values_and_lets_the_class_show_through_again():
    owner = Owner()
    with shadowed(SOME, owner, method=lambda: "shadow", value="shadow"):
        assert owner.method() == "shadow" and owner.value == "shadow"
    assert owner.method() == "class" and "method" not in vars(owner)
    assert owner.value == "own"


def test_shadowed_puts_back_a_torch_submodule_and_restores_on_error():
    # A Module's submodules live in its _modules, not its __dict__, and are not class attributes.
    layer = torch.nn.Module()
    mlp = layer.mlp = torch.nn.Linear(2, 2)
    with pytest.raises(RuntimeError):
        with shadowed(SOME, layer, mlp=torch.nn.Identity()):
            assert isinstance(layer.mlp, torch.nn.Identity)
            raise RuntimeError("capture failed")
    assert layer.mlp is mlp


def test_the_helpers_refuse_a_name_the_entry_does_not_list():
    owner = Owner()
    with pytest.raises(UnregisteredChange, match="changes other, which its runtime_patches entry"):
        assign(SOME, owner, value=1, other=2)
    assert owner.value == "own"  # nothing set
    with pytest.raises(UnregisteredChange):
        assign_item(SOME, owner, "other", 0, 1)
    with pytest.raises(UnregisteredChange):
        with shadowed(SOME, owner, other=1):
            pass
    assign_item(SOME, owner, "items", 1, 5)
    assert owner.items == [0, 5]

    class OverridesMore(Owner):
        def method(self):
            return "sub"

        def __repr__(self):  # a dunder: not a registered override
            return "sub"

    swap_class(SOME, owner, OverridesMore)
    assert owner.method() == "sub"

    class OverridesUnlisted(Owner):
        def __init__(self):
            pass

        def unlisted(self):  # new, not an override: allowed
            pass

    swap_class(SOME, Owner(), OverridesUnlisted)
    narrow = dataclasses.replace(SOME, attributes=("value",))
    with pytest.raises(UnregisteredChange, match="changes method"):
        swap_class(narrow, Owner(), OverridesMore)


def test_the_one_token_decode_entries_list_what_its_subclass_overrides_on_each_backend():
    from sglang_specgate.one_token_decode import DECODE_PATHS, _one_token_decode_class
    from sglang_specgate.runtime_patches import FA3_ONE_TOKEN_DECODE_CLASS, ONE_TOKEN_DECODE_CLASS

    owners = [importlib.import_module(path.rsplit(".", 1)[0]).__dict__[path.rsplit(".", 1)[1]]
              for path in ONE_TOKEN_DECODE_CLASS.owners]
    # FA3's module needs a GPU to import: its entry names the class, test_upstream_contracts.py
    # checks the methods in its source.
    fa3 = [path.rsplit(".", 1)[1] for path in FA3_ONE_TOKEN_DECODE_CLASS.owners]
    assert sorted([owner.__name__ for owner in owners] + fa3) == sorted(DECODE_PATHS)
    assert FA3_ONE_TOKEN_DECODE_CLASS.attributes == ONE_TOKEN_DECODE_CLASS.attributes
    for owner in owners:
        subclass = _one_token_decode_class(owner)
        assert set(overridden_methods(subclass, owner)) == set(ONE_TOKEN_DECODE_CLASS.attributes)


def test_a_switched_change_is_made_and_checked_unless_switched_off(monkeypatch):
    """FA3's entries follow SGLANG_SPEC_GATE_FA3_OFF_PATH: on by default, 0 the way back to
    upstream's kernels, and then nothing of theirs is checked or changed."""
    from sglang_specgate.runtime_patches import (FA3_DRAFT_EXTEND_GRAPH, FA3_ONE_SPLIT, FA3_ONE_TOKEN_DECODE_CLASS,
                                                 patches_for)

    fa3 = {FA3_ONE_SPLIT, FA3_ONE_TOKEN_DECODE_CLASS, FA3_DRAFT_EXTEND_GRAPH}
    monkeypatch.delenv("SGLANG_SPEC_GATE_FA3_OFF_PATH", raising=False)
    assert fa3 <= set(patches_for("0.5.17")) and fa3.isdisjoint(patches_for("0.5.23"))
    monkeypatch.setenv("SGLANG_SPEC_GATE_FA3_OFF_PATH", "0")
    assert fa3.isdisjoint(patches_for("0.5.17"))
