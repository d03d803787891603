// Tests for net/endpoint.cpp: HOST:PORT parsing with clear errors, and loopback detection.
#define BOOST_TEST_MODULE endpoint
#include <boost/test/unit_test.hpp>

#include "net/endpoint.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(parses_hosts_and_ports) {
  auto e = parse_endpoint("10.0.0.5:7070", "--listen");
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->host == "10.0.0.5");
  BOOST_TEST(e->port == 7070);
  BOOST_TEST(parse_endpoint(":0", "--listen")->host == "127.0.0.1");
  auto v6 = parse_endpoint("[::1]:80", "--join");
  BOOST_REQUIRE(v6.has_value());
  BOOST_TEST(v6->host == "::1");
  BOOST_TEST(v6->str() == "[::1]:80");
}

BOOST_AUTO_TEST_CASE(errors_name_the_flag) {
  for (const char* bad : {"10.0.0.5", "host:http", "host:70000", "::1:80", "host:"}) {
    auto e = parse_endpoint(bad, "--join");
    BOOST_TEST_CONTEXT(bad) {
      BOOST_REQUIRE(!e.has_value());
      BOOST_TEST(e.error().message.find("--join") != std::string::npos);
      BOOST_TEST(e.error().message.find("HOST:PORT") != std::string::npos);
    }
  }
}

BOOST_AUTO_TEST_CASE(loopback_addresses) {
  BOOST_TEST(is_loopback("127.0.0.1"));
  BOOST_TEST(is_loopback("127.4.5.6"));
  BOOST_TEST(is_loopback("::1"));
  BOOST_TEST(is_loopback("localhost"));
  BOOST_TEST(!is_loopback("0.0.0.0"));
  BOOST_TEST(!is_loopback("10.0.0.1"));
  BOOST_TEST(!is_loopback("node-a"));
}
