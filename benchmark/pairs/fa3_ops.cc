// sgl_kernel.flash_ops for the GPU host, over a subset of FlashAttention-3's kernels
// (benchmark/pairs/fa3_kernels.py builds it with the FA3 source's flash_api.cpp and the
// instantiations the model pair's shapes need).
//
// sgl-kernel 0.4.5's Python wrapper (sgl_kernel/flash_attn.py) imports this module and calls
// torch.ops.sgl_kernel.fwd and torch.ops.sgl_kernel.get_scheduler_metadata, so both are
// registered here with 0.4.5's schemas, argument for argument. The FA3 source built against has
// no sparse_mask_fine or only_qv: a call that needs them is refused, not run without them.

// The stable ABI of Python 3.10 on: the module loads into the CPU host's and the GPU host's
// interpreters alike, as sgl-kernel's own abi3 modules do.
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include <torch/all.h>
#include <torch/library.h>

#include <cutlass/numeric_types.h>

#include "flash.h"  // the FA3 source's Flash_fwd_params and run_mha_fwd_

using at::Tensor;
using std::optional;

// flash_api.cpp's entry points, which it declares in no header.
std::tuple<Tensor, Tensor, Tensor, Tensor> mha_fwd(
    Tensor q, Tensor k, Tensor v, optional<Tensor> k_new, optional<Tensor> v_new, optional<Tensor> q_v,
    optional<Tensor> out, optional<Tensor> cu_seqlens_q, optional<Tensor> cu_seqlens_k,
    optional<Tensor> cu_seqlens_k_new, optional<Tensor> seqused_q, optional<Tensor> seqused_k,
    optional<int64_t> max_seqlen_q, optional<int64_t> max_seqlen_k, optional<Tensor> page_table,
    optional<Tensor> kv_batch_idx, optional<Tensor> leftpad_k, optional<Tensor> rotary_cos,
    optional<Tensor> rotary_sin, optional<Tensor> seqlens_rotary, optional<Tensor> q_descale,
    optional<Tensor> k_descale, optional<Tensor> v_descale, optional<double> softmax_scale, bool is_causal,
    int64_t window_size_left, int64_t window_size_right, int64_t attention_chunk, double softcap,
    bool is_rotary_interleaved, optional<Tensor> scheduler_metadata, int64_t num_splits,
    optional<bool> pack_gqa, int64_t sm_margin, optional<const Tensor>& sinks);

Tensor mha_fwd_get_scheduler_metadata(
    int64_t batch_size, int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t num_heads, int64_t num_heads_k,
    int64_t headdim, int64_t headdim_v, at::ScalarType qkv_dtype, Tensor seqused_k,
    optional<Tensor> cu_seqlens_q, optional<Tensor> cu_seqlens_k, optional<Tensor> cu_seqlens_k_new,
    optional<Tensor> seqused_q, optional<Tensor> leftpad_k, optional<int64_t> page_size,
    int64_t max_seqlen_k_new, bool is_causal, int64_t window_size_left, int64_t window_size_right,
    int64_t attention_chunk, bool has_softcap, int64_t num_splits, optional<bool> pack_gqa, int64_t sm_margin);

namespace {

std::tuple<Tensor, Tensor, Tensor, Tensor> fwd(
    const Tensor& q, const Tensor& k, const Tensor& v, const optional<Tensor>& k_new,
    const optional<Tensor>& v_new, const optional<Tensor>& q_v, const optional<Tensor>& out,
    const optional<Tensor>& cu_seqlens_q, const optional<Tensor>& cu_seqlens_k,
    const optional<Tensor>& cu_seqlens_k_new, const optional<Tensor>& seqused_q,
    const optional<Tensor>& seqused_k, optional<int64_t> max_seqlen_q, optional<int64_t> max_seqlen_k,
    const optional<Tensor>& page_table, const optional<Tensor>& kv_batch_idx,
    const optional<Tensor>& leftpad_k, const optional<Tensor>& rotary_cos,
    const optional<Tensor>& rotary_sin, const optional<Tensor>& seqlens_rotary,
    const optional<Tensor>& q_descale, const optional<Tensor>& k_descale,
    const optional<Tensor>& v_descale, optional<double> softmax_scale, bool is_causal,
    int64_t window_size_left, int64_t window_size_right, int64_t attention_chunk, double softcap,
    bool is_rotary_interleaved, const optional<Tensor>& scheduler_metadata, int64_t num_splits,
    optional<bool> pack_gqa, int64_t sm_margin, const optional<Tensor>& sinks,
    const optional<Tensor>& sparse_mask_fine, bool only_qv) {
  TORCH_CHECK(!sparse_mask_fine.has_value(),
              "specgate's FA3 subset: sparse_mask_fine is not in the FA3 source it was built from");
  TORCH_CHECK(!only_qv, "specgate's FA3 subset: only_qv is not in the FA3 source it was built from");
  optional<const Tensor> sinks_in = sinks;
  return mha_fwd(q, k, v, k_new, v_new, q_v, out, cu_seqlens_q, cu_seqlens_k, cu_seqlens_k_new, seqused_q,
                 seqused_k, max_seqlen_q, max_seqlen_k, page_table, kv_batch_idx, leftpad_k, rotary_cos,
                 rotary_sin, seqlens_rotary, q_descale, k_descale, v_descale, softmax_scale, is_causal,
                 window_size_left, window_size_right, attention_chunk, softcap, is_rotary_interleaved,
                 scheduler_metadata, num_splits, pack_gqa, sm_margin, sinks_in);
}

[[noreturn]] void refuse_unpaged(int head_dim) {
  TORCH_CHECK(false, "specgate's FA3 subset: head dim ", head_dim, " has kernels for a paged KV cache "
              "read without TMA only (SGLang's page size of 1); this call has none, or pages TMA can read");
}

}  // namespace

// flash_api.cpp's dispatch names a kernel for each (split, paged without TMA) pair, but SGLang's
// FA3 backend passes a page table with pages of one token to every call, which TMA cannot read:
// only the two paged instantiations of a head dim are built, and the two others refuse here, so
// that the module links and such a call fails with a reason.
#define REFUSE_UNPAGED(D)                                                                       \
  template <>                                                                                   \
  void run_mha_fwd_<90, cutlass::bfloat16_t, D, D, false, false, false, false>(Flash_fwd_params&, \
                                                                             cudaStream_t) {    \
    refuse_unpaged(D);                                                                          \
  }                                                                                             \
  template <>                                                                                   \
  void run_mha_fwd_<90, cutlass::bfloat16_t, D, D, true, false, false, true>(Flash_fwd_params&,   \
                                                                           cudaStream_t) {      \
    refuse_unpaged(D);                                                                          \
  }

// The build disables every head dim the shapes do not need (fa3_kernels.py's defines).
#ifndef FLASHATTENTION_DISABLE_HDIM64
REFUSE_UNPAGED(64)
#endif
#ifndef FLASHATTENTION_DISABLE_HDIM96
REFUSE_UNPAGED(96)
#endif
#ifndef FLASHATTENTION_DISABLE_HDIM128
REFUSE_UNPAGED(128)
#endif
#ifndef FLASHATTENTION_DISABLE_HDIM192
REFUSE_UNPAGED(192)
#endif
#ifndef FLASHATTENTION_DISABLE_HDIM256
REFUSE_UNPAGED(256)
#endif

// A fragment: sgl_kernel's common_ops defines the library's other ops.
TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def(SPECGATE_FWD_SCHEMA);
  m.impl("fwd", torch::kCUDA, &fwd);
  m.def(SPECGATE_GET_SCHEDULER_METADATA_SCHEMA);
  m.impl("get_scheduler_metadata", torch::kCUDA, &mha_fwd_get_scheduler_metadata);
}

// `from sgl_kernel import flash_ops` runs this; the ops above registered when the file loaded.
extern "C" PyObject* PyInit_flash_ops(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "flash_ops", nullptr, 0, nullptr};
  return PyModule_Create(&module);
}
