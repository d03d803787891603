// The CUDA backend's function table, exported from libtroupe_cuda.so as
// troupe_backend_entry (and nothing else: the module links cuBLAS, whose static TLS would
// break the Prometheus exposer in a binary that linked it; Note [Why the CUDA backend is
// a module] in tensor/backend.cpp). The entries live in cuda_device.cpp, cuda_ops.cpp
// and cuda_collectives.cpp; every status is checked (cuda_status.hpp), and a failure
// becomes the entry's non-zero return and the message last_error gives.
#include "gpu/cuda_entries.hpp"
#include "tensor/backend_abi.h"

namespace troupe::gpu {

namespace {

const troupe_backend_v1 table = {
    .abi_version = TROUPE_BACKEND_ABI_VERSION,
    .name = "cuda",
    .open = entry::open,
    .close = entry::close,
    .last_error = entry::last_error,
    .device_count = entry::device_count,
    .device_info = entry::device_info,
    .set_tf32 = entry::set_tf32,
    .alloc = entry::alloc,
    .release = entry::release,
    .memory_stats = entry::memory_stats,
    .upload = entry::upload,
    .download = entry::download,
    .fill_zero = entry::fill_zero,
    .synchronize = entry::synchronize,
    .gemm = entry::gemm,
    .bias_add = entry::bias_add,
    .channel_bias_add = entry::channel_bias_add,
    .bias_grad = entry::bias_grad,
    .relu_forward = entry::relu_forward,
    .relu_backward = entry::relu_backward,
    .axpy = entry::axpy,
    .scale = entry::scale,
    .conv2d_forward = entry::conv2d_forward,
    .conv2d_backward = entry::conv2d_backward,
    .maxpool2d_forward = entry::maxpool2d_forward,
    .maxpool2d_backward = entry::maxpool2d_backward,
    .softmax_xent_forward = entry::softmax_xent_forward,
    .softmax_xent_backward = entry::softmax_xent_backward,
    .count_correct = entry::count_correct,
    .all_finite = entry::all_finite,
    .sgd_step = entry::sgd_step,
    .adam_step = entry::adam_step,
    .collective_id = entry::collective_id,
    .collective_open = entry::collective_open,
    .collective_close = entry::collective_close,
    .all_reduce_sum = entry::all_reduce_sum,
    .copy = entry::copy,
    .gelu_forward = entry::gelu_forward,
    .gelu_backward = entry::gelu_backward,
    .layer_norm_forward = entry::layer_norm_forward,
    .layer_norm_backward = entry::layer_norm_backward,
    .embedding_forward = entry::embedding_forward,
    .embedding_backward = entry::embedding_backward,
    .attention_forward = entry::attention_forward,
    .attention_backward = entry::attention_backward,
    .dropout_forward = entry::dropout_forward,
    .dropout_backward = entry::dropout_backward,
    .batch_norm_forward = entry::batch_norm_forward,
    .batch_norm_inference = entry::batch_norm_inference,
    .batch_norm_backward = entry::batch_norm_backward,
};

}  // namespace

}  // namespace troupe::gpu

extern "C" __attribute__((visibility("default"))) const troupe_backend_v1* troupe_backend_entry(void) {
  return &troupe::gpu::table;
}
