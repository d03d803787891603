// The layer interface. A layer is immutable once built (it knows its per-sample input
// and output shapes) and holds no activations itself: forward and backward get every
// buffer they touch from the caller, so one layer object serves any number of workers,
// microbatches and pipeline stages at once. What forward leaves for backward goes in the
// caller's `saved` (i32) and `kept` (f32) buffers of the microbatch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/compute.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

// embedding_normal is N(0, 0.02), GPT-2's initialisation of its embedding tables. bias is
// a weight layer's bias (linear, convolution, attention): zeros, or drawn as its weight is
// under init_scheme::pytorch (train/model.hpp); a normalisation's bias is zeros.
enum class init_kind : std::uint8_t { zeros, he_normal, xavier_uniform, ones, embedding_normal, bias };

// One parameter tensor a layer needs; the model turns it into a named block.
struct param_decl {
  std::string suffix;  // "weight", "bias"
  troupe::shape shape;
  init_kind init = init_kind::zeros;
  std::int64_t fan_in = 0, fan_out = 0;
};

inline constexpr int max_layer_params = 8;  // a residual block's inner layers' together

// Note [Dropout seeds]
// A forward pass is a training pass or an evaluation. In training, Dropout draws its mask
// from the pass's seed (Note [Dropout masks] in tensor/elementwise.hpp); in evaluation it
// passes everything through. The caller names a pass by a seed: a member of a job takes
// derive_seed(the job's seed, {clock, replica, microbatch}), train-local takes
// derive_seed(seed, {step}). The model gives layer i the key derive_seed(pass seed, {i's
// index in the full model}), and a residual block gives its inner layer k
// derive_seed(its key, {k}). So a run is reproducible from its seed, two replicas or two
// microbatches draw different masks, and a pipeline stage draws exactly the masks the
// unsplit model draws for its layers.
//
// Note [Population statistics]
// BatchNorm normalises with its batch's statistics in training. An evaluation uses the
// population's, which are estimated when the model is evaluated, not while it trains
// (PreciseBN: Wu and Johnson, "Rethinking 'Batch' in BatchNorm", 2021): a calibration
// pass runs the model on a fixed set of training batches (estimate_statistics in
// train/evaluate.hpp), each normalised with its own statistics, which each BatchNorm
// folds into its share of the model's statistics buffer; an evaluation then normalises
// with those. So the statistics are no state that shards, checkpoints or model files
// hold: they follow from the parameters and the training data, the same in every mode
// (sync, async, pipelines, allreduce), and they are exactly the evaluated parameters'
// (an exponential running average lags behind them). An evaluation without statistics
// normalises each batch with its own (PyTorch's track_running_stats=False).
struct forward_pass {
  bool training = false;
  std::uint64_t seed = 0;
  tensor_view stats;             // the model's statistics (model::stats_floats()); empty: none
  std::int64_t calibrating = -1;  // >= 0: a calibration pass, on its k-th batch
};

struct layer_forward_args {
  const compute* exec = &host_compute();                  // where the math runs; buffers live there
  tensor_view out;                                        // (B, out_shape...)
  const_tensor_view in;                                   // (B, in_shape...)
  std::array<const_tensor_view, max_layer_params> params; // in params() order
  tensor_view saved;                                      // i32 (B * saved_per_sample), kept for backward
  tensor_view kept;                                       // f32 (B * kept_per_sample) in the compute's memory, for backward
  tensor_view workspace;                                  // f32 host scratch (im2col), not kept
  tensor_view scratch;                                    // f32 in the compute's memory (scratch_floats), not kept
  bool training = false;                                  // Note [Dropout seeds]
  std::uint64_t key = 0;                                  // this layer's, in a training pass
  // Note [Population statistics]: this layer's share of the model's statistics (in the
  // compute's memory), read by an evaluation, or folded into by a calibration pass
  // (calibrating = k >= 0, its k-th batch); empty: none.
  tensor_view stats;
  std::int64_t calibrating = -1;
};

struct layer_backward_args {
  const compute* exec = &host_compute();
  tensor_view grad_in;                                    // (B, in_shape...) overwritten; empty = not needed
  const_tensor_view grad_out, in, out;
  std::array<const_tensor_view, max_layer_params> params;
  std::array<tensor_view, max_layer_params> param_grads;  // accumulated into (+=)
  const_tensor_view saved;
  const_tensor_view kept;                                 // what forward wrote there for this batch
  tensor_view workspace;
  tensor_view scratch;
};

class layer {
 public:
  layer(troupe::shape in, troupe::shape out) : in_(in), out_(out) {}
  virtual ~layer() = default;

  virtual std::string_view kind() const = 0;   // "linear", "conv2d", ...
  virtual std::string describe() const = 0;    // "linear(784 -> 256)"
  virtual std::vector<param_decl> params() const { return {}; }
  virtual std::int64_t saved_per_sample() const { return 0; }            // i32 elements
  virtual std::int64_t kept_per_sample() const { return 0; }             // f32 elements
  // Note [Population statistics]: f32 elements of statistics an evaluation uses.
  virtual std::int64_t stats_floats() const { return 0; }
  // Host scratch (the CPU's im2col; a backend brings its own), and scratch in the
  // compute's memory (device memory on a GPU), for a batch of `batch` rows.
  virtual std::int64_t workspace_floats(std::int64_t /*batch*/) const { return 0; }
  virtual std::int64_t scratch_floats(std::int64_t /*batch*/) const { return 0; }
  virtual double forward_flops_per_sample() const { return 0.0; }

  virtual void forward(const layer_forward_args& a) const = 0;
  virtual void backward(const layer_backward_args& a) const = 0;

  const troupe::shape& in_shape() const { return in_; }    // per sample
  const troupe::shape& out_shape() const { return out_; }  // per sample

 private:
  troupe::shape in_, out_;
};

}  // namespace troupe
