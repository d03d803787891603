// Tests for train/residual_layer.cpp: x + f(x) with every parameter of f and the input
// checked against finite differences, and blocks that cannot be built refused with why.
#define BOOST_TEST_MODULE residual_layer
#include <boost/test/unit_test.hpp>

#include "tests/support/layer_gradients.hpp"
#include "train/layers.hpp"
#include "train/residual_layer.hpp"

using namespace troupe;
using test::check_layer;

// Note [Residual blocks]: x + f(x), every parameter of f and the input checked, with f
// the MLP half of a pre-norm transformer block, and with convolutions (their host
// workspace passed through).
BOOST_AUTO_TEST_CASE(residual_gradients) {
  auto fc1 = make_linear({6}, 8, init_kind::he_normal), fc2 = make_linear({8}, 6, init_kind::xavier_uniform);
  BOOST_REQUIRE((fc1.has_value() && fc2.has_value()));
  auto block = make_residual({6}, {make_layer_norm({6}), *fc1, make_gelu({8}), *fc2});
  BOOST_REQUIRE_MESSAGE(block.has_value(), (block ? "" : block.error().message));
  const auto decls = (*block)->params();
  BOOST_REQUIRE(decls.size() == 6u);
  BOOST_TEST(decls[0].suffix == "0.weight");
  BOOST_TEST(decls[5].suffix == "3.bias");
  BOOST_TEST((*block)->out_shape() == (shape{6}));
  check_layer(**block, 3, 1e-2, 9);
  auto c1 = make_conv2d({2, 5, 5}, 3, 3, 1, 1, init_kind::he_normal), c2 = make_conv2d({3, 5, 5}, 2, 3, 1, 1,
                                                                                        init_kind::xavier_uniform);
  BOOST_REQUIRE((c1.has_value() && c2.has_value()));
  auto convs = make_residual({2, 5, 5}, {*c1, make_gelu({3, 5, 5}), *c2});
  BOOST_REQUIRE(convs.has_value());
  check_layer(**convs, 2, 1e-2, 10);
}

BOOST_AUTO_TEST_CASE(a_residual_block_that_cannot_be_built_says_why) {
  auto fc = make_linear({6}, 4, init_kind::he_normal);
  BOOST_REQUIRE(fc.has_value());
  auto shape_changes = make_residual({6}, {*fc});
  BOOST_REQUIRE(!shape_changes.has_value());
  BOOST_TEST(shape_changes.error().message.find("must end in its input's shape (6), not (4)") != std::string::npos,
             shape_changes.error().message);
  BOOST_TEST(make_residual({6}, {}).error().message.find("at least one layer") != std::string::npos);
  auto pool = make_maxpool2d({1, 4, 4}, 1, 1);
  BOOST_REQUIRE(pool.has_value());
  BOOST_TEST(make_residual({1, 4, 4}, {*pool}).error().message.find("keeps state for backward") != std::string::npos);
  std::vector<std::shared_ptr<const layer>> five;
  for (int i = 0; i < 5; ++i) five.push_back(*make_linear({6}, 6, init_kind::he_normal));
  BOOST_TEST(make_residual({6}, five).error().message.find("at most 8 parameter tensors") != std::string::npos);
}

