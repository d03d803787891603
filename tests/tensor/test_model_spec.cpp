// Tests for tensor/model_spec.cpp: the short names, mlp widths, and clear errors.
#define BOOST_TEST_MODULE model_spec
#include <boost/test/unit_test.hpp>

#include "tensor/model_spec.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(short_names_expand) {
  auto mlp = parse_model_spec("mlp");
  BOOST_REQUIRE(mlp.has_value());
  BOOST_TEST(mlp->name == "mlp:784-256-128-10");
  BOOST_TEST(*mlp->input_features == 784);
  // flatten, fc, relu, fc, relu, fc
  BOOST_TEST(mlp->layers.size() == 6u);
  auto cnn = parse_model_spec("cnn");
  BOOST_REQUIRE(cnn.has_value());
  BOOST_TEST(cnn->name == "cnn:fashion");
  BOOST_TEST(cnn->layers.size() == 10u);
  BOOST_TEST(parse_model_spec("cnn:fashion")->name == "cnn:fashion");
}

BOOST_AUTO_TEST_CASE(custom_mlp_widths) {
  auto m = parse_model_spec("mlp:784-10");
  BOOST_REQUIRE(m.has_value());
  BOOST_TEST(m->layers.size() == 2u);
  BOOST_TEST(m->layers[1].size == 10);
  BOOST_TEST(parse_model_spec("mlp:20-30-40-10")->name == "mlp:20-30-40-10");
}

BOOST_AUTO_TEST_CASE(errors_name_the_problem_and_the_choices) {
  for (const char* bad : {"resnet", "mlp:", "mlp:784", "mlp:784--10", "mlp:784-0-10", "mlp:784-x-10", "mlp:784-10-",
                          "cnn:big", ""}) {
    auto m = parse_model_spec(bad);
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!m.has_value());
      BOOST_TEST(m.error().message.find("mlp:IN-H1-...-OUT") != std::string::npos);
    }
  }
}
