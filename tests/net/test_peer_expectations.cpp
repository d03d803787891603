// Tests for net/peer_expectations.cpp: a declared peer is found by every address its name
// resolves to and the port dialled, a later declaration replaces an earlier one, and an
// address nobody declared, or a name that does not resolve, has no expectation.
#define BOOST_TEST_MODULE peer_expectations
#include <boost/test/unit_test.hpp>

#include "net/peer_expectations.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(a_declared_peer_is_found_by_address_and_port) {
  BOOST_REQUIRE(expect_peer("127.0.0.1", 7070, "coordinator"));
  const auto e = expectation_for("127.0.0.1", 7070);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->host == "127.0.0.1");
  BOOST_TEST(e->role == "coordinator");
  BOOST_TEST(!expectation_for("127.0.0.1", 7071).has_value());
  BOOST_TEST(!expectation_for("127.0.0.2", 7070).has_value());
}

BOOST_AUTO_TEST_CASE(a_name_is_declared_for_what_it_resolves_to) {
  BOOST_REQUIRE(expect_peer("localhost", 7171, "server"));
  const auto e = expectation_for("127.0.0.1", 7171);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->host == "localhost");  // the certificate must name what was dialled
  BOOST_TEST(e->role == "server");
}

BOOST_AUTO_TEST_CASE(a_later_declaration_replaces_an_earlier_one) {
  BOOST_REQUIRE(expect_peer("127.0.0.1", 7272, "server"));
  BOOST_REQUIRE(expect_peer("127.0.0.1", 7272, "worker"));
  BOOST_TEST(expectation_for("127.0.0.1", 7272)->role == "worker");
}

BOOST_AUTO_TEST_CASE(a_name_that_does_not_resolve_declares_nothing) {
  BOOST_TEST(!expect_peer("no-such-host.invalid", 7373, "server"));
  BOOST_TEST(!expectation_for("no-such-host.invalid", 7373).has_value());
}
