// Tests for base/check.cpp: a failed TROUPE_CHECK throws contract_error naming the
// condition, the message and the place.
#define BOOST_TEST_MODULE check
#include <boost/test/unit_test.hpp>

#include "base/check.hpp"

BOOST_AUTO_TEST_CASE(failed_check_throws_with_context) {
  try {
    TROUPE_CHECK(1 + 1 == 3, "arithmetic is broken");
    BOOST_FAIL("no exception");
  } catch (const troupe::contract_error& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("arithmetic is broken") != std::string::npos);
    BOOST_TEST(what.find("1 + 1 == 3") != std::string::npos);
    BOOST_TEST(what.find("test_check.cpp") != std::string::npos);
  }
  BOOST_CHECK_NO_THROW(TROUPE_CHECK(true, "fine"));
}
