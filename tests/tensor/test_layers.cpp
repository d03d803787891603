// Tests for tensor/layers.cpp: every layer's backward (GELU and LayerNorm included) (input and parameter gradients)
// against central finite differences of a random linear probe of its output, plus the
// factories' shape validation.
#define BOOST_TEST_MODULE layers
#include <boost/test/unit_test.hpp>

#include "tensor/layers.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;

namespace {

// Runs a full forward/backward of one layer on a batch and checks all gradients.
void check_layer(const layer& l, std::int64_t batch, double eps, std::uint64_t seed, bool distinct_inputs = false) {
  tensor x = test::random_tensor(l.in_shape().prepend(batch), seed);
  if (distinct_inputs) {  // for max pooling and ReLU: no ties and no values at the kink
    rng r(seed);
    std::vector<float> vals(x.numel());
    for (std::size_t i = 0; i < vals.size(); ++i) vals[i] = (static_cast<float>(i) - vals.size() / 2.f + 0.5f) * 0.05f;
    r.shuffle(std::span<float>(vals));
    std::copy(vals.begin(), vals.end(), x.data<float>());
  }
  std::vector<tensor> params, grads;
  for (const auto& d : l.params()) {
    params.push_back(test::random_tensor(d.shape, seed + params.size() + 1, 0.5f));
    grads.emplace_back(d.shape);
  }
  tensor y(l.out_shape().prepend(batch));
  tensor probe = test::random_tensor(y.sizes(), seed + 10);
  tensor saved({std::max<std::int64_t>(1, batch * l.saved_per_sample())}, dtype::i32);
  tensor ws({std::max<std::int64_t>(1, l.workspace_floats(batch))});
  layer_forward_args fa;
  fa.out = y;
  fa.in = x;
  for (std::size_t i = 0; i < params.size(); ++i) fa.params[i] = params[i];
  fa.saved = saved;
  fa.workspace = ws;
  auto loss = [&] {
    l.forward(fa);
    return test::dot(y, probe);
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
  l.backward(ba);
  BOOST_TEST_CONTEXT(l.describe() << " input gradient") { test::check_gradient(x, dx, loss, eps, 2e-3, 1e-3); }
  for (std::size_t i = 0; i < params.size(); ++i)
    BOOST_TEST_CONTEXT(l.describe() << " parameter " << i) {
      test::check_gradient(params[i], grads[i], loss, eps, 2e-3, 1e-3);
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(linear_gradients) {
  auto l = make_linear({13}, 7, init_kind::he_normal);
  BOOST_REQUIRE(l.has_value());
  BOOST_TEST((*l)->params().size() == 2u);
  check_layer(**l, 5, 1e-2, 1);
}

BOOST_AUTO_TEST_CASE(conv2d_gradients) {
  auto l = make_conv2d({2, 6, 5}, 3, 3, 1, 1, init_kind::he_normal);
  BOOST_REQUIRE(l.has_value());
  BOOST_TEST((*l)->out_shape() == (shape{3, 6, 5}));
  check_layer(**l, 2, 1e-2, 2);
}

BOOST_AUTO_TEST_CASE(maxpool2d_gradients) {
  auto l = make_maxpool2d({2, 6, 6}, 2, 2);
  BOOST_REQUIRE(l.has_value());
  BOOST_TEST((*l)->out_shape() == (shape{2, 3, 3}));
  check_layer(**l, 3, 1e-3, 3, true);
}

BOOST_AUTO_TEST_CASE(relu_gradients) { check_layer(*make_relu({4, 3}), 3, 1e-3, 4, true); }

BOOST_AUTO_TEST_CASE(gelu_gradients) {
  auto l = make_gelu({4, 3});
  BOOST_TEST(l->out_shape() == (shape{4, 3}));
  BOOST_TEST(l->params().empty());
  check_layer(*l, 3, 1e-3, 6);
}

// Normalised over the last dimension, whatever the rank; weight 1 and bias 0 at start.
BOOST_AUTO_TEST_CASE(layer_norm_gradients) {
  auto flat = make_layer_norm({16});
  const auto decls = flat->params();
  BOOST_REQUIRE(decls.size() == 2u);
  BOOST_TEST(decls[0].shape == (shape{16}));
  BOOST_TEST((decls[0].init == init_kind::ones));
  BOOST_TEST((decls[1].init == init_kind::zeros));
  check_layer(*flat, 3, 1e-2, 7);
  auto rows = make_layer_norm({4, 8});
  BOOST_TEST(rows->params()[0].shape == (shape{8}));
  check_layer(*rows, 2, 1e-2, 8);
}

BOOST_AUTO_TEST_CASE(flatten_gradients) {
  auto l = make_flatten({2, 3, 4});
  BOOST_TEST(l->out_shape() == (shape{24}));
  check_layer(*l, 2, 1e-2, 5);
}

BOOST_AUTO_TEST_CASE(factories_reject_shapes_that_do_not_fit) {
  auto lin = make_linear({1, 28, 28}, 10, init_kind::he_normal);
  BOOST_REQUIRE(!lin.has_value());
  BOOST_TEST(lin.error().message.find("flatten") != std::string::npos);
  BOOST_TEST(!make_conv2d({1, 2, 2}, 4, 5, 1, 0, init_kind::he_normal).has_value());
  BOOST_TEST(!make_conv2d({784}, 4, 3, 1, 0, init_kind::he_normal).has_value());
  BOOST_TEST(!make_maxpool2d({1, 1, 1}, 2, 2).has_value());
  BOOST_TEST(!make_linear({10}, 0, init_kind::he_normal).has_value());
}
