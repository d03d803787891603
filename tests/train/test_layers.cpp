// Tests for train/layers.cpp: every layer's backward (GELU, Dropout, BatchNorm and LayerNorm included; input
// and parameter gradients) against central finite differences of a random linear probe
// of its output (tests/support/layer_gradients.hpp), plus the factories' shape validation.
#define BOOST_TEST_MODULE layers
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "tests/support/layer_gradients.hpp"
#include "train/layers.hpp"

using namespace troupe;
using test::check_layer;

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

// In a training pass the mask is fixed by the key, so finite differences see the same
// function backward differentiates; in an evaluation the layer passes its input through.
BOOST_AUTO_TEST_CASE(dropout_gradients_and_evaluation) {
  auto l = make_dropout({4, 3}, 0.3f);
  BOOST_REQUIRE(l.has_value());
  BOOST_TEST((*l)->describe() == "dropout(0.3)");
  BOOST_TEST((*l)->kept_per_sample() == 12);
  tensor x = test::random_tensor({5, 4, 3}, 9);
  test::check_layer_on(**l, x, 1e-2, 9, true, test::training_pass(1234));
  tensor y({5, 4, 3}), kept({5 * 12});
  layer_forward_args fa;
  fa.out = y;
  fa.in = x;
  fa.kept = kept;
  (*l)->forward(fa);  // an evaluation
  BOOST_TEST(test::same_bits(y, x));
  fa.training = true;
  fa.key = 1234;
  (*l)->forward(fa);
  std::int64_t zeros = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) zeros += y.data<float>()[i] == 0.f;
  BOOST_TEST(zeros > 0);
  BOOST_TEST(zeros < y.numel());
}

// Note [Population statistics]: training normalises with the batch's statistics (its
// backward differentiates through them); an evaluation with statistics uses those, one
// without normalises the batch with its own; a calibration pass folds the batch's in.
BOOST_AUTO_TEST_CASE(batch_norm_gradients_evaluation_and_calibration) {
  auto conv = make_batch_norm({3, 4, 5});
  BOOST_REQUIRE(conv.has_value());
  const layer& l = **conv;
  BOOST_TEST(l.describe() == "batchnorm(3)");
  BOOST_TEST(l.stats_floats() == 6);
  BOOST_TEST(l.params()[0].shape == (shape{3}));
  tensor x = test::random_tensor({4, 3, 4, 5}, 21, 2.f);
  test::check_layer_on(l, x, 1e-2, 21, true, test::training_pass(0));
  auto flat = make_batch_norm({8});
  BOOST_REQUIRE(flat.has_value());
  tensor xf = test::random_tensor({6, 8}, 22);
  test::check_layer_on(**flat, xf, 1e-2, 22, true, test::training_pass(0));

  tensor gamma = test::random_tensor({3}, 23), beta = test::random_tensor({3}, 24);
  tensor train({4, 3, 4, 5}), eval({4, 3, 4, 5}), kept({4 * 6}), stats({6});
  layer_forward_args fa;
  fa.in = x;
  fa.params[0] = gamma;
  fa.params[1] = beta;
  fa.kept = kept;
  fa.out = train;
  fa.training = true;
  l.forward(fa);
  fa.out = eval;
  fa.training = false;
  l.forward(fa);  // an evaluation without statistics: the batch's own
  BOOST_TEST(test::same_bits(eval, train));
  fa.stats = stats;
  fa.calibrating = 0;
  l.forward(fa);  // calibration on this one batch: the population is the batch's
  BOOST_TEST(test::same_bits(eval, train));
  const float mean0 = stats.data<float>()[0];
  BOOST_TEST(mean0 == kept.data<float>()[0]);
  fa.calibrating = -1;
  tensor other = test::random_tensor({4, 3, 4, 5}, 25, 5.f);
  fa.in = other;
  l.forward(fa);  // an evaluation with statistics: the calibrated ones, not the batch's
  BOOST_TEST(stats.data<float>()[0] == mean0);
  const float want = (other.data<float>()[0] - mean0) / std::sqrt(stats.data<float>()[3] + 1e-5f) *
                         gamma.data<float>()[0] + beta.data<float>()[0];
  BOOST_TEST(eval.data<float>()[0] == want, boost::test_tools::tolerance(1e-4f));
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
  auto seq = make_batch_norm({8, 4});
  BOOST_REQUIRE(!seq.has_value());
  BOOST_TEST(seq.error().message.find("use layernorm") != std::string::npos);
  for (float p : {0.f, 1.f, -0.5f, std::nanf("")}) {
    auto d = make_dropout({10}, p);
    BOOST_REQUIRE(!d.has_value());
    BOOST_TEST(d.error().message.find("between 0 and 1") != std::string::npos);
  }
}
