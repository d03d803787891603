// The residual block (Note [Residual blocks] in train/residual_layer.hpp).
#include "train/residual_layer.hpp"

#include <algorithm>

#include "tensor/random.hpp"

namespace troupe {

namespace {

class residual_layer final : public layer {
 public:
  residual_layer(const shape& in, std::vector<std::shared_ptr<const layer>> inner)
      : layer(in, in), inner_(std::move(inner)) {
    int params = 0;
    for (const auto& l : inner_) {
      first_param_.push_back(params);
      param_count_.push_back(static_cast<int>(l->params().size()));
      params += param_count_.back();
      kept_at_.push_back(kept_floats_);
      stats_at_.push_back(stats_floats_);
      stats_floats_ += l->stats_floats();
      kept_floats_ += l->out_shape().numel() + l->kept_per_sample();
      widest_in_ = std::max(widest_in_, l->in_shape().numel());
    }
  }

  std::string_view kind() const override { return "residual"; }
  std::string describe() const override {
    std::string s = "residual(";
    for (std::size_t i = 0; i < inner_.size(); ++i) s += (i ? ", " : "") + inner_[i]->describe();
    return s + ")";
  }
  std::vector<param_decl> params() const override {
    std::vector<param_decl> out;
    for (std::size_t i = 0; i < inner_.size(); ++i)
      for (param_decl d : inner_[i]->params()) {
        d.suffix = std::to_string(i) + "." + d.suffix;
        out.push_back(std::move(d));
      }
    return out;
  }
  std::int64_t workspace_floats(std::int64_t batch) const override {
    std::int64_t ws = 0;
    for (const auto& l : inner_) ws = std::max(ws, l->workspace_floats(batch));
    return ws;
  }
  // Each inner layer's output and what it keeps, for backward.
  std::int64_t kept_per_sample() const override { return kept_floats_; }
  // The inner layers' statistics, one after another.
  std::int64_t stats_floats() const override { return stats_floats_; }
  // Two gradient buffers (ping and pong), then the inner layers' own scratch.
  std::int64_t scratch_floats(std::int64_t batch) const override {
    std::int64_t inner = 0;
    for (const auto& l : inner_) inner = std::max(inner, l->scratch_floats(batch));
    return batch * 2 * widest_in_ + inner;
  }
  double forward_flops_per_sample() const override {
    double f = static_cast<double>(in_shape().numel());  // the sum
    for (const auto& l : inner_) f += l->forward_flops_per_sample();
    return f;
  }

  void forward(const layer_forward_args& a) const override {
    const std::int64_t b = a.in.size(0);
    const_tensor_view x = a.in;
    for (std::size_t k = 0; k < inner_.size(); ++k) {
      const layer& l = *inner_[k];
      layer_forward_args ia;
      ia.exec = a.exec;
      ia.out = out_of(a.kept, b, k);
      ia.in = x;
      for (int p = 0; p < param_count_[k]; ++p) ia.params[p] = a.params[first_param_[k] + p];
      ia.kept = kept_of(a.kept, b, k);
      ia.workspace = a.workspace;
      ia.scratch = inner_scratch(a.scratch, b);
      ia.training = a.training;
      if (a.training) ia.key = derive_seed(a.key, {static_cast<std::uint64_t>(k)});  // Note [Dropout seeds]
      if (!a.stats.empty() && l.stats_floats() > 0) {  // Note [Population statistics]
        ia.stats = a.stats.flat(stats_at_[k], l.stats_floats());
        ia.calibrating = a.calibrating;
      }
      l.forward(ia);
      x = ia.out;
    }
    a.exec->copy(a.out, a.in);
    a.exec->axpy(a.out, 1.f, x);
  }

  void backward(const layer_backward_args& a) const override {
    const std::int64_t b = a.in.size(0);
    const std::size_t n = inner_.size();
    const_tensor_view dy = a.grad_out;
    for (std::size_t k = n; k-- > 0;) {
      const layer& l = *inner_[k];
      layer_backward_args ia;
      ia.exec = a.exec;
      // f's input gradient is needed only when the block's is.
      if (k > 0 || !a.grad_in.empty()) ia.grad_in = grad_buffer(a.scratch, b, k).reshape(l.in_shape().prepend(b));
      ia.grad_out = dy;
      ia.in = k == 0 ? a.in : out_of(a.kept, b, k - 1);
      ia.out = out_of(a.kept, b, k);
      ia.kept = kept_of(a.kept, b, k);
      for (int p = 0; p < param_count_[k]; ++p) {
        ia.params[p] = a.params[first_param_[k] + p];
        ia.param_grads[p] = a.param_grads[first_param_[k] + p];
      }
      ia.workspace = a.workspace;
      ia.scratch = inner_scratch(a.scratch, b);
      l.backward(ia);
      dy = ia.grad_in;
    }
    if (a.grad_in.empty()) return;
    a.exec->copy(a.grad_in, a.grad_out);  // the identity path
    a.exec->axpy(a.grad_in, 1.f, dy);
  }

 private:
  // In kept, per batch of b: inner layer k's output, then what layer k keeps, for each k.
  template <class View>
  View out_of(View kept, std::int64_t b, std::size_t k) const {
    return kept.flat(b * kept_at_[k], b * inner_[k]->out_shape().numel()).reshape(inner_[k]->out_shape().prepend(b));
  }
  template <class View>
  View kept_of(View kept, std::int64_t b, std::size_t k) const {
    const std::int64_t n = inner_[k]->kept_per_sample();
    return n == 0 ? View() : kept.flat(b * (kept_at_[k] + inner_[k]->out_shape().numel()), b * n);
  }
  // Layer k's input gradient: ping for even k, pong for odd, so it never overwrites the
  // gradient it is computed from (layer k + 1's).
  tensor_view grad_buffer(tensor_view scratch, std::int64_t b, std::size_t k) const {
    return scratch.flat(b * static_cast<std::int64_t>(k % 2) * widest_in_, b * inner_[k]->in_shape().numel());
  }
  tensor_view inner_scratch(tensor_view scratch, std::int64_t b) const {
    const std::int64_t used = b * 2 * widest_in_;
    return scratch.flat(used, scratch.numel() - used);
  }

  std::vector<std::shared_ptr<const layer>> inner_;
  // Per inner layer: where its parameters start in the block's, and how many it has
  // (counted once here: params() builds its declarations, names and all).
  std::vector<int> first_param_, param_count_;
  std::vector<std::int64_t> kept_at_;  // per inner layer: where its output starts in kept, per sample
  std::int64_t kept_floats_ = 0, widest_in_ = 0;  // per sample
  std::vector<std::int64_t> stats_at_;  // per inner layer: where its statistics start
  std::int64_t stats_floats_ = 0;
};

}  // namespace

expected<std::shared_ptr<const layer>> make_residual(const shape& in, std::vector<std::shared_ptr<const layer>> inner) {
  if (inner.empty()) return failure{"a residual block needs at least one layer"};
  std::size_t params = 0;
  for (const auto& l : inner) {
    if (l->saved_per_sample() > 0)
      return failure{"a residual block cannot hold " + l->describe() +
                     ", which keeps state for backward; put it outside the block"};
    params += l->params().size();
  }
  if (params > static_cast<std::size_t>(max_layer_params))
    return failure{"a residual block holds at most " + std::to_string(max_layer_params) +
                   " parameter tensors (a weight and a bias a layer), this one " + std::to_string(params)};
  if (inner.back()->out_shape() != in)
    return failure{"a residual block must end in its input's shape " + in.str() + ", not " +
                   inner.back()->out_shape().str()};
  return std::shared_ptr<const layer>(std::make_shared<residual_layer>(in, std::move(inner)));
}

}  // namespace troupe
