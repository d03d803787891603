// Test helper: one layer's forward and backward on a random batch, its input and
// parameter gradients checked against central finite differences of a random linear
// probe of its output; and the forward passes tests name (training, evaluation with
// statistics, calibration).
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <span>
#include <vector>

#include "tensor/random.hpp"
#include "tests/support/numeric.hpp"
#include "train/layer.hpp"

namespace troupe::test {

// A training pass named by `seed`, an evaluation with statistics, a calibration pass.
inline forward_pass training_pass(std::uint64_t seed) {
  forward_pass p;
  p.training = true;
  p.seed = seed;
  return p;
}
inline forward_pass evaluation_with(tensor_view stats) {
  forward_pass p;
  p.stats = stats;
  return p;
}
inline forward_pass calibration_pass(tensor_view stats, std::int64_t k) {
  forward_pass p;
  p.stats = stats;
  p.calibrating = k;
  return p;
}

// Runs a full forward/backward of one layer on the batch x and checks the parameter
// gradients, and the input gradient when `input_gradient` (not for token ids). `pass`: an
// evaluation, or a training pass whose key the layer's masks come from.
inline void check_layer_on(const layer& l, tensor& x, double eps, std::uint64_t seed, bool input_gradient = true,
                           const forward_pass& pass = {}) {
  const std::int64_t batch = x.size(0);
  std::vector<tensor> params, grads;
  for (const auto& d : l.params()) {
    params.push_back(random_tensor(d.shape, seed + params.size() + 1, 0.5f));
    grads.emplace_back(d.shape);
  }
  tensor y(l.out_shape().prepend(batch));
  tensor probe = random_tensor(y.sizes(), seed + 10);
  tensor saved({std::max<std::int64_t>(1, batch * l.saved_per_sample())}, dtype::i32);
  tensor ws({std::max<std::int64_t>(1, l.workspace_floats(batch))});
  tensor scratch({std::max<std::int64_t>(1, l.scratch_floats(batch))});
  tensor kept({std::max<std::int64_t>(1, batch * l.kept_per_sample())});
  layer_forward_args fa;
  fa.out = y;
  fa.in = x;
  for (std::size_t i = 0; i < params.size(); ++i) fa.params[i] = params[i];
  fa.saved = saved;
  fa.workspace = ws;
  fa.scratch = scratch;
  if (l.kept_per_sample() > 0) fa.kept = kept.view().flat(0, batch * l.kept_per_sample());
  fa.training = pass.training;
  fa.key = pass.seed;
  auto loss = [&] {
    l.forward(fa);
    return dot(y, probe);
  };
  loss();
  tensor dx(x.sizes());
  layer_backward_args ba;
  ba.grad_in = dx;
  ba.grad_out = probe;
  ba.in = x;
  ba.out = y;
  ba.params = fa.params;
  for (std::size_t i = 0; i < grads.size(); ++i) ba.param_grads[i] = grads[i];
  ba.saved = saved;
  ba.workspace = ws;
  ba.scratch = scratch;
  ba.kept = fa.kept;
  l.backward(ba);
  if (input_gradient)
    BOOST_TEST_CONTEXT(l.describe() << " input gradient") { check_gradient(x, dx, loss, eps, 2e-3, 1e-3); }
  for (std::size_t i = 0; i < params.size(); ++i)
    BOOST_TEST_CONTEXT(l.describe() << " parameter " << i) {
      check_gradient(params[i], grads[i], loss, eps, 2e-3, 1e-3);
    }
}

// The same on a random batch of `batch` samples.
inline void check_layer(const layer& l, std::int64_t batch, double eps, std::uint64_t seed, bool distinct_inputs = false) {
  tensor x = random_tensor(l.in_shape().prepend(batch), seed);
  if (distinct_inputs) {  // for max pooling and ReLU: no ties and no values at the kink
    rng r(seed);
    std::vector<float> vals(x.numel());
    for (std::size_t i = 0; i < vals.size(); ++i) vals[i] = (static_cast<float>(i) - vals.size() / 2.f + 0.5f) * 0.05f;
    r.shuffle(std::span<float>(vals));
    std::copy(vals.begin(), vals.end(), x.data<float>());
  }
  check_layer_on(l, x, eps, seed);
}

}  // namespace troupe::test
