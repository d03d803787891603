// Test helper: a model of Fashion-MNIST's shape (1x28x28, 10 classes) from its spec.
#pragma once

#include <boost/test/unit_test.hpp>

#include "tensor/model.hpp"

namespace troupe::test {

// A model of Fashion-MNIST's shape from its spec ("mlp", "cnn", "mlp:784-16-10").
inline model build_model(const char* spec) {
  auto s = parse_model_spec(spec);
  BOOST_REQUIRE(s.has_value());
  auto m = model::build(*s, shape{1, 28, 28}, 10);
  BOOST_REQUIRE(m.has_value());
  return *m;
}

}  // namespace troupe::test
