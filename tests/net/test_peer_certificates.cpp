// Tests for net/peer_certificates.cpp: a node is tied to the certificate of the socket its
// route runs over, a route over a socket without TLS carries no certificate, and a
// dropped route or a reused socket forgets what it knew.
#define BOOST_TEST_MODULE peer_certificates
#include <boost/test/unit_test.hpp>

#include "net/peer_certificates.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(a_node_gets_the_certificate_of_its_socket) {
  record_handshake(11, {"/CN=worker-0/OU=worker", "worker"});
  BOOST_TEST(!certificate_of("node-a").has_value());  // no route yet
  record_route(11, "node-a");
  const auto c = certificate_of("node-a");
  BOOST_REQUIRE(c.has_value());
  BOOST_TEST(c->subject == "/CN=worker-0/OU=worker");
  BOOST_TEST(c->role == "worker");
  forget_route(11);
  BOOST_TEST(!certificate_of("node-a").has_value());
}

BOOST_AUTO_TEST_CASE(a_route_without_a_handshake_has_no_certificate) {
  record_handshake(12, {"/CN=server/OU=server", "server"});
  forget_handshake(12);  // that session closed; the socket is reused without TLS
  record_route(12, "node-b");
  BOOST_TEST(!certificate_of("node-b").has_value());
}

BOOST_AUTO_TEST_CASE(a_node_that_reconnects_takes_its_new_socket_s_certificate) {
  record_handshake(13, {"/CN=server/OU=server", "server"});
  record_route(13, "node-c");
  record_handshake(14, {"/CN=worker/OU=worker", "worker"});
  record_route(14, "node-c");
  BOOST_TEST(certificate_of("node-c")->role == "worker");
  forget_route(13);  // the old socket's late cleanup does not drop the new route
  BOOST_REQUIRE(certificate_of("node-c").has_value());
  BOOST_TEST(certificate_of("node-c")->role == "worker");
  forget_route(14);
  BOOST_TEST(!certificate_of("node-c").has_value());
}
