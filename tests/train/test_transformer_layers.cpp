// Tests for train/transformer_layers.cpp: the embedding's and the attention's gradients
// against finite differences (the attention's through its input and output projections
// too), and inputs of the wrong shape refused with what to do.
#define BOOST_TEST_MODULE transformer_layers
#include <boost/test/unit_test.hpp>

#include "tests/support/layer_gradients.hpp"
#include "train/transformer_layers.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(attention_gradients_match_finite_differences) {
  auto l = make_attention({5, 6}, 2);
  BOOST_REQUIRE(l.has_value());
  BOOST_TEST((*l)->out_shape() == (shape{5, 6}));
  BOOST_TEST((*l)->params().size() == 4u);
  test::check_layer(**l, 2, 1e-2, 11);
}

BOOST_AUTO_TEST_CASE(embedding_gradients_match_finite_differences) {
  auto l = make_embedding({4}, 7, 3);
  BOOST_REQUIRE(l.has_value());
  BOOST_TEST((*l)->out_shape() == (shape{4, 3}));
  tensor ids = test::vec({0, 6, 3, 3, 1, 2, 6, 0});
  ids.reshape({2, 4});
  test::check_layer_on(**l, ids, 1e-2, 12, /*input_gradient=*/false);
}

BOOST_AUTO_TEST_CASE(inputs_of_the_wrong_shape_are_refused_with_what_to_do) {
  auto image = make_embedding({1, 28, 28}, 10, 8);
  BOOST_REQUIRE(!image.has_value());
  BOOST_TEST(image.error().message.find("text dataset") != std::string::npos);
  auto flat = make_attention({16}, 2);
  BOOST_REQUIRE(!flat.has_value());
  BOOST_TEST(flat.error().message.find("embedding before it") != std::string::npos);
  auto heads = make_attention({4, 10}, 3);
  BOOST_REQUIRE(!heads.has_value());
  BOOST_TEST(heads.error().message.find("multiple of the head count") != std::string::npos);
}
