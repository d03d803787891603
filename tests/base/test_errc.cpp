// Tests for base/errc.cpp: every code has its own name, a value that is no code says so,
// and a fault renders as "code: detail".
#define BOOST_TEST_MODULE errc
#include <boost/test/unit_test.hpp>

#include <set>

#include "base/errc.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(every_code_has_its_own_name) {
  std::set<std::string> names;
  for (int c = static_cast<int>(errc::bad_shard); c <= static_cast<int>(last_errc); ++c) {
    const std::string name = to_string(static_cast<errc>(c));
    BOOST_TEST(name.find("unknown") == std::string::npos, name);
    names.insert(name);
  }
  BOOST_TEST(names.size() == static_cast<std::size_t>(last_errc));
  BOOST_TEST(to_string(errc::not_member) == "not_member");
  BOOST_TEST(to_string(static_cast<errc>(200)) == "unknown(200)");
}

BOOST_AUTO_TEST_CASE(a_fault_renders_with_its_detail) {
  BOOST_TEST(to_string(fault{errc::compute_failed, "forward: out of memory"}) == "compute_failed: forward: out of memory");
  BOOST_TEST(to_string(fault{errc::stalled, ""}) == "stalled");
}
