// Tests for monitoring/refusals.cpp: every refusal is counted under its own reason; a
// peer is logged once per reason however often it tries; an unnamed peer at most once a
// minute per reason; and a flood of addresses stops being remembered at a fixed bound
// while it goes on being counted. The ledger is process-wide, so each case uses peers of
// its own and `remembered` tallies what the cases before it have stored.
#define BOOST_TEST_MODULE refusals
#include <boost/test/unit_test.hpp>

#include <cctype>
#include <set>
#include <string>

#include "monitoring/refusals.hpp"

using namespace troupe::monitoring;

namespace {

// Peers (named ones) the ledger remembers from this file's earlier cases.
std::size_t remembered = 0;

bool refuse(refusal r, const std::string& peer) {
  const bool log = count_refusal(r, peer);
  if (log && !peer.empty()) ++remembered;
  return log;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_reason_has_its_own_label) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < refusal_kinds; ++i) {
    const std::string name(name_of(static_cast<refusal>(i)));
    BOOST_TEST_CONTEXT("reason " << i << ": " << name) {
      BOOST_TEST(name != "unknown");
      BOOST_TEST(!name.empty());
      for (char c : name) BOOST_TEST((std::islower(static_cast<unsigned char>(c)) || c == '_'));
    }
    names.insert(name);
  }
  BOOST_TEST(names.size() == refusal_kinds);
}

BOOST_AUTO_TEST_CASE(a_refusal_counts_under_its_reason_alone) {
  const auto frames = refusals(refusal::oversized_frame);
  const auto joins = refusals(refusal::unproven_join);
  refuse(refusal::oversized_frame, "10.0.0.1:4000");
  refuse(refusal::oversized_frame, "10.0.0.1:4000");
  refuse(refusal::oversized_frame, "10.0.0.2:4000");
  BOOST_TEST(refusals(refusal::oversized_frame) == frames + 3);
  BOOST_TEST(refusals(refusal::unproven_join) == joins);
}

BOOST_AUTO_TEST_CASE(a_peer_is_logged_once_per_reason) {
  BOOST_TEST(refuse(refusal::not_a_member, "node-a"));
  BOOST_TEST(!refuse(refusal::not_a_member, "node-a"));
  BOOST_TEST(!refuse(refusal::not_a_member, "node-a"));
  BOOST_TEST(refuse(refusal::wrong_role, "node-a"));  // another reason: logged again
  BOOST_TEST(refuse(refusal::not_a_member, "node-b"));
  BOOST_TEST(!refuse(refusal::wrong_role, "node-a"));
}

BOOST_AUTO_TEST_CASE(an_unnamed_peer_is_logged_at_most_once_a_minute_per_reason) {
  const auto before = refusals(refusal::handshake_deadline);
  BOOST_TEST(refuse(refusal::handshake_deadline, ""));
  BOOST_TEST(!refuse(refusal::handshake_deadline, ""));
  BOOST_TEST(!refuse(refusal::handshake_deadline, ""));
  BOOST_TEST(refuse(refusal::handshake_cap, ""));  // its own minute
  BOOST_TEST(refusals(refusal::handshake_deadline) == before + 3);
}

BOOST_AUTO_TEST_CASE(a_flood_of_addresses_is_counted_but_not_remembered_past_the_bound) {
  constexpr std::size_t bound = 4096;  // max_remembered_peers in refusals.cpp
  const auto before = refusals(refusal::lane_refused);
  const std::size_t room = bound - remembered;
  std::size_t logged = 0;
  for (std::size_t i = 0; i < bound + 500; ++i)
    if (refuse(refusal::lane_refused, "198.51.100." + std::to_string(i))) ++logged;
  BOOST_TEST(logged == room);
  BOOST_TEST(refusals(refusal::lane_refused) == before + bound + 500);
  // The bound is the ledger's, across reasons.
  const auto hosts = refusals(refusal::wrong_host);
  BOOST_TEST(!refuse(refusal::wrong_host, "node-z"));
  BOOST_TEST(refusals(refusal::wrong_host) == hosts + 1);
}
