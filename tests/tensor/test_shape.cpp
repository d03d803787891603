// Tests for tensor/shape.cpp: construction, numel, strides, formatting, bounds.
#define BOOST_TEST_MODULE shape
#include <boost/test/unit_test.hpp>

#include "base/check.hpp"
#include "tensor/shape.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(numel_and_rank) {
  shape s{2, 3, 4};
  BOOST_TEST(s.rank() == 3);
  BOOST_TEST(s.numel() == 24);
  BOOST_TEST(shape{}.numel() == 1);
  BOOST_TEST(shape({5, 0}).numel() == 0);
}

BOOST_AUTO_TEST_CASE(strides_are_row_major) {
  auto st = shape{2, 3, 4}.contiguous_strides();
  BOOST_TEST(st[0] == 12);
  BOOST_TEST(st[1] == 4);
  BOOST_TEST(st[2] == 1);
}

BOOST_AUTO_TEST_CASE(prepend_and_drop_front) {
  shape s{1, 28, 28};
  BOOST_TEST(s.prepend(128) == (shape{128, 1, 28, 28}));
  BOOST_TEST(s.prepend(128).drop_front() == s);
  BOOST_TEST(s.str() == "(1, 28, 28)");
}

BOOST_AUTO_TEST_CASE(rejects_bad_shapes) {
  BOOST_CHECK_THROW((shape{1, 2, 3, 4, 5, 6, 7}), contract_error);
  BOOST_CHECK_THROW((shape{2, -1}), contract_error);
  BOOST_CHECK_THROW(shape{}.drop_front(), contract_error);
}
