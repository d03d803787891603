// Linear, Conv2d, MaxPool2d, ReLU, GELU, Dropout, BatchNorm, LayerNorm and Flatten: forward and backward over
// caller buffers.
#include "train/layers.hpp"

#include <cstdio>
#include <cstring>

#include "tensor/batch_norm.hpp"
#include "tensor/gemm.hpp"
#include "tensor/layer_norm.hpp"
#include "tensor/ops.hpp"

namespace troupe {

namespace {

// ---------------------------------------------------------------------------------------
// Linear

class linear_layer final : public layer {
 public:
  // in: (features) or (positions, features); the map applies to the last dimension.
  linear_layer(const shape& in, std::int64_t out, init_kind init)
      : layer(in, in.rank() == 1 ? shape{out} : shape{in[0], out}),
        in_(in[in.rank() - 1]),
        out_(out),
        positions_(in.rank() == 1 ? 1 : in[0]),
        init_(init) {}

  std::string_view kind() const override { return "linear"; }
  std::string describe() const override {
    return "linear(" + std::to_string(in_) + " -> " + std::to_string(out_) +
           (positions_ > 1 ? ", at each of " + std::to_string(positions_) + " positions)" : ")");
  }
  std::vector<param_decl> params() const override {
    return {{"weight", {out_, in_}, init_, in_, out_}, {"bias", {out_}, init_kind::bias, in_, out_}};
  }
  double forward_flops_per_sample() const override { return 2.0 * in_ * out_ * positions_; }

  void forward(const layer_forward_args& a) const override {
    const std::int64_t rows = a.in.size(0) * positions_;
    tensor_view y = a.out.reshape({rows, out_});
    // y (rows, out) = x (rows, in) * W^T; bias added row-wise.
    a.exec->gemm(y, a.in.reshape({rows, in_}), transpose::no, a.params[0], transpose::yes);
    a.exec->bias_add(y, a.params[1]);
  }

  void backward(const layer_backward_args& a) const override {
    const std::int64_t rows = a.in.size(0) * positions_;
    const_tensor_view dy = a.grad_out.reshape({rows, out_});
    // dW (out, in) += dy^T (out, rows) * x (rows, in)
    a.exec->gemm(a.param_grads[0], dy, transpose::yes, a.in.reshape({rows, in_}), transpose::no, 1.f, 1.f);
    a.exec->bias_grad_accumulate(a.param_grads[1], dy);
    // dx (rows, in) = dy (rows, out) * W (out, in)
    if (!a.grad_in.empty())
      a.exec->gemm(a.grad_in.reshape({rows, in_}), dy, transpose::no, a.params[0], transpose::no);
  }

 private:
  std::int64_t in_, out_, positions_;
  init_kind init_;
};

// ---------------------------------------------------------------------------------------
// Conv2d

class conv2d_layer final : public layer {
 public:
  conv2d_layer(const conv_geometry& g, init_kind init)
      : layer({g.in_channels, g.in_h, g.in_w}, {g.out_channels, g.out_h(), g.out_w()}), g_(g), init_(init) {}

  std::string_view kind() const override { return "conv2d"; }
  std::string describe() const override {
    return "conv2d(" + std::to_string(g_.in_channels) + " -> " + std::to_string(g_.out_channels) + ", " +
           std::to_string(g_.kernel_h) + "x" + std::to_string(g_.kernel_w) + ", stride " + std::to_string(g_.stride) +
           ", pad " + std::to_string(g_.pad) + ")";
  }
  std::vector<param_decl> params() const override {
    const std::int64_t fan_in = g_.col_rows(), fan_out = g_.out_channels * g_.kernel_h * g_.kernel_w;
    return {{"weight", {g_.out_channels, g_.in_channels, g_.kernel_h, g_.kernel_w}, init_, fan_in, fan_out},
            {"bias", {g_.out_channels}, init_kind::bias, fan_in, fan_out}};
  }
  std::int64_t workspace_floats(std::int64_t) const override { return conv2d_workspace_floats(g_); }
  double forward_flops_per_sample() const override {
    return 2.0 * static_cast<double>(g_.out_channels) * g_.col_rows() * g_.col_cols();
  }

  void forward(const layer_forward_args& a) const override {
    a.exec->conv2d_forward(a.out, a.in, a.params[0], a.params[1], g_, a.workspace);
  }
  void backward(const layer_backward_args& a) const override {
    a.exec->conv2d_backward(a.grad_in, a.param_grads[0], a.param_grads[1], a.grad_out, a.in, a.params[0], g_,
                            a.workspace);
  }

 private:
  conv_geometry g_;
  init_kind init_;
};

// ---------------------------------------------------------------------------------------
// MaxPool2d

class maxpool2d_layer final : public layer {
 public:
  explicit maxpool2d_layer(const pool_geometry& g)
      : layer({g.channels, g.in_h, g.in_w}, {g.channels, g.out_h(), g.out_w()}), g_(g) {}

  std::string_view kind() const override { return "maxpool2d"; }
  std::string describe() const override {
    return "maxpool2d(" + std::to_string(g_.kernel) + "x" + std::to_string(g_.kernel) + ", stride " +
           std::to_string(g_.stride) + ")";
  }
  std::int64_t saved_per_sample() const override { return out_shape().numel(); }

  void forward(const layer_forward_args& a) const override { a.exec->maxpool2d_forward(a.out, a.saved, a.in, g_); }
  void backward(const layer_backward_args& a) const override {
    if (!a.grad_in.empty()) a.exec->maxpool2d_backward(a.grad_in, a.grad_out, a.saved, g_);
  }

 private:
  pool_geometry g_;
};

// ---------------------------------------------------------------------------------------
// ReLU and Flatten

class relu_layer final : public layer {
 public:
  explicit relu_layer(const shape& in) : layer(in, in) {}
  std::string_view kind() const override { return "relu"; }
  std::string describe() const override { return "relu"; }
  void forward(const layer_forward_args& a) const override { a.exec->relu_forward(a.out, a.in); }
  void backward(const layer_backward_args& a) const override {
    if (!a.grad_in.empty()) a.exec->relu_backward(a.grad_in, a.grad_out, a.out);
  }
};

class gelu_layer final : public layer {
 public:
  explicit gelu_layer(const shape& in) : layer(in, in) {}
  std::string_view kind() const override { return "gelu"; }
  std::string describe() const override { return "gelu"; }
  void forward(const layer_forward_args& a) const override { a.exec->gelu_forward(a.out, a.in); }
  void backward(const layer_backward_args& a) const override {
    if (!a.grad_in.empty()) a.exec->gelu_backward(a.grad_in, a.grad_out, a.in);
  }
};

class flatten_layer final : public layer {
 public:
  explicit flatten_layer(const shape& in) : layer(in, {in.numel()}) {}
  std::string_view kind() const override { return "flatten"; }
  std::string describe() const override { return "flatten(" + in_shape().str() + " -> " + out_shape().str() + ")"; }
  void forward(const layer_forward_args& a) const override { a.exec->copy(a.out, a.in); }
  void backward(const layer_backward_args& a) const override {
    if (!a.grad_in.empty()) a.exec->copy(a.grad_in, a.grad_out);
  }
};

// ---------------------------------------------------------------------------------------
// Dropout (Note [Dropout seeds] in train/layer.hpp)

class dropout_layer final : public layer {
 public:
  dropout_layer(const shape& in, float p) : layer(in, in), p_(p) {}
  std::string_view kind() const override { return "dropout"; }
  std::string describe() const override { return "dropout(" + format_rate(p_) + ")"; }
  // The mask's scales (0 or 1 / (1 - p)), for backward.
  std::int64_t kept_per_sample() const override { return in_shape().numel(); }
  void forward(const layer_forward_args& a) const override {
    if (!a.training) return a.exec->copy(a.out, a.in);
    a.exec->dropout_forward(a.out, a.kept, a.in, p_, a.key);
  }
  // After a training pass (the only forward a backward follows).
  void backward(const layer_backward_args& a) const override {
    if (!a.grad_in.empty()) a.exec->dropout_backward(a.grad_in, a.grad_out, a.kept);
  }

 private:
  float p_;
};

// ---------------------------------------------------------------------------------------
// BatchNorm (Note [Population statistics] in train/layer.hpp)

class batch_norm_layer final : public layer {
 public:
  explicit batch_norm_layer(const shape& in)
      : layer(in, in), channels_(in[0]), positions_(in.numel() / in[0]) {}
  std::string_view kind() const override { return "batchnorm"; }
  std::string describe() const override { return "batchnorm(" + std::to_string(channels_) + ")"; }
  std::vector<param_decl> params() const override {
    return {{"weight", {channels_}, init_kind::ones, channels_, channels_},
            {"bias", {channels_}, init_kind::zeros, channels_, channels_}};
  }
  // The batch's statistics (2C floats of the first sample's share), for backward.
  std::int64_t kept_per_sample() const override { return 2 * channels_; }
  // The population's mean and variance, per channel.
  std::int64_t stats_floats() const override { return 2 * channels_; }
  double forward_flops_per_sample() const override { return 8.0 * static_cast<double>(in_shape().numel()); }
  void forward(const layer_forward_args& a) const override {
    const std::int64_t b = a.in.size(0);
    const_tensor_view x = a.in.reshape({b, channels_, positions_});
    tensor_view y = a.out.reshape({b, channels_, positions_});
    if (!a.training && a.calibrating < 0 && !a.stats.empty())
      return a.exec->batch_norm_inference(y, x, a.params[0], a.params[1], a.stats, batch_norm_eps);
    tensor_view batch_stats = a.kept.flat(0, 2 * channels_);
    a.exec->batch_norm_forward(y, batch_stats, x, a.params[0], a.params[1], batch_norm_eps);
    if (a.calibrating < 0 || a.stats.empty()) return;
    // Calibrating: fold this batch's statistics into the population's (2C floats each).
    tensor pop = tensor::uninitialized({2 * channels_}), st = tensor::uninitialized({2 * channels_});
    a.exec->download(pop, a.stats);
    a.exec->download(st, batch_stats);
    fold_batch_statistics(pop, st, a.calibrating, batch_norm_eps);
    a.exec->upload(a.stats, pop);
  }
  // After a training pass (the only forward a backward follows).
  void backward(const layer_backward_args& a) const override {
    const std::int64_t b = a.in.size(0);
    tensor_view gin = a.grad_in.empty() ? tensor_view() : a.grad_in.reshape({b, channels_, positions_});
    a.exec->batch_norm_backward(gin, a.param_grads[0], a.param_grads[1], a.grad_out.reshape({b, channels_, positions_}),
                                a.in.reshape({b, channels_, positions_}), a.params[0], a.kept.flat(0, 2 * channels_));
  }

 private:
  std::int64_t channels_, positions_;
};

// ---------------------------------------------------------------------------------------
// LayerNorm

class layer_norm_layer final : public layer {
 public:
  explicit layer_norm_layer(const shape& in) : layer(in, in), cols_(in[in.rank() - 1]) {}
  std::string_view kind() const override { return "layernorm"; }
  std::string describe() const override { return "layernorm(" + std::to_string(cols_) + ")"; }
  std::vector<param_decl> params() const override {
    return {{"weight", {cols_}, init_kind::ones, cols_, cols_}, {"bias", {cols_}, init_kind::zeros, cols_, cols_}};
  }
  double forward_flops_per_sample() const override { return 8.0 * static_cast<double>(in_shape().numel()); }
  void forward(const layer_forward_args& a) const override {
    a.exec->layer_norm_forward(a.out, a.in, a.params[0], a.params[1], layer_norm_eps);
  }
  void backward(const layer_backward_args& a) const override {
    a.exec->layer_norm_backward(a.grad_in, a.param_grads[0], a.param_grads[1], a.grad_out, a.in, a.params[0],
                                layer_norm_eps);
  }

 private:
  std::int64_t cols_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// Factories

expected<std::shared_ptr<const layer>> make_linear(const shape& in, std::int64_t out_features, init_kind init) {
  if (in.rank() != 1 && in.rank() != 2)
    return failure{"linear layer needs a flat input or a sequence (T, C), got " + in.str() +
                   "; put a flatten layer before it"};
  if (out_features <= 0) return failure{"linear layer needs a positive width, got " + std::to_string(out_features)};
  return std::shared_ptr<const layer>(std::make_shared<linear_layer>(in, out_features, init));
}

expected<std::shared_ptr<const layer>> make_conv2d(const shape& in, std::int64_t out_channels, std::int64_t kernel,
                                                   std::int64_t stride, std::int64_t pad, init_kind init) {
  if (in.rank() != 3) return failure{"conv2d needs a (C, H, W) input, got " + in.str()};
  conv_geometry g{in[0], in[1], in[2], out_channels, kernel, kernel, stride, pad};
  if (!g.valid())
    return failure{"conv2d with " + std::to_string(out_channels) + " channels, kernel " + std::to_string(kernel) +
                   ", stride " + std::to_string(stride) + ", pad " + std::to_string(pad) + " does not fit input " +
                   in.str()};
  return std::shared_ptr<const layer>(std::make_shared<conv2d_layer>(g, init));
}

expected<std::shared_ptr<const layer>> make_maxpool2d(const shape& in, std::int64_t kernel, std::int64_t stride) {
  if (in.rank() != 3) return failure{"maxpool2d needs a (C, H, W) input, got " + in.str()};
  pool_geometry g{in[0], in[1], in[2], kernel, stride};
  if (!g.valid())
    return failure{"maxpool2d kernel " + std::to_string(kernel) + " does not fit input " + in.str()};
  return std::shared_ptr<const layer>(std::make_shared<maxpool2d_layer>(g));
}

std::shared_ptr<const layer> make_relu(const shape& in) { return std::make_shared<relu_layer>(in); }

std::shared_ptr<const layer> make_flatten(const shape& in) { return std::make_shared<flatten_layer>(in); }

std::shared_ptr<const layer> make_gelu(const shape& in) { return std::make_shared<gelu_layer>(in); }

std::shared_ptr<const layer> make_layer_norm(const shape& in) { return std::make_shared<layer_norm_layer>(in); }

expected<std::shared_ptr<const layer>> make_batch_norm(const shape& in) {
  if (in.rank() != 3 && in.rank() != 1)
    return failure{"batchnorm normalises channels of a (C, H, W) input or flat features, not " + in.str() +
                   "; for a sequence (T, C) use layernorm"};
  return std::shared_ptr<const layer>(std::make_shared<batch_norm_layer>(in));
}

expected<std::shared_ptr<const layer>> make_dropout(const shape& in, float p) {
  if (!(p > 0.f && p < 1.f)) return failure{"dropout needs a rate between 0 and 1, got " + format_rate(p)};
  return std::shared_ptr<const layer>(std::make_shared<dropout_layer>(in, p));
}

std::string format_rate(float p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(p));
  return buf;
}

}  // namespace troupe
