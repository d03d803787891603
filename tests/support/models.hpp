// Test helper: a model of Fashion-MNIST's shape (1x28x28, 10 classes, or another input)
// from its spec.
#pragma once

#include <boost/test/unit_test.hpp>

#include <string>

#include "train/model.hpp"

namespace troupe::test {

// A model of Fashion-MNIST's shape (or input `in`) from its spec ("mlp", "cnn",
// "mlp:784-16-10").
inline model build_model(const std::string& spec, const shape& in = {1, 28, 28}) {
  auto s = parse_model_spec(spec);
  BOOST_REQUIRE(s.has_value());
  auto m = model::build(*s, in, 10);
  BOOST_REQUIRE(m.has_value());
  return *m;
}

}  // namespace troupe::test
