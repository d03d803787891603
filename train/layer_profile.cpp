// Timing each layer of a model, forward and backward, on a compute.
#include "train/layer_profile.hpp"

#include <algorithm>
#include <chrono>

#include "tensor/random.hpp"

namespace troupe {

namespace {

using steady = std::chrono::steady_clock;

// A tensor of normal draws in c's memory.
// Normal values, or, with ids > 0, whole numbers below it (token ids for an embedding).
tensor random_tensor(shape s, rng& r, const compute& c, std::int64_t ids = 0) {
  tensor host(s);
  float* p = host.data<float>();
  for (std::int64_t i = 0; i < host.numel(); ++i)
    p[i] = ids > 0 ? static_cast<float>(r.below(static_cast<std::uint64_t>(ids))) : r.normal();
  if (c.host_memory()) return host;
  tensor out = c.make(s);
  c.upload(out.view(), host.view());
  return out;
}

template <class F>
double timed(const compute& c, F&& body) {
  c.synchronize();
  const auto begin = steady::now();
  body();
  c.synchronize();
  return std::chrono::duration<double>(steady::now() - begin).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

expected<std::vector<layer_timing>> profile_layers(const model& m, const profile_options& o, const compute& c) {
  if (o.rows < 1) return failure{"a layer profile needs at least one row, got " + std::to_string(o.rows)};
  if (o.passes < 1) return failure{"a layer profile needs at least one timed pass, got " + std::to_string(o.passes)};
  const int n = m.num_layers();
  rng r(derive_seed(o.seed, {0x70726f66ULL}));
  tensor host_params({m.num_params()});
  m.init_params(host_params.view(), o.seed);
  tensor device_params;
  if (!c.host_memory()) {
    device_params = c.make({m.num_params()});
    c.upload(device_params.view(), host_params.view());
  }
  const_tensor_view params = c.host_memory() ? host_params.view() : device_params.view();
  tensor grads = c.make({m.num_params()});
  // A model that starts with an embedding reads token ids: random ones below its vocabulary.
  const layer& first = m.layer_at(0);
  const std::int64_t ids = first.kind() == "embedding" ? first.params().front().shape[0] : 0;
  tensor input = random_tensor(m.input_shape().prepend(o.rows), r, c, ids);
  tensor dy_top = random_tensor(m.output_shape().prepend(o.rows), r, c);
  model_activations acts = m.make_activations(o.rows, c);
  model_scratch scratch = m.make_scratch(o.rows, c);

  std::vector<std::vector<double>> fwd(n), bwd(n);
  forward_pass training;  // as the stages run it (Dropout draws its mask)
  training.training = true;
  training.seed = 1;
  for (int pass = 0; pass <= o.passes; ++pass) {
    const bool kept = pass > 0;  // the first pass warms caches and allocators
    for (int i = 0; i < n; ++i) {
      const double s = timed(c, [&] { m.forward_layers(acts, scratch, input, params, i, i + 1, c, training); });
      if (kept) fwd[i].push_back(s);
    }
    const_tensor_view dy = dy_top.view();
    for (int i = n - 1; i >= 0; --i) {
      const double s = timed(c, [&] {
        dy = m.backward_layers(acts, scratch, input, dy, params, grads.view(), tensor_view(), i + 1, i, c);
      });
      if (kept) bwd[i].push_back(s);
      if (dy.empty()) break;  // nothing below needs a gradient: a stage there would not compute one
    }
  }
  std::vector<layer_timing> out(n);
  for (int i = 0; i < n; ++i) {
    out[i].forward_s = median(fwd[i]);
    out[i].backward_s = bwd[i].empty() ? 0.0 : median(bwd[i]);
  }
  return out;
}

}  // namespace troupe
