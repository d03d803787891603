// compute: where a model's math runs. Default-constructed it calls the host ops of
// tensor/ directly; built on a backend_context it sends every op through that backend's
// table, and its tensors live in that backend's memory (device memory for CUDA). Layers,
// models and stage_replica do all their arithmetic and allocation through one, so the
// same code trains on the host or on a GPU. Running it on the CPU backend takes the whole
// backend path on the host, which is how the tests check it without a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/attention.hpp"
#include "tensor/backend.hpp"
#include "tensor/conv.hpp"
#include "tensor/elementwise.hpp"
#include "tensor/gemm.hpp"
#include "tensor/pool.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class compute {
 public:
  compute() = default;  // the host, directly
  // Through backend b. With `staged`, host-memory backends are treated like a device
  // (inputs uploaded, results downloaded, host mirrors kept): the tests run the CUDA
  // path's every copy on the CPU backend this way.
  explicit compute(const backend_context& b, bool staged = false) : b_(&b), staged_(staged) {}

  // The products of weights and activations (gemm, the convolutions) at precision p
  // (tensor/gemm.hpp). bf16 is computed by the host, so it needs host memory; a compute
  // on a device refuses it (a contract error).
  void set_precision(precision p);
  precision products() const { return p_; }

  bool on_backend() const { return b_ != nullptr; }
  // Whether callers may read and write this compute's tensors from the host directly.
  bool host_memory() const { return !b_ || (b_->where().kind == device_kind::cpu && !staged_); }
  std::string name() const;
  const backend_context* backend() const { return b_; }

  // A zero-filled tensor in this compute's memory.
  tensor make(shape s, dtype t = dtype::f32) const;
  // Between host memory and this compute's memory, and within it. Contiguous, same bytes.
  void upload(tensor_view dst, const_tensor_view host_src) const;
  void download(tensor_view host_dst, const_tensor_view src) const;
  void copy(tensor_view dst, const_tensor_view src) const;
  void fill_zero(tensor_view t) const;
  void synchronize() const;

  // The ops, with the host ops' contracts (tensor/gemm.hpp, ops.hpp, conv.hpp, pool.hpp,
  // layer_norm.hpp, batch_norm.hpp, embedding.hpp, attention.hpp, loss.hpp, update_ops.hpp). The convolution workspace is used on the host only.
  void gemm(tensor_view out, const_tensor_view a, transpose ta, const_tensor_view b, transpose tb, float alpha = 1.f,
            float beta = 0.f) const;
  void bias_add(tensor_view out, const_tensor_view bias) const;
  void bias_grad_accumulate(tensor_view grad_bias, const_tensor_view grad_out) const;
  void relu_forward(tensor_view out, const_tensor_view in) const;
  void relu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view out) const;
  void gelu_forward(tensor_view out, const_tensor_view in) const;
  void gelu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view in) const;
  void dropout_forward(tensor_view out, tensor_view kept, const_tensor_view in, float p, std::uint64_t key) const;
  void dropout_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view kept) const;
  // Batch normalisation of in (batch, channels, positions) (tensor/batch_norm.hpp).
  void batch_norm_forward(tensor_view out, tensor_view stats, const_tensor_view in, const_tensor_view gamma,
                          const_tensor_view beta, float eps) const;
  void batch_norm_inference(tensor_view out, const_tensor_view in, const_tensor_view gamma, const_tensor_view beta,
                            const_tensor_view population, float eps) const;
  void batch_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                           const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                           const_tensor_view stats) const;
  void layer_norm_forward(tensor_view out, const_tensor_view in, const_tensor_view gamma, const_tensor_view beta,
                          float eps) const;
  void layer_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                           const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma, float eps) const;
  void embedding_forward(tensor_view out, const_tensor_view ids, const_tensor_view table,
                         const_tensor_view positions) const;
  void embedding_backward(tensor_view grad_table, tensor_view grad_positions, const_tensor_view grad_out,
                          const_tensor_view ids) const;
  void attention_forward(tensor_view out, tensor_view probs, const_tensor_view qkv, const attention_geometry& g) const;
  void attention_backward(tensor_view grad_qkv, tensor_view grad_probs, const_tensor_view grad_out,
                          const_tensor_view qkv, const_tensor_view probs, const attention_geometry& g) const;
  void conv2d_forward(tensor_view out, const_tensor_view in, const_tensor_view weight, const_tensor_view bias,
                      const conv_geometry& g, tensor_view workspace) const;
  void conv2d_backward(tensor_view grad_in, tensor_view grad_weight, tensor_view grad_bias, const_tensor_view grad_out,
                       const_tensor_view in, const_tensor_view weight, const conv_geometry& g,
                       tensor_view workspace) const;
  void maxpool2d_forward(tensor_view out, tensor_view argmax, const_tensor_view in, const pool_geometry& g) const;
  void maxpool2d_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view argmax,
                          const pool_geometry& g) const;
  double softmax_xent_forward(tensor_view probs, const_tensor_view logits, const_tensor_view labels) const;
  void softmax_xent_backward(tensor_view grad_logits, const_tensor_view probs, const_tensor_view labels,
                             float scale) const;
  std::int64_t count_correct(const_tensor_view logits, const_tensor_view labels) const;
  void sgd_step(tensor_view param, const_tensor_view grad, tensor_view velocity, const fn::sgd_momentum& f) const;
  void adam_step(tensor_view param, const_tensor_view grad, tensor_view m, tensor_view v, const fn::adam& f) const;
  void scale(tensor_view out, float alpha) const;                     // out *= alpha
  void axpy(tensor_view out, float alpha, const_tensor_view in) const;  // out += alpha * in

 private:
  const backend_context* b_ = nullptr;
  bool staged_ = false;
  precision p_ = precision::fp32;
};

// The host compute, for callers that name none.
const compute& host_compute();

}  // namespace troupe
