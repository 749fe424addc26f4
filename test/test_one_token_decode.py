"""The fast off path's attention switch, on CPU: which forwards it converts and how.

The kernels themselves need a GPU (test/gpu and benchmark/results cover them); here a real
ForwardBatch is built on CPU tensors and the backend class swap is checked on real
TritonAttnBackend and FlashInferAttnBackend instances created without running their
GPU-allocating __init__ (the buffers the off state resizes are then set by hand, as CPU
tensors shaped as __init__ makes them).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from sglang.srt.layers.attention.flashinfer_backend import (
    FlashInferAttnBackend,
    FlashInferIndicesUpdaterDecode,
    FlashInferIndicesUpdaterPrefill,
)
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

from sglang_specgate.args import FA3_OFF_PATH_ENV, FAST_OFF_PATH_ATTENTION_BACKENDS
from sglang_specgate.one_token_decode import (
    DECODE_PATHS,
    as_decode_batch,
    is_one_token_spec_forward,
    most_write_rows,
    read_one_entry,
    take_rows,
    use_decode_kernels,
)

pytestmark = pytest.mark.usefixtures("clean_env")  # the switches at their defaults unless a test sets one


def batch(mode: ForwardMode, seq_lens=(5, 9, 2)) -> ForwardBatch:
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    return ForwardBatch(
        forward_mode=mode, batch_size=len(seq_lens), input_ids=torch.zeros(len(seq_lens)),
        req_pool_indices=torch.arange(len(seq_lens)), seq_lens=lens,
        out_cache_loc=torch.arange(len(seq_lens)), seq_lens_sum=int(lens.sum()),
        seq_lens_cpu=lens.clone(), spec_info=object(),
    )


def test_target_verify_counts_the_new_token():
    fb = batch(ForwardMode.TARGET_VERIFY)
    view = as_decode_batch(fb)
    assert view.forward_mode == ForwardMode.DECODE
    assert view.spec_info is None
    assert view.seq_lens.tolist() == [6, 10, 3]
    assert view.seq_lens_cpu.tolist() == [6, 10, 3]
    assert view.seq_lens_sum == 19
    # The original batch is untouched: the model still runs it as TARGET_VERIFY.
    assert fb.forward_mode == ForwardMode.TARGET_VERIFY and fb.seq_lens.tolist() == [5, 9, 2]


def test_draft_extend_reads_one_cached_token():
    fb = batch(ForwardMode.DRAFT_EXTEND_V2)
    view = as_decode_batch(fb)
    assert view.forward_mode == ForwardMode.DECODE
    assert view.seq_lens.tolist() == [1, 1, 1] and view.seq_lens_cpu.tolist() == [1, 1, 1]
    assert view.seq_lens_sum == 3
    # Where the KV is written is the batch's, untouched by the view.
    assert view.out_cache_loc is fb.out_cache_loc and fb.seq_lens.tolist() == [5, 9, 2]


def test_draft_extend_without_host_lengths_gets_them():
    """The off state's buffered writes carry no host lengths; FlashInfer would copy the
    device ones back (a stream sync) to plan the forward."""
    fb = batch(ForwardMode.DRAFT_EXTEND_V2)
    fb.seq_lens_cpu, fb.seq_lens_sum = None, None
    view = as_decode_batch(fb)
    assert view.seq_lens_cpu.device.type == "cpu" and view.seq_lens_cpu.tolist() == [1, 1, 1]
    assert view.seq_lens_sum == 3


@pytest.mark.parametrize("mode, converted", [
    (ForwardMode.TARGET_VERIFY, True), (ForwardMode.DRAFT_EXTEND_V2, True),
    (ForwardMode.EXTEND, False), (ForwardMode.DECODE, False), (ForwardMode.IDLE, False),
])
def test_only_one_token_speculative_forwards_are_converted(mode, converted):
    assert is_one_token_spec_forward(batch(mode)) is converted


def bare_triton_backend() -> TritonAttnBackend:
    return object.__new__(TritonAttnBackend)  # __init__ allocates on the GPU


def test_class_swap_keeps_identity_and_isinstance():
    backend = bare_triton_backend()
    assert use_decode_kernels(backend)
    assert isinstance(backend, TritonAttnBackend)
    assert type(backend).__name__ == "OneTokenDecodeTritonAttnBackend"
    assert use_decode_kernels(backend)  # idempotent
    assert type(backend).__mro__[1] is TritonAttnBackend


def test_prefill_keeps_extend_kernels_and_verify_uses_decode(monkeypatch):
    backend = bare_triton_backend()
    use_decode_kernels(backend)
    calls = []
    monkeypatch.setattr(TritonAttnBackend, "forward_extend", lambda self, *a, **k: calls.append("extend"))
    monkeypatch.setattr(TritonAttnBackend, "forward_decode", lambda self, *a, **k: calls.append("decode"))
    monkeypatch.setattr(TritonAttnBackend, "init_forward_metadata",
                        lambda self, fb: calls.append(fb.forward_mode.name))
    for mode in (ForwardMode.EXTEND, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND_V2):
        fb = batch(mode)
        backend.init_forward_metadata(fb)
        backend.forward_extend(None, None, None, None, fb)
    assert calls == ["EXTEND", "extend", "DECODE", "decode", "DECODE", "decode"]


def bare_flashinfer_backend(max_bs: int) -> FlashInferAttnBackend:
    """Its buffers as __init__ sizes them at the CUDA-graph batch limit (one wrapper), and its
    indices updaters holding them as theirs do."""
    backend = object.__new__(FlashInferAttnBackend)
    backend.kv_indptr = [torch.zeros(max_bs + 1, dtype=torch.int32)]
    backend.kv_last_page_len = torch.ones(max_bs, dtype=torch.int32)
    for name, updater_class in (("indices_updater_decode", FlashInferIndicesUpdaterDecode),
                                ("indices_updater_prefill", FlashInferIndicesUpdaterPrefill)):
        updater = object.__new__(updater_class)
        updater.kv_indptr, updater.kv_last_page_len = backend.kv_indptr, backend.kv_last_page_len
        setattr(backend, name, updater)
    return backend


def test_flashinfer_rows_reach_its_updaters():
    backend = bare_flashinfer_backend(max_bs=16)
    assert use_decode_kernels(backend)
    assert type(backend).__name__ == "OneTokenDecodeFlashInferAttnBackend"
    take_rows(backend, 64)
    assert backend.kv_indptr[0].shape == (65,)
    assert backend.kv_last_page_len.shape == (64,) and backend.kv_last_page_len.eq(1).all()
    for updater in (backend.indices_updater_decode, backend.indices_updater_prefill):
        # The decode path plans with the updater's references, not the backend's.
        assert updater.kv_indptr is backend.kv_indptr
        assert updater.kv_last_page_len is backend.kv_last_page_len
    take_rows(backend, 8)  # never shrinks
    assert backend.kv_indptr[0].shape == (65,) and backend.kv_last_page_len.shape == (64,)


def test_flashinfer_reads_one_entry_by_its_plan():
    backend = bare_flashinfer_backend(max_bs=4)
    use_decode_kernels(backend)
    before = dict(vars(backend))
    read_one_entry(backend)
    assert vars(backend) == before


def test_unverified_backend_is_left_alone(caplog):
    class SomeOtherBackend(TritonAttnBackend):
        pass

    backend = object.__new__(SomeOtherBackend)
    assert not use_decode_kernels(backend)
    assert type(backend) is SomeOtherBackend
    assert "not verified for the fast off path" in caplog.text
    assert "--attention-backend triton or flashinfer" in caplog.text  # the fix, named


def test_verified_backends_are_converted_without_a_warning(caplog):
    assert use_decode_kernels(bare_flashinfer_backend(max_bs=4))
    assert use_decode_kernels(bare_triton_backend())
    assert "spec gate" not in caplog.text


@pytest.mark.fast_off_path
@pytest.mark.parametrize("name", FAST_OFF_PATH_ATTENTION_BACKENDS)
def test_the_fast_off_path_flags_build_the_verified_classes(name, monkeypatch):
    """The start-up warning (args.slow_off_path_backends) and the runtime switch agree: each
    --attention-backend value the former calls fast builds, through SGLang's own registry, a
    class the latter converts. The constructors allocate on the GPU, so they are stubbed."""
    for cls in (TritonAttnBackend, FlashInferAttnBackend):
        monkeypatch.setattr(cls, "__init__", lambda self, *args, **kwargs: None)
    runner = SimpleNamespace(use_mla_backend=False, init_new_workspace=False,
                             model_config=SimpleNamespace(is_encoder_decoder=False),
                             server_args=SimpleNamespace(speculative_algorithm="EAGLE3"))
    backend = ATTENTION_BACKENDS[name](runner)
    assert type(backend).__name__ in DECODE_PATHS


class FlashAttentionBackend:
    """Stands in for SGLang's FA3 backend, whose module cannot be imported without a GPU
    (sgl_kernel loads its CUDA ops at import): what the conversion reads and calls, as its
    __init__ sets them for FA3 with plain multi-head attention (flashattention_backend.py), and
    its metadata and forward methods recording what they are given. test_upstream_contracts.py
    checks the real class has them."""

    def __init__(self, topk=1, fa_impl_ver=3, context_len=8192, **attention):
        self.topk, self.fa_impl_ver, self.num_splits, self.attn_cp_size = topk, fa_impl_ver, 0, 1
        self.max_num_pages = self.max_context_len = context_len  # one token a page
        for name in ("use_mla", "has_local_attention", "has_swa", "is_prefill_aware_swa", "is_encoder_decoder",
                     "use_sliding_window_kv_pool"):
            setattr(self, name, attention.get(name, False))
        self.calls = []

    def init_forward_metadata(self, forward_batch):
        self.calls.append(("metadata", forward_batch.forward_mode.name, forward_batch.seq_lens.tolist()))

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        self.calls.append(("out_graph", forward_batch.forward_mode.name, forward_batch.seq_lens.tolist()))

    def init_forward_metadata_in_graph(self, forward_batch):
        self.calls.append(("in_graph", forward_batch.forward_mode.name))

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        self.calls.append(("extend", forward_batch.forward_mode.name))

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        self.calls.append(("decode", forward_batch.forward_mode.name))


def test_fa3_keeps_upstreams_kernels_where_switched_off(monkeypatch, caplog):
    monkeypatch.setenv(FA3_OFF_PATH_ENV, "0")
    backend = FlashAttentionBackend()
    assert not use_decode_kernels(backend)
    assert type(backend) is FlashAttentionBackend
    assert f"{FA3_OFF_PATH_ENV}=0 turned FA3's decode path for them off; unset it" in caplog.text
    assert "--attention-backend triton or flashinfer" in caplog.text


@pytest.mark.parametrize("backend, named", [
    (FlashAttentionBackend(fa_impl_ver=4), "not FA4"),
    (FlashAttentionBackend(use_sliding_window_kv_pool=True), "sliding-window attention"),
    (FlashAttentionBackend(use_mla=True), "not MLA"),
    (FlashAttentionBackend(is_prefill_aware_swa=True), "sliding-window attention"),
])
def test_fa3_still_leaves_what_its_decode_path_does_not_cover(backend, named, caplog):
    assert not use_decode_kernels(backend)
    assert type(backend) is FlashAttentionBackend and named in caplog.text


@pytest.mark.parametrize("switch, topk", [(None, 1), ("1", 1), (None, 4)])
def test_fa3_runs_one_token_forwards_as_decode_steps_by_default(switch, topk, monkeypatch, caplog):
    """Chains and trees alike (test_upstream_contracts: FA3 reads its topk only under spec_info)."""
    if switch is not None:
        monkeypatch.setenv(FA3_OFF_PATH_ENV, switch)
    backend = FlashAttentionBackend(topk=topk)
    assert use_decode_kernels(backend)
    assert not caplog.text  # served on a GPU: nothing to warn of
    assert isinstance(backend, FlashAttentionBackend)
    assert type(backend).__name__ == "OneTokenDecodeFlashAttentionBackend"
    for mode in (ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND_V2, ForwardMode.EXTEND):
        fb = batch(mode)
        backend.init_forward_metadata_out_graph(fb)
        backend.init_forward_metadata_in_graph(fb)
        backend.forward_extend(None, None, None, None, fb)
    assert backend.calls == [
        # The verify reads its context and its new token, as a decode step does.
        ("out_graph", "DECODE", [6, 10, 3]), ("in_graph", "DECODE"), ("decode", "TARGET_VERIFY"),
        ("out_graph", "DECODE", [1, 1, 1]), ("in_graph", "DECODE"), ("decode", "DRAFT_EXTEND_V2"),
        # A prefill keeps FA3's extend path.
        ("out_graph", "EXTEND", [5, 9, 2]), ("in_graph", "EXTEND"), ("extend", "EXTEND"),
    ]


def test_fa3_draft_extend_reads_one_split_and_grows_nothing():
    backend = FlashAttentionBackend()
    use_decode_kernels(backend)
    read_one_entry(backend)
    assert backend.num_splits == 1
    before = dict(vars(backend))
    take_rows(backend, 1024)  # its graph runner sizes its buffers at the write sizes
    assert vars(backend) == before


@pytest.mark.parametrize("topk, context_len, rows", [(1, 8192, 2048), (1, 32768, 512), (1, 131072, 128),
                                                     (4, 8192, 1365), (4, 131072, 85)])
def test_fa3_write_rows_are_capped_by_their_page_tables(topk, context_len, rows):
    """Four int32 page tables a row, six for a tree, each an entry per token of context: 256 MiB
    in all at most."""
    backend = FlashAttentionBackend(topk=topk, context_len=context_len)
    use_decode_kernels(backend)
    assert most_write_rows(backend) == rows
    triton = bare_triton_backend()
    use_decode_kernels(triton)
    assert most_write_rows(triton) is None
