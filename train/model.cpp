// model: building layers from a spec, the flat parameter layout, forward/backward, stages.
#include "train/model.hpp"

#include <algorithm>
#include <cmath>

#include "base/enum_names.hpp"
#include "tensor/random.hpp"
#include "train/layers.hpp"
#include "train/residual_layer.hpp"
#include "train/transformer_layers.hpp"

namespace troupe {

namespace {

init_kind weight_init(const std::vector<layer_spec>& layers, std::size_t i);

// classes: the dataset's class count (a text's vocabulary), for `linear classes` and embeddings.
expected<std::shared_ptr<const layer>> make_layer(const layer_spec& s, const shape& in, init_kind init,
                                                 std::int64_t classes) {
  switch (s.op) {
    case layer_op::residual: {
      std::vector<std::shared_ptr<const layer>> inner;
      shape cur = in;
      for (std::size_t i = 0; i < s.inner.size(); ++i) {
        if (s.inner[i].op == layer_op::residual) return failure{"a residual block cannot hold another"};
        auto l = make_layer(s.inner[i], cur, weight_init(s.inner, i), classes);
        if (!l) return failure{"in its residual block, layer " + std::to_string(i) + ": " + l.error().message};
        cur = (*l)->out_shape();
        inner.push_back(std::move(*l));
      }
      return make_residual(in, std::move(inner));
    }
    case layer_op::linear: return make_linear(in, s.size == 0 ? classes : s.size, init);
    case layer_op::conv2d: return make_conv2d(in, s.size, s.kernel, s.stride, s.pad, init);
    case layer_op::maxpool2d: return make_maxpool2d(in, s.kernel, s.stride);
    case layer_op::relu: return make_relu(in);
    case layer_op::flatten: return make_flatten(in);
    case layer_op::gelu: return make_gelu(in);
    case layer_op::layer_norm: return make_layer_norm(in);
    case layer_op::embedding: return make_embedding(in, classes, s.size);
    case layer_op::attention: return make_attention(in, s.size);
    case layer_op::dropout: return make_dropout(in, s.rate);
    case layer_op::batch_norm: return make_batch_norm(in);
  }
  return failure{"unknown layer op"};
}

// He initialisation suits a weight layer whose output goes through ReLU (or GELU, which
// is close to it), after batchnorm or dropout if those come first; the logits layer gets Xavier. Within a residual block, the same over
// its own layers.
init_kind weight_init(const std::vector<layer_spec>& layers, std::size_t i) {
  std::size_t next = i + 1;  // what follows, looking past normalisation and dropout
  while (next < layers.size() && (layers[next].op == layer_op::batch_norm || layers[next].op == layer_op::dropout))
    ++next;
  const bool rectified =
      next < layers.size() && (layers[next].op == layer_op::relu || layers[next].op == layer_op::gelu);
  return rectified ? init_kind::he_normal : init_kind::xavier_uniform;
}

}  // namespace

expected<model> model::build(const model_spec& spec, const shape& sample_in, std::int64_t num_classes) {
  if (spec.layers.empty()) return failure{"model '" + spec.name + "' has no layers"};
  if (spec.input_features && *spec.input_features != sample_in.numel())
    return failure{"model '" + spec.name + "' expects " + std::to_string(*spec.input_features) +
                   " input features but the dataset has " + std::to_string(sample_in.numel()) + " per sample " +
                   sample_in.str()};
  model m;
  m.name_ = spec.name;
  shape cur = sample_in;
  int linear_count = 0, conv_count = 0, norm_count = 0, batch_norm_count = 0, residual_count = 0, attention_count = 0;
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    auto l = make_layer(spec.layers[i], cur, weight_init(spec.layers, i), num_classes);
    if (!l) return failure{"model '" + spec.name + "', layer " + std::to_string(i) + ": " + l.error().message};
    const layer& ly = **l;
    std::array<int, max_layer_params> ids;
    ids.fill(-1);
    const auto decls = ly.params();
    std::string prefix;
    if (ly.kind() == "linear") prefix = "fc" + std::to_string(++linear_count);
    if (ly.kind() == "conv2d") prefix = "conv" + std::to_string(++conv_count);
    if (ly.kind() == "layernorm") prefix = "ln" + std::to_string(++norm_count);
    if (ly.kind() == "batchnorm") prefix = "bn" + std::to_string(++batch_norm_count);
    if (ly.kind() == "embedding") prefix = "embed";
    if (ly.kind() == "attention") prefix = "attn" + std::to_string(++attention_count);
    if (ly.kind() == "residual") prefix = "res" + std::to_string(++residual_count);  // "res1.0.weight"
    for (std::size_t p = 0; p < decls.size(); ++p) {
      param_block b;
      b.name = prefix + "." + decls[p].suffix;
      b.shape = decls[p].shape;
      b.numel = decls[p].shape.numel();
      b.offset = m.num_params_;
      b.index = static_cast<int>(m.blocks_.size());
      b.layer = static_cast<int>(i);
      b.init = decls[p].init;
      b.fan_in = decls[p].fan_in;
      b.fan_out = decls[p].fan_out;
      m.num_params_ += b.numel;
      ids[p] = b.index;
      m.blocks_.push_back(std::move(b));
    }
    m.layer_blocks_.push_back(ids);
    cur = ly.out_shape();
    m.layers_.push_back(std::move(*l));
  }
  // One row of class scores per sample, or per position of a sequence.
  if (cur[cur.rank() - 1] != num_classes || cur.rank() > 2)
    return failure{"model '" + spec.name + "' ends in " + cur.str() + " outputs but the dataset has " +
                   std::to_string(num_classes) + " classes; end it in a linear layer of that width (linear classes)"};
  auto first = std::find_if(m.layer_blocks_.begin(), m.layer_blocks_.end(), [](auto& ids) { return ids[0] >= 0; });
  m.first_param_layer_ = static_cast<int>(first - m.layer_blocks_.begin());
  m.lay_out_stats();
  return m;
}

model model::stage(int first, int last) const {
  TROUPE_CHECK(0 <= first && first < last && last <= num_layers(), "stage range out of bounds");
  model s;
  s.name_ = name_ + "[" + std::to_string(first) + ":" + std::to_string(last) + "]";
  s.layers_.assign(layers_.begin() + first, layers_.begin() + last);
  s.first_layer_ = first_layer_ + first;
  s.lay_out_stats();
  for (int i = first; i < last; ++i) {
    std::array<int, max_layer_params> ids;
    ids.fill(-1);
    for (int p = 0; p < max_layer_params; ++p) {
      if (layer_blocks_[i][p] < 0) continue;
      param_block b = blocks_[layer_blocks_[i][p]];
      b.offset = s.num_params_;
      b.layer = i - first;
      s.num_params_ += b.numel;
      ids[p] = static_cast<int>(s.blocks_.size());
      s.blocks_.push_back(std::move(b));
    }
    s.layer_blocks_.push_back(ids);
  }
  auto f = std::find_if(s.layer_blocks_.begin(), s.layer_blocks_.end(), [](auto& ids) { return ids[0] >= 0; });
  s.first_param_layer_ = static_cast<int>(f - s.layer_blocks_.begin());
  return s;
}

expected<std::vector<model>> model::cut(const std::vector<int>& cut_points) const {
  int prev = 0;
  for (int c : cut_points) {
    if (c <= prev || c >= num_layers())
      return failure{"cut points must be strictly increasing layer indices between 1 and " +
                     std::to_string(num_layers() - 1) + " for model '" + name_ + "'"};
    prev = c;
  }
  std::vector<model> stages;
  prev = 0;
  for (int c : cut_points) {
    stages.push_back(stage(prev, c));
    prev = c;
  }
  stages.push_back(stage(prev, num_layers()));
  return stages;
}

double model::forward_flops_per_sample() const {
  double f = 0.0;
  for (const auto& l : layers_) f += l->forward_flops_per_sample();
  return f;
}

std::string model::describe() const {
  std::string out;
  for (int i = 0; i < num_layers(); ++i)
    out += "  " + std::to_string(i) + ": " + layers_[i]->describe() + " -> " + layers_[i]->out_shape().str() + "\n";
  out += "  parameters: " + std::to_string(num_params_) + " in " + std::to_string(blocks_.size()) + " blocks\n";
  return out;
}

// init_scheme's names, for its parse and name_of.
constexpr std::array<enum_name<init_scheme>, 2> init_schemes{{
    {init_scheme::he, "he"},
    {init_scheme::pytorch, "pytorch"},
}};

expected<init_scheme> parse_init_scheme(std::string_view name) {
  return parse_in(init_schemes, name, "initialisation");
}

std::string_view name_of(init_scheme x) { return name_in(init_schemes, x); }

void model::init_params(tensor_view params, std::uint64_t seed, init_scheme scheme) const {
  TROUPE_CHECK(params.numel() == num_params_ && params.type() == dtype::f32, "init_params: buffer size");
  float* base = params.data<float>();
  for (const auto& b : blocks_) {
    rng r(derive_seed(seed, {static_cast<std::uint64_t>(b.index)}));
    float* p = base + b.offset;
    const auto uniform = [&](float a) {
      for (std::int64_t i = 0; i < b.numel; ++i) p[i] = r.uniform(-a, a);
    };
    const bool weight_layer = b.init == init_kind::he_normal || b.init == init_kind::xavier_uniform ||
                              b.init == init_kind::bias;
    if (scheme == init_scheme::pytorch && weight_layer) {
      uniform(1.0f / std::sqrt(static_cast<float>(b.fan_in)));
      continue;
    }
    switch (b.init) {
      case init_kind::zeros:
      case init_kind::bias: std::fill(p, p + b.numel, 0.f); break;
      case init_kind::ones: std::fill(p, p + b.numel, 1.f); break;
      case init_kind::he_normal: {
        const float std = std::sqrt(2.0f / static_cast<float>(b.fan_in));
        for (std::int64_t i = 0; i < b.numel; ++i) p[i] = std * r.normal();
        break;
      }
      case init_kind::embedding_normal:
        for (std::int64_t i = 0; i < b.numel; ++i) p[i] = 0.02f * r.normal();
        break;
      case init_kind::xavier_uniform: uniform(std::sqrt(6.0f / static_cast<float>(b.fan_in + b.fan_out))); break;
    }
  }
}

void model::lay_out_stats() {
  stats_at_.clear();
  stats_floats_ = 0;
  for (const auto& l : layers_) {
    stats_at_.push_back(stats_floats_);
    stats_floats_ += l->stats_floats();
  }
}

model_activations model::make_activations(std::int64_t capacity, const compute& c) const {
  model_activations a;
  a.capacity = capacity;
  for (const auto& l : layers_) {
    a.outs.push_back(c.make(l->out_shape().prepend(capacity)));
    const std::int64_t saved = l->saved_per_sample();
    a.saved.push_back(saved ? c.make({capacity * saved}, dtype::i32) : tensor());
    const std::int64_t kept = l->kept_per_sample();
    a.kept.push_back(kept ? c.make({capacity * kept}) : tensor());
  }
  return a;
}

model_scratch model::make_scratch(std::int64_t capacity, const compute& c) const {
  model_scratch s;
  s.capacity = capacity;
  std::int64_t ws = 0, sc = 0;
  for (int i = 0; i < num_layers(); ++i) {
    s.grads.push_back(i == 0 ? tensor() : c.make(layers_[i]->in_shape().prepend(capacity)));
    ws = std::max(ws, layers_[i]->workspace_floats(capacity));
    sc = std::max(sc, layers_[i]->scratch_floats(capacity));
  }
  if (sc > 0) s.scratch = c.make({sc});
  // The workspace is host scratch for im2col; a backend brings its own.
  s.workspace = c.host_memory() ? tensor({std::max<std::int64_t>(ws, 1)}) : tensor({1});
  return s;
}

namespace {

std::array<const_tensor_view, max_layer_params> block_views(const std::vector<param_block>& blocks,
                                                            const std::array<int, max_layer_params>& ids,
                                                            const_tensor_view flat) {
  std::array<const_tensor_view, max_layer_params> v;
  for (int p = 0; p < max_layer_params; ++p)
    if (ids[p] >= 0) v[p] = flat.flat(blocks[ids[p]].offset, blocks[ids[p]].numel).reshape(blocks[ids[p]].shape);
  return v;
}

}  // namespace

const_tensor_view model::forward(model_activations& acts, model_scratch& scratch, const_tensor_view input,
                                 const_tensor_view params, const compute& c, const forward_pass& pass) const {
  const std::int64_t b = input.size(0);
  TROUPE_CHECK(b <= acts.capacity && b <= scratch.capacity, "batch larger than buffer capacity");
  TROUPE_CHECK(input.numel() == b * input_shape().numel(), "input " + input.sizes().str() + " vs model input " +
                                                               input_shape().str());
  TROUPE_CHECK(params.numel() == num_params_, "params size");
  TROUPE_CHECK(pass.stats.empty() || pass.stats.numel() == stats_floats_, "statistics size");
  return forward_layers(acts, scratch, input, params, 0, num_layers(), c, pass);
}

const_tensor_view model::forward_layers(model_activations& acts, model_scratch& scratch, const_tensor_view input,
                                        const_tensor_view params, int bottom, int top, const compute& c,
                                        const forward_pass& pass) const {
  TROUPE_CHECK(0 <= bottom && bottom <= top && top <= num_layers(), "forward_layers: layers out of range");
  const std::int64_t b = input.size(0);
  const_tensor_view x =
      bottom == 0 ? input.reshape(input_shape().prepend(b)) : const_tensor_view(acts.outs[bottom - 1].view().slice(0, b));
  for (int i = bottom; i < top; ++i) {
    layer_forward_args a;
    a.exec = &c;
    a.out = acts.outs[i].view().slice(0, b);
    a.in = x;
    a.params = block_views(blocks_, layer_blocks_[i], params);
    if (!acts.saved[i].empty()) a.saved = acts.saved[i].view().flat(0, b * layers_[i]->saved_per_sample());
    if (!acts.kept[i].empty()) a.kept = acts.kept[i].view().flat(0, b * layers_[i]->kept_per_sample());
    a.workspace = scratch.workspace;
    if (!scratch.scratch.empty()) a.scratch = scratch.scratch.view();
    a.training = pass.training;
    if (pass.training) a.key = derive_seed(pass.seed, {static_cast<std::uint64_t>(first_layer_ + i)});
    if (!pass.stats.empty() && layers_[i]->stats_floats() > 0) {
      a.stats = pass.stats.flat(stats_at_[i], layers_[i]->stats_floats());
      a.calibrating = pass.calibrating;
    }
    layers_[i]->forward(a);
    x = a.out;
  }
  return x;
}

void model::backward(const model_activations& acts, model_scratch& scratch, const_tensor_view input,
                     const_tensor_view grad_output, const_tensor_view params, tensor_view param_grads,
                     tensor_view grad_input, const compute& c) const {
  const std::int64_t b = input.size(0);
  TROUPE_CHECK(b <= acts.capacity && b <= scratch.capacity, "batch larger than buffer capacity");
  TROUPE_CHECK(grad_output.numel() == b * output_shape().numel(), "grad_output size");
  TROUPE_CHECK(param_grads.numel() == num_params_, "param_grads size");
  backward_layers(acts, scratch, input, grad_output.reshape(output_shape().prepend(b)), params, param_grads,
                  grad_input, num_layers(), 0, c);
}

const_tensor_view model::backward_layers(const model_activations& acts, model_scratch& scratch,
                                         const_tensor_view input, const_tensor_view dy, const_tensor_view params,
                                         tensor_view param_grads, tensor_view grad_input, int top, int bottom,
                                         const compute& c) const {
  TROUPE_CHECK(0 <= bottom && bottom <= top && top <= num_layers(), "backward_layers: layers out of range");
  const std::int64_t b = input.size(0);
  const bool want_input_grad = !grad_input.empty();
  for (int i = top - 1; i >= bottom && !dy.empty(); --i) {
    // Layer i computes dL/d(its input) only if something before it consumes that.
    const bool need_grad_in = i == 0 ? want_input_grad : (want_input_grad || i > first_param_layer_);
    layer_backward_args a;
    a.exec = &c;
    if (need_grad_in)
      a.grad_in = i == 0 ? grad_input.reshape(input_shape().prepend(b)) : scratch.grads[i].view().slice(0, b);
    a.grad_out = dy;
    a.in = i == 0 ? input.reshape(input_shape().prepend(b)) : acts.outs[i - 1].view().slice(0, b);
    a.out = acts.outs[i].view().slice(0, b);
    a.params = block_views(blocks_, layer_blocks_[i], params);
    for (int p = 0; p < max_layer_params; ++p) {
      const int id = layer_blocks_[i][p];
      if (id >= 0) a.param_grads[p] = param_grads.flat(blocks_[id].offset, blocks_[id].numel).reshape(blocks_[id].shape);
    }
    if (!acts.saved[i].empty()) a.saved = acts.saved[i].view().flat(0, b * layers_[i]->saved_per_sample());
    if (!acts.kept[i].empty()) a.kept = acts.kept[i].view().flat(0, b * layers_[i]->kept_per_sample());
    a.workspace = scratch.workspace;
    if (!scratch.scratch.empty()) a.scratch = scratch.scratch.view();
    layers_[i]->backward(a);
    dy = need_grad_in ? const_tensor_view(a.grad_in) : const_tensor_view();
  }
  return dy;
}

}  // namespace troupe
