// compute: each op to the host function, or through the backend's table.
#include "tensor/compute.hpp"

#include <cstring>

#include "tensor/batch_norm.hpp"
#include "tensor/embedding.hpp"
#include "tensor/layer_norm.hpp"
#include "tensor/loss.hpp"
#include "tensor/ops.hpp"
#include "tensor/update_ops.hpp"

namespace troupe {

namespace {

float* fp(tensor_view v) { return reinterpret_cast<float*>(v.bytes()); }
const float* fp(const_tensor_view v) { return reinterpret_cast<const float*>(v.bytes()); }
std::int32_t* ip(tensor_view v) { return reinterpret_cast<std::int32_t*>(v.bytes()); }
const std::int32_t* ip(const_tensor_view v) { return reinterpret_cast<const std::int32_t*>(v.bytes()); }

void require(bool ok, const char* what) { TROUPE_CHECK(ok, what); }

void release(void* ctx, std::byte* p) {
  auto* b = static_cast<const backend_context*>(ctx);
  (void)b->table().release(b->handle(), p);  // a release that fails has nowhere to report
}

troupe_conv_geom abi(const conv_geometry& g) {
  return {g.in_channels, g.in_h, g.in_w, g.out_channels, g.kernel_h, g.kernel_w, g.stride, g.pad};
}
troupe_pool_geom abi(const pool_geometry& g) { return {g.channels, g.in_h, g.in_w, g.kernel, g.stride}; }

}  // namespace

const compute& host_compute() {
  static const compute host;
  return host;
}

void compute::set_precision(precision p) {
  TROUPE_CHECK(p == precision::fp32 || host_memory(),
               std::string(name_of(p)) + " products run on the host; " + name() + " computes in fp32 only");
  p_ = p;
}

std::string compute::name() const { return b_ ? to_string(b_->where()) + " (" + std::string(b_->name()) + " backend)" : "host"; }

tensor compute::make(shape s, dtype t) const {
  if (!b_) return tensor(s, t);
  const std::size_t bytes = static_cast<std::size_t>(s.numel()) * size_of(t);
  void* p = nullptr;
  b_->call("alloc", &troupe_backend_v1::alloc, bytes == 0 ? std::size_t{1} : bytes, &p);
  tensor out = tensor::adopt(static_cast<std::byte*>(p), buffer_release{&release, const_cast<backend_context*>(b_)}, s,
                             t, b_->where());
  if (bytes) b_->call("fill_zero", &troupe_backend_v1::fill_zero, p, bytes);
  return out;
}

void compute::upload(tensor_view dst, const_tensor_view src) const {
  require(dst.nbytes() == src.nbytes() && dst.is_contiguous() && src.is_contiguous(), "upload: sizes differ");
  if (!b_) return troupe::copy(dst, src);
  if (src.nbytes())
    b_->call("upload", &troupe_backend_v1::upload, static_cast<void*>(dst.bytes()),
             static_cast<const void*>(src.bytes()), src.nbytes());
}

void compute::download(tensor_view dst, const_tensor_view src) const {
  require(dst.nbytes() == src.nbytes() && dst.is_contiguous() && src.is_contiguous(), "download: sizes differ");
  if (!b_) return troupe::copy(dst, src);
  if (src.nbytes())
    b_->call("download", &troupe_backend_v1::download, static_cast<void*>(dst.bytes()),
             static_cast<const void*>(src.bytes()), src.nbytes());
}

void compute::copy(tensor_view dst, const_tensor_view src) const {
  require(dst.nbytes() == src.nbytes() && dst.is_contiguous() && src.is_contiguous(), "copy: sizes differ");
  if (!b_) return troupe::copy(dst, src);
  if (src.nbytes() && dst.bytes() != src.bytes())
    b_->call("copy", &troupe_backend_v1::copy, static_cast<void*>(dst.bytes()), static_cast<const void*>(src.bytes()),
             src.nbytes());
}

void compute::fill_zero(tensor_view t) const {
  if (!b_) {
    if (t.nbytes()) std::memset(t.bytes(), 0, t.nbytes());
    return;
  }
  if (t.nbytes()) b_->call("fill_zero", &troupe_backend_v1::fill_zero, static_cast<void*>(t.bytes()), t.nbytes());
}

void compute::synchronize() const {
  if (b_) b_->call("synchronize", &troupe_backend_v1::synchronize);
}

void compute::gemm(tensor_view out, const_tensor_view a, transpose ta, const_tensor_view b, transpose tb, float alpha,
                   float beta) const {
  if (!b_ || p_ != precision::fp32) return troupe::gemm(out, a, ta, b, tb, alpha, beta, p_);
  require(out.rank() == 2 && a.rank() == 2 && b.rank() == 2, "gemm operands must be 2-D");
  const std::int64_t m = ta == transpose::yes ? a.size(1) : a.size(0);
  const std::int64_t k = ta == transpose::yes ? a.size(0) : a.size(1);
  const std::int64_t n = tb == transpose::yes ? b.size(0) : b.size(1);
  require(out.size(0) == m && out.size(1) == n && (tb == transpose::yes ? b.size(1) : b.size(0)) == k, "gemm shapes");
  b_->call("gemm", &troupe_backend_v1::gemm, ta == transpose::yes ? 1 : 0, tb == transpose::yes ? 1 : 0, m, n, k,
           alpha, fp(a), a.size(1), fp(b), b.size(1), beta, fp(out), n);
}

void compute::bias_add(tensor_view out, const_tensor_view bias) const {
  if (!b_) return troupe::bias_add(out, bias);
  const std::int64_t n = bias.numel();
  require(out.rank() >= 1 && out.numel() == out.size(0) * n, "bias_add shapes");
  b_->call("bias_add", &troupe_backend_v1::bias_add, fp(out), fp(bias), out.size(0), n);
}

void compute::bias_grad_accumulate(tensor_view grad_bias, const_tensor_view grad_out) const {
  if (!b_) return troupe::bias_grad_accumulate(grad_bias, grad_out);
  const std::int64_t channels = grad_bias.numel(), batch = grad_out.size(0);
  require(grad_out.rank() >= 2 && grad_out.size(1) == channels, "bias_grad shapes");
  b_->call("bias_grad", &troupe_backend_v1::bias_grad, fp(grad_bias), fp(grad_out), batch, channels,
           grad_out.numel() / (batch * channels));
}

void compute::relu_forward(tensor_view out, const_tensor_view in) const {
  if (!b_) return troupe::relu_forward(out, in);
  require(out.numel() == in.numel(), "relu shapes");
  b_->call("relu_forward", &troupe_backend_v1::relu_forward, fp(out), fp(in), in.numel());
}

void compute::relu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view out) const {
  if (!b_) return troupe::relu_backward(grad_in, grad_out, out);
  require(grad_in.numel() == out.numel() && grad_out.numel() == out.numel(), "relu_backward shapes");
  b_->call("relu_backward", &troupe_backend_v1::relu_backward, fp(grad_in), fp(grad_out), fp(out), out.numel());
}

void compute::gelu_forward(tensor_view out, const_tensor_view in) const {
  if (!b_) return troupe::gelu_forward(out, in);
  require(out.numel() == in.numel(), "gelu shapes");
  b_->call("gelu_forward", &troupe_backend_v1::gelu_forward, fp(out), fp(in), in.numel());
}

void compute::dropout_forward(tensor_view out, tensor_view kept, const_tensor_view in, float p,
                              std::uint64_t key) const {
  if (!b_) return troupe::dropout_forward(out, kept, in, p, key);
  require(out.numel() == in.numel() && kept.numel() == in.numel(), "dropout shapes");
  require(p >= 0.f && p < 1.f, "dropout: p must lie in [0, 1)");
  b_->call("dropout_forward", &troupe_backend_v1::dropout_forward, fp(out), fp(kept), fp(in), in.numel(), p, key);
}

void compute::dropout_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view kept) const {
  if (!b_) return troupe::dropout_backward(grad_in, grad_out, kept);
  require(grad_in.numel() == kept.numel() && grad_out.numel() == kept.numel(), "dropout_backward shapes");
  b_->call("dropout_backward", &troupe_backend_v1::dropout_backward, fp(grad_in), fp(grad_out), fp(kept),
           kept.numel());
}

void compute::batch_norm_forward(tensor_view out, tensor_view stats, const_tensor_view in, const_tensor_view gamma,
                                 const_tensor_view beta, float eps) const {
  if (!b_) return troupe::batch_norm_forward(out, stats, in, gamma, beta, eps);
  require(in.rank() == 3 && out.numel() == in.numel() && gamma.numel() == in.size(1) && beta.numel() == in.size(1) &&
              stats.numel() == 2 * in.size(1),
          "batch_norm_forward shapes");
  b_->call("batch_norm_forward", &troupe_backend_v1::batch_norm_forward, fp(out), fp(stats), fp(in), fp(gamma),
           fp(beta), in.size(0), in.size(1), in.size(2), eps);
}

void compute::batch_norm_inference(tensor_view out, const_tensor_view in, const_tensor_view gamma,
                                   const_tensor_view beta, const_tensor_view population, float eps) const {
  if (!b_) return troupe::batch_norm_inference(out, in, gamma, beta, population, eps);
  require(in.rank() == 3 && out.numel() == in.numel() && gamma.numel() == in.size(1) && beta.numel() == in.size(1) &&
              population.numel() == 2 * in.size(1),
          "batch_norm_inference shapes");
  b_->call("batch_norm_inference", &troupe_backend_v1::batch_norm_inference, fp(out), fp(in), fp(gamma), fp(beta),
           fp(population), in.size(0), in.size(1), in.size(2), eps);
}

void compute::batch_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                                  const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                                  const_tensor_view stats) const {
  if (!b_) return troupe::batch_norm_backward(grad_in, grad_gamma, grad_beta, grad_out, in, gamma, stats);
  require(in.rank() == 3 && grad_out.numel() == in.numel() && gamma.numel() == in.size(1) &&
              grad_gamma.numel() == in.size(1) && grad_beta.numel() == in.size(1) && stats.numel() == 2 * in.size(1) &&
              (grad_in.empty() || grad_in.numel() == in.numel()),
          "batch_norm_backward shapes");
  b_->call("batch_norm_backward", &troupe_backend_v1::batch_norm_backward, grad_in.empty() ? nullptr : fp(grad_in),
           fp(grad_gamma), fp(grad_beta), fp(grad_out), fp(in), fp(gamma), fp(stats), in.size(0), in.size(1),
           in.size(2));
}

void compute::gelu_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view in) const {
  if (!b_) return troupe::gelu_backward(grad_in, grad_out, in);
  require(grad_in.numel() == in.numel() && grad_out.numel() == in.numel(), "gelu_backward shapes");
  b_->call("gelu_backward", &troupe_backend_v1::gelu_backward, fp(grad_in), fp(grad_out), fp(in), in.numel());
}

void compute::layer_norm_forward(tensor_view out, const_tensor_view in, const_tensor_view gamma,
                                 const_tensor_view beta, float eps) const {
  if (!b_) return troupe::layer_norm_forward(out, in, gamma, beta, eps);
  const std::int64_t cols = gamma.numel();
  require(cols > 0 && in.numel() % cols == 0 && out.numel() == in.numel() && beta.numel() == cols,
          "layer_norm shapes");
  b_->call("layer_norm_forward", &troupe_backend_v1::layer_norm_forward, fp(out), fp(in), fp(gamma), fp(beta),
           in.numel() / cols, cols, eps);
}

void compute::layer_norm_backward(tensor_view grad_in, tensor_view grad_gamma, tensor_view grad_beta,
                                  const_tensor_view grad_out, const_tensor_view in, const_tensor_view gamma,
                                  float eps) const {
  if (!b_) return troupe::layer_norm_backward(grad_in, grad_gamma, grad_beta, grad_out, in, gamma, eps);
  const std::int64_t cols = gamma.numel();
  require(cols > 0 && in.numel() % cols == 0 && grad_out.numel() == in.numel() && grad_gamma.numel() == cols &&
              grad_beta.numel() == cols && (grad_in.empty() || grad_in.numel() == in.numel()),
          "layer_norm_backward shapes");
  b_->call("layer_norm_backward", &troupe_backend_v1::layer_norm_backward,
           grad_in.empty() ? nullptr : fp(grad_in), fp(grad_gamma), fp(grad_beta), fp(grad_out), fp(in), fp(gamma),
           in.numel() / cols, cols, eps);
}

void compute::embedding_forward(tensor_view out, const_tensor_view ids, const_tensor_view table,
                                const_tensor_view positions) const {
  if (!b_) return troupe::embedding_forward(out, ids, table, positions);
  require(table.rank() == 2 && positions.rank() == 2 && table.size(1) == positions.size(1) &&
              ids.numel() % positions.size(0) == 0 && out.numel() == ids.numel() * table.size(1),
          "embedding_forward shapes");
  b_->call("embedding_forward", &troupe_backend_v1::embedding_forward, fp(out), fp(ids), fp(table), fp(positions),
           ids.numel() / positions.size(0), positions.size(0), table.size(0), table.size(1));
}

void compute::embedding_backward(tensor_view grad_table, tensor_view grad_positions, const_tensor_view grad_out,
                                 const_tensor_view ids) const {
  if (!b_) return troupe::embedding_backward(grad_table, grad_positions, grad_out, ids);
  require(grad_table.rank() == 2 && grad_positions.rank() == 2 && grad_table.size(1) == grad_positions.size(1) &&
              ids.numel() % grad_positions.size(0) == 0 && grad_out.numel() == ids.numel() * grad_table.size(1),
          "embedding_backward shapes");
  b_->call("embedding_backward", &troupe_backend_v1::embedding_backward, fp(grad_table), fp(grad_positions),
           fp(grad_out), fp(ids), ids.numel() / grad_positions.size(0), grad_positions.size(0), grad_table.size(0),
           grad_table.size(1));
}

void compute::attention_forward(tensor_view out, tensor_view probs, const_tensor_view qkv,
                                const attention_geometry& g) const {
  if (!b_) return troupe::causal_attention_forward(out, probs, qkv, g);
  const std::int64_t per_seq = g.context * g.dim();
  require(per_seq > 0 && out.numel() % per_seq == 0, "attention_forward shapes");
  const std::int64_t batch = out.numel() / per_seq;
  require(qkv.numel() == 3 * out.numel() && probs.numel() == batch * g.heads * g.context * g.context,
          "attention_forward shapes");
  b_->call("attention_forward", &troupe_backend_v1::attention_forward, fp(out), fp(probs), fp(qkv), batch, g.context,
           g.heads, g.head_dim);
}

void compute::attention_backward(tensor_view grad_qkv, tensor_view grad_probs, const_tensor_view grad_out,
                                 const_tensor_view qkv, const_tensor_view probs, const attention_geometry& g) const {
  if (!b_) return troupe::causal_attention_backward(grad_qkv, grad_probs, grad_out, qkv, probs, g);
  const std::int64_t per_seq = g.context * g.dim();
  require(per_seq > 0 && grad_out.numel() % per_seq == 0, "attention_backward shapes");
  const std::int64_t batch = grad_out.numel() / per_seq;
  require(qkv.numel() == 3 * grad_out.numel() && grad_qkv.numel() == qkv.numel() && grad_probs.numel() == probs.numel() &&
              probs.numel() == batch * g.heads * g.context * g.context,
          "attention_backward shapes");
  b_->call("attention_backward", &troupe_backend_v1::attention_backward, fp(grad_qkv), fp(grad_probs), fp(grad_out),
           fp(qkv), fp(probs), batch, g.context, g.heads, g.head_dim);
}

void compute::conv2d_forward(tensor_view out, const_tensor_view in, const_tensor_view weight, const_tensor_view bias,
                             const conv_geometry& g, tensor_view workspace) const {
  if (!b_ || p_ != precision::fp32) return troupe::conv2d_forward(out, in, weight, bias, g, workspace, p_);
  require(g.valid() && in.rank() == 4 && out.numel() == in.size(0) * g.out_channels * g.col_cols(), "conv2d shapes");
  const troupe_conv_geom ag = abi(g);
  b_->call("conv2d_forward", &troupe_backend_v1::conv2d_forward, fp(out), fp(in), fp(weight),
           bias.empty() ? nullptr : fp(bias), in.size(0), &ag);
}

void compute::conv2d_backward(tensor_view grad_in, tensor_view grad_weight, tensor_view grad_bias,
                              const_tensor_view grad_out, const_tensor_view in, const_tensor_view weight,
                              const conv_geometry& g, tensor_view workspace) const {
  if (!b_ || p_ != precision::fp32)
    return troupe::conv2d_backward(grad_in, grad_weight, grad_bias, grad_out, in, weight, g, workspace, p_);
  require(g.valid() && in.rank() == 4 && grad_weight.numel() == weight.numel(), "conv2d_backward shapes");
  const troupe_conv_geom ag = abi(g);
  b_->call("conv2d_backward", &troupe_backend_v1::conv2d_backward, grad_in.empty() ? nullptr : fp(grad_in),
           fp(grad_weight), grad_bias.empty() ? nullptr : fp(grad_bias), fp(grad_out), fp(in), fp(weight), in.size(0),
           &ag);
}

void compute::maxpool2d_forward(tensor_view out, tensor_view argmax, const_tensor_view in,
                                const pool_geometry& g) const {
  if (!b_) return troupe::maxpool2d_forward(out, argmax, in, g);
  require(g.valid() && in.rank() == 4 && argmax.type() == dtype::i32 && argmax.numel() == out.numel(),
          "maxpool2d shapes");
  const troupe_pool_geom ag = abi(g);
  b_->call("maxpool2d_forward", &troupe_backend_v1::maxpool2d_forward, fp(out), ip(argmax), fp(in), in.size(0), &ag);
}

void compute::maxpool2d_backward(tensor_view grad_in, const_tensor_view grad_out, const_tensor_view argmax,
                                 const pool_geometry& g) const {
  if (!b_) return troupe::maxpool2d_backward(grad_in, grad_out, argmax, g);
  require(g.valid() && grad_in.rank() == 4 && argmax.type() == dtype::i32, "maxpool2d_backward shapes");
  const troupe_pool_geom ag = abi(g);
  b_->call("maxpool2d_backward", &troupe_backend_v1::maxpool2d_backward, fp(grad_in), fp(grad_out), ip(argmax),
           grad_in.size(0), &ag);
}

double compute::softmax_xent_forward(tensor_view probs, const_tensor_view logits, const_tensor_view labels) const {
  if (!b_) return troupe::softmax_xent_forward(probs, logits, labels);
  require(logits.rank() == 2 && probs.numel() == logits.numel() && labels.numel() == logits.size(0) &&
              labels.type() == dtype::i32,
          "softmax_xent shapes");
  double loss = 0;
  b_->call("softmax_xent_forward", &troupe_backend_v1::softmax_xent_forward, fp(probs), fp(logits), ip(labels),
           logits.size(0), logits.size(1), &loss);
  return loss;
}

void compute::softmax_xent_backward(tensor_view grad_logits, const_tensor_view probs, const_tensor_view labels,
                                    float scale) const {
  if (!b_) return troupe::softmax_xent_backward(grad_logits, probs, labels, scale);
  require(probs.rank() == 2 && grad_logits.numel() == probs.numel() && labels.numel() == probs.size(0),
          "softmax_xent_backward shapes");
  b_->call("softmax_xent_backward", &troupe_backend_v1::softmax_xent_backward, fp(grad_logits), fp(probs), ip(labels),
           probs.size(0), probs.size(1), scale);
}

std::int64_t compute::count_correct(const_tensor_view logits, const_tensor_view labels) const {
  if (!b_) return troupe::count_correct(logits, labels);
  require(logits.rank() == 2 && labels.numel() == logits.size(0), "count_correct shapes");
  std::int64_t correct = 0;
  b_->call("count_correct", &troupe_backend_v1::count_correct, fp(logits), ip(labels), logits.size(0), logits.size(1),
           &correct);
  return correct;
}

void compute::sgd_step(tensor_view param, const_tensor_view grad, tensor_view velocity,
                       const fn::sgd_momentum& f) const {
  if (!b_) return troupe::sgd_step(param, grad, velocity, f);
  require(grad.numel() == param.numel() && velocity.numel() == param.numel(), "sgd_step sizes");
  const troupe_sgd_args a{f.lr, f.momentum, f.weight_decay, f.nesterov ? 1 : 0};
  b_->call("sgd_step", &troupe_backend_v1::sgd_step, fp(param), fp(grad), fp(velocity), param.numel(), &a);
}

void compute::adam_step(tensor_view param, const_tensor_view grad, tensor_view m, tensor_view v,
                        const fn::adam& f) const {
  if (!b_) return troupe::adam_step(param, grad, m, v, f);
  require(grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
          "adam_step sizes");
  const troupe_adam_args a{f.lr, f.beta1, f.beta2, f.eps, f.weight_decay, f.bias1, f.bias2_sqrt};
  b_->call("adam_step", &troupe_backend_v1::adam_step, fp(param), fp(grad), fp(m), fp(v), param.numel(), &a);
}

void compute::scale(tensor_view out, float alpha) const {
  if (!b_) return troupe::scale(out, alpha);
  b_->call("scale", &troupe_backend_v1::scale, fp(out), alpha, out.numel());
}

void compute::axpy(tensor_view out, float alpha, const_tensor_view in) const {
  if (!b_) return troupe::axpy(out, alpha, in);
  require(out.numel() == in.numel(), "axpy shapes");
  b_->call("axpy", &troupe_backend_v1::axpy, fp(out), alpha, fp(in), in.numel());
}

}  // namespace troupe
