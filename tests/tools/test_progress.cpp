// Tests for tools/progress.cpp: duration formatting.
#define BOOST_TEST_MODULE progress
#include <boost/test/unit_test.hpp>

#include "tools/progress.hpp"

BOOST_AUTO_TEST_CASE(durations_read_naturally) {
  using troupe::cli::format_duration;
  BOOST_TEST(format_duration(0.4) == "0s");
  BOOST_TEST(format_duration(12.6) == "13s");
  BOOST_TEST(format_duration(65) == "1m05s");
  BOOST_TEST(format_duration(-3) == "0s");
}
