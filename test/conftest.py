"""Shared fixtures. The suite runs against the real installed SGLang and the installed
plugin: if sglang-specgate is not installed (no entry point), collection fails here."""

from __future__ import annotations

import json
from importlib.metadata import entry_points

import pytest

ENTRY_POINTS = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "spec_gate"]
assert ENTRY_POINTS, (
    "sglang-specgate is not installed: no 'spec_gate' entry point in group "
    "sglang.srt.plugins. Run `pip install -e .[test]` first."
)

def pytest_collection_modifyitems(config, items):
    """Tests marked fast_off_path check the gate's fast off path against SGLang's code; on a
    release where it is off (not verified on a GPU there) they are skipped, and
    test_upstream_contracts.py states, per release, what of upstream it relies on."""
    from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed_release

    release = installed_release()
    if release in FAST_OFF_PATH_RELEASES:
        return
    skip = pytest.mark.skip(reason=f"the fast off path is off on SGLang {release} (not verified on a GPU "
                                   "there); test_upstream_contracts.py states what it relies on there")
    for item in items:
        if item.get_closest_marker("fast_off_path"):
            item.add_marker(skip)


# Config-only models: ServerArgs resolution reads config.json, never weights.
_LLAMA = dict(
    vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
    rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu", bos_token_id=1, eos_token_id=2,
    tie_word_embeddings=False, torch_dtype="bfloat16", model_type="llama",
)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("models")
    target, draft = root / "target", root / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps({**_LLAMA, "architectures": ["LlamaForCausalLM"]}))
    (draft / "config.json").write_text(json.dumps({
        **_LLAMA, "num_hidden_layers": 1, "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": 32000, "target_hidden_size": 256,
    }))
    return str(target), str(draft)


@pytest.fixture(scope="session")
def eagle_argv(model_dirs) -> list[str]:
    """A full EAGLE-3 chain-drafting configuration that resolves on a CPU-only machine."""
    target, draft = model_dirs
    return [
        "--model-path", target, "--device", "cuda",  # no accelerator is needed to resolve
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft,
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
    ]


@pytest.fixture(scope="session")
def plugins_loaded():
    """SGLang's own plugin loading in this process, as launch_server and Engine do it."""
    from sglang.srt.plugins import load_plugins

    load_plugins()


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("SGLANG_SPEC_DISABLE_BATCH_THRESHOLD", raising=False)
    monkeypatch.delenv("SGLANG_SPEC_GATE_HOST_SEQ_LENS", raising=False)
    monkeypatch.delenv("SGLANG_SPEC_GATE_FA3_OFF_PATH", raising=False)
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)


@pytest.fixture
def published_gate_args(plugins_loaded, eagle_argv):
    """Resolved gate server args, published to SGLang's process-wide runtime context as a
    launched scheduler does: SGLang's graph-size and rank-sync helpers read it. The topology
    (one GPU) is an override, because the real one comes from process groups only a launch
    creates."""
    from sglang.srt.runtime_context import get_parallel, publish, reset_context
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(eagle_argv + ["--speculative-disable-batch-threshold", "8"])
    publish(args, role="test")
    try:
        with get_parallel().override(attn_tp_size=1, attn_cp_size=1):
            yield args
    finally:
        reset_context()
