// Embedding and causal self-attention layers over caller buffers.
#include "train/transformer_layers.hpp"

#include <string>

namespace troupe {

namespace {

class embedding_layer final : public layer {
 public:
  embedding_layer(std::int64_t context, std::int64_t vocab, std::int64_t dim)
      : layer({context}, {context, dim}), context_(context), vocab_(vocab), dim_(dim) {}

  std::string_view kind() const override { return "embedding"; }
  std::string describe() const override {
    return "embedding(" + std::to_string(vocab_) + " tokens, " + std::to_string(context_) + " positions -> " +
           std::to_string(dim_) + ")";
  }
  std::vector<param_decl> params() const override {
    return {{"weight", {vocab_, dim_}, init_kind::embedding_normal, vocab_, dim_},
            {"position", {context_, dim_}, init_kind::embedding_normal, context_, dim_}};
  }
  double forward_flops_per_sample() const override { return static_cast<double>(context_ * dim_); }

  void forward(const layer_forward_args& a) const override {
    a.exec->embedding_forward(a.out, a.in, a.params[0], a.params[1]);
  }
  void backward(const layer_backward_args& a) const override {
    a.exec->embedding_backward(a.param_grads[0], a.param_grads[1], a.grad_out, a.in);
    if (!a.grad_in.empty()) a.exec->fill_zero(a.grad_in);  // token ids have no gradient
  }

 private:
  std::int64_t context_, vocab_, dim_;
};

class attention_layer final : public layer {
 public:
  attention_layer(std::int64_t context, std::int64_t dim, std::int64_t heads)
      : layer({context, dim}, {context, dim}), g_{context, heads, dim / heads} {}

  std::string_view kind() const override { return "attention"; }
  std::string describe() const override {
    return "attention(" + std::to_string(g_.dim()) + ", " + std::to_string(g_.heads) + " heads, causal)";
  }
  std::vector<param_decl> params() const override {
    const std::int64_t c = g_.dim();
    return {{"qkv.weight", {3 * c, c}, init_kind::xavier_uniform, c, 3 * c},
            {"qkv.bias", {3 * c}, init_kind::bias, c, 3 * c},
            {"proj.weight", {c, c}, init_kind::xavier_uniform, c, c},
            {"proj.bias", {c}, init_kind::bias, c, c}};
  }
  // Forward keeps qkv (3C a position), the heads' output (C) and the attention weights
  // (T a position a head) for backward, whose scratch holds their gradients.
  std::int64_t kept_per_sample() const override { return g_.context * (4 * g_.dim() + g_.heads * g_.context); }
  std::int64_t scratch_floats(std::int64_t batch) const override { return batch * kept_per_sample(); }
  double forward_flops_per_sample() const override {
    const double t = static_cast<double>(g_.context), c = static_cast<double>(g_.dim());
    return 2.0 * t * (4 * c * c) + 2.0 * 2.0 * t * t * c;  // projections, then scores and weighted sums
  }

  void forward(const layer_forward_args& a) const override {
    const auto k = split(a.kept, a.in.size(0));
    const std::int64_t c = g_.dim();
    // qkv = x W_qkv^T + b_qkv; the attention weights and the heads' output from it; then
    // the output projection.
    a.exec->gemm(k.qkv, a.in.reshape({k.rows, c}), transpose::no, a.params[0], transpose::yes);
    a.exec->bias_add(k.qkv, a.params[1]);
    a.exec->attention_forward(k.heads_out, k.probs, k.qkv, g_);
    tensor_view y = a.out.reshape({k.rows, c});
    a.exec->gemm(y, k.heads_out, transpose::no, a.params[2], transpose::yes);
    a.exec->bias_add(y, a.params[3]);
  }

  void backward(const layer_backward_args& a) const override {
    const auto k = split(a.kept, a.in.size(0));
    const auto g = split(a.scratch, a.in.size(0));
    const std::int64_t c = g_.dim();
    const const_tensor_view dy = a.grad_out.reshape({k.rows, c});
    // Output projection: dW_o += dy^T heads_out, db_o += colsum dy, d heads_out = dy W_o.
    a.exec->gemm(a.param_grads[2], dy, transpose::yes, k.heads_out, transpose::no, 1.f, 1.f);
    a.exec->bias_grad_accumulate(a.param_grads[3], dy);
    a.exec->gemm(g.heads_out, dy, transpose::no, a.params[2], transpose::no);
    a.exec->attention_backward(g.qkv, g.probs, g.heads_out, k.qkv, k.probs, g_);
    // Input projection: dW_qkv += dqkv^T x, db_qkv += colsum dqkv, dx = dqkv W_qkv.
    a.exec->gemm(a.param_grads[0], g.qkv, transpose::yes, a.in.reshape({k.rows, c}), transpose::no, 1.f, 1.f);
    a.exec->bias_grad_accumulate(a.param_grads[1], g.qkv);
    if (!a.grad_in.empty()) a.exec->gemm(a.grad_in.reshape({k.rows, c}), g.qkv, transpose::no, a.params[0], transpose::no);
  }

 private:
  template <class View>
  struct buffers {
    std::int64_t rows;
    View qkv, heads_out, probs;
  };

  // qkv, the heads' output and the weights of a batch, laid out in `all` (kept or scratch).
  template <class View>
  buffers<View> split(View all, std::int64_t batch) const {
    const std::int64_t t = g_.context, c = g_.dim(), rows = batch * t;
    buffers<View> s{rows, {}, {}, {}};
    s.qkv = all.flat(0, rows * 3 * c).reshape({rows, 3 * c});
    s.heads_out = all.flat(rows * 3 * c, rows * c).reshape({rows, c});
    s.probs = all.flat(rows * 4 * c, batch * g_.heads * t * t).reshape({batch, g_.heads, t, t});
    return s;
  }

  attention_geometry g_;
};

}  // namespace

expected<std::shared_ptr<const layer>> make_embedding(const shape& in, std::int64_t vocab, std::int64_t dim) {
  if (in.rank() != 1)
    return failure{"an embedding reads a sequence of token ids (T) per sample, got " + in.str() +
                   "; train it on a text dataset (--dataset fortunes or text:FILE)"};
  if (vocab <= 0 || dim <= 0)
    return failure{"an embedding needs a vocabulary and a width, got " + std::to_string(vocab) + " and " +
                   std::to_string(dim)};
  return std::shared_ptr<const layer>(std::make_shared<embedding_layer>(in[0], vocab, dim));
}

expected<std::shared_ptr<const layer>> make_attention(const shape& in, std::int64_t heads) {
  if (in.rank() != 2)
    return failure{"attention reads a sequence (T, C) per sample, got " + in.str() + "; put an embedding before it"};
  if (heads <= 0 || in[1] % heads != 0)
    return failure{"attention over " + std::to_string(in[1]) + " columns cannot have " + std::to_string(heads) +
                   " heads: the width must be a multiple of the head count"};
  return std::shared_ptr<const layer>(std::make_shared<attention_layer>(in[0], in[1], heads));
}

}  // namespace troupe
