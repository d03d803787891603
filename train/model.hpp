// model: a sequence of layers built from a model_spec, with its parameters laid out as
// named blocks in one flat f32 buffer (the unit shard servers own), forward and backward
// passes over caller-owned buffers, and cutting into consecutive stages (for pipelines).
// A model is immutable and cheap to copy; the parameters live outside it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.hpp"
#include "train/layer.hpp"
#include "train/model_spec.hpp"

namespace troupe {

// Note [Initialisation schemes]
// How a model's weight layers (linear, convolution, attention) start, from --init:
// - he: a weight followed by ReLU or GELU is N(0, 2 / fan_in) (He et al.), the others
//   Xavier uniform, every bias zero. The default: it keeps a deep ReLU network's
//   activations at one scale.
// - pytorch: PyTorch's defaults for nn.Linear and nn.Conv2d, weights and biases uniform
//   in +-1/sqrt(fan_in) (kaiming_uniform_ with a = sqrt(5)), a standard deviation 2.45
//   times smaller than He's. For comparing with a PyTorch model, or a high learning rate
//   whose first steps He's scale makes unstable.
// Embeddings (N(0, 0.02)) and normalisation layers (weight one, bias zero) start the same
// under both.
enum class init_scheme : std::uint8_t { he, pytorch };
expected<init_scheme> parse_init_scheme(std::string_view name);
std::string_view name_of(init_scheme s);

struct param_block {
  std::string name;         // "fc1.weight", "conv2.bias"; unique within the full model
  troupe::shape shape;
  std::int64_t offset = 0;  // into this model's flat parameter buffer
  std::int64_t numel = 0;
  int index = 0;            // position in the full model's block list (stable across stages)
  int layer = 0;            // index of the owning layer within this model
  init_kind init = init_kind::zeros;
  std::int64_t fan_in = 0, fan_out = 0;
};

// Activations kept between forward and backward of one batch (one per microbatch in flight).
struct model_activations {
  std::int64_t capacity = 0;      // rows the buffers hold
  std::vector<tensor> outs;       // per layer (capacity, out_shape...)
  std::vector<tensor> saved;      // per layer, i32 (capacity * saved_per_sample); may be empty
  std::vector<tensor> kept;       // per layer, f32 (capacity * kept_per_sample); may be empty
};

// Scratch for backward, reusable across batches and microbatches.
struct model_scratch {
  std::int64_t capacity = 0;
  std::vector<tensor> grads;      // per layer: dL/d(input of layer i) for i >= 1
  tensor workspace;               // f32 host scratch, max over layers
  tensor scratch;                 // f32 in the compute's memory, max over layers' scratch_floats
};

class model {
 public:
  // Builds the layers for a per-sample input shape (e.g. (1, 28, 28)) and class count.
  static expected<model> build(const model_spec& spec, const shape& sample_in, std::int64_t num_classes);
  // No layers and no parameters: what a key-value job's coordinator holds, whose members
  // bring their own models.
  static model none() { return model(); }

  // Layers [first, last) of this model; blocks keep their names and global indices,
  // offsets are rebased onto the stage's own flat buffer.
  model stage(int first, int last) const;
  // Stages split at the given layer indices (strictly increasing, each in (0, num_layers)).
  expected<std::vector<model>> cut(const std::vector<int>& cut_points) const;

  const std::string& name() const { return name_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const layer& layer_at(int i) const { return *layers_[i]; }
  const std::vector<param_block>& blocks() const { return blocks_; }
  std::int64_t num_params() const { return num_params_; }
  const shape& input_shape() const { return layers_.front()->in_shape(); }
  const shape& output_shape() const { return layers_.back()->out_shape(); }
  // A full model's output is one row of class scores per sample, or per position of a
  // sequence (a language model): `positions` rows of `classes` scores a sample.
  std::int64_t classes() const { return output_shape()[output_shape().rank() - 1]; }
  std::int64_t positions() const { return output_shape().numel() / classes(); }
  double forward_flops_per_sample() const;
  std::string describe() const;  // one line per layer
  // Note [Population statistics]: the floats of statistics its evaluations use (0: none).
  std::int64_t stats_floats() const { return stats_floats_; }

  // Fills params (num_params) deterministically from seed by `scheme` (Note
  // [Initialisation schemes]): each block draws from its own stream keyed by its global
  // index, so a stage initialises exactly as the full model does.
  void init_params(tensor_view params, std::uint64_t seed, init_scheme scheme = init_scheme::he) const;

  // Buffers in `c`'s memory (zero-filled).
  model_activations make_activations(std::int64_t capacity, const compute& c = host_compute()) const;
  model_scratch make_scratch(std::int64_t capacity, const compute& c = host_compute()) const;

  // Runs all layers on input (B, input_shape...), B <= capacity. Returns the output rows.
  // Every buffer and view is in `c`'s memory. `pass`: an evaluation unless it says
  // training (Note [Dropout seeds] in train/layer.hpp).
  const_tensor_view forward(model_activations& acts, model_scratch& scratch, const_tensor_view input,
                            const_tensor_view params, const compute& c = host_compute(),
                            const forward_pass& pass = {}) const;
  // The same for layers [bottom, top) only, so forward can stop at a layer boundary
  // (layer-by-layer pulls): `input` is the model's input (B rows), the layers below
  // `bottom` have run on it into `acts`. Returns the output of layer top - 1.
  const_tensor_view forward_layers(model_activations& acts, model_scratch& scratch, const_tensor_view input,
                                   const_tensor_view params, int bottom, int top,
                                   const compute& c = host_compute(), const forward_pass& pass = {}) const;
  // Backpropagates grad_output (B, output_shape...) through the batch last run forward with
  // `acts`. param_grads (num_params) is accumulated into (+=). grad_input receives
  // dL/d(input) when non-empty; when empty, gradients are only propagated as far back as
  // the first layer with parameters.
  void backward(const model_activations& acts, model_scratch& scratch, const_tensor_view input,
                const_tensor_view grad_output, const_tensor_view params, tensor_view param_grads,
                tensor_view grad_input, const compute& c = host_compute()) const;
  // The same, for layers [bottom, top) only, so backward can stop at a layer boundary
  // (gradient buckets): dy is dL/d(output of layer top - 1) (B rows); returns dL/d(input
  // of layer bottom) to pass to the next call, or an empty view when no layer below
  // needs it (then the calls below are no-ops). With grad_input set, layer 0 writes it.
  const_tensor_view backward_layers(const model_activations& acts, model_scratch& scratch, const_tensor_view input,
                                    const_tensor_view dy, const_tensor_view params, tensor_view param_grads,
                                    tensor_view grad_input, int top, int bottom, const compute& c = host_compute()) const;

 private:
  model() = default;
  std::string name_;
  std::vector<std::shared_ptr<const layer>> layers_;
  std::vector<param_block> blocks_;
  std::vector<std::array<int, max_layer_params>> layer_blocks_;  // per layer: block indices or -1
  std::int64_t num_params_ = 0;
  int first_param_layer_ = 0;
  int first_layer_ = 0;  // this model's layer 0 in the full model (a stage's)
  std::vector<std::int64_t> stats_at_;  // per layer: where its statistics start
  std::int64_t stats_floats_ = 0;
  void lay_out_stats();
};

}  // namespace troupe
