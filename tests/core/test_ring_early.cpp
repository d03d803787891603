// Tests for core/ring_early.cpp: pieces of collectives not yet started are held by number
// and given back in the order they came, once; a piece of a collective already started
// or done (behind), more than `ahead` collectives past it (too far), or past the bound
// (too many) is not held; clear drops them all.
#define BOOST_TEST_MODULE ring_early
#include <boost/test/unit_test.hpp>

#include "core/ring_early.hpp"

using namespace troupe;
using verdict = ring_early::verdict;

namespace {

ring_piece piece(std::uint64_t collective, std::uint32_t chunk) {
  ring_piece p;
  p.collective = collective;
  p.chunk = chunk;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_trainers_ring_holds_the_next_steps_pieces_only) {
  ring_early e;
  // Step 5's ring runs: only step 6's pieces may come early, and at most 3 of them.
  BOOST_TEST((e.hold(piece(6, 0), 6, 6, 1, 3) == verdict::held));
  BOOST_TEST((e.hold(piece(6, 1), 6, 6, 1, 3) == verdict::held));
  BOOST_TEST((e.hold(piece(5, 0), 5, 6, 1, 3) == verdict::behind));
  BOOST_TEST((e.hold(piece(7, 0), 7, 6, 1, 3) == verdict::too_far));
  BOOST_TEST((e.hold(piece(6, 2), 6, 6, 1, 3) == verdict::held));
  BOOST_TEST((e.hold(piece(6, 3), 6, 6, 1, 3) == verdict::too_many));
  BOOST_TEST(e.size() == 3u);
  BOOST_TEST(e.take(5).empty());
  auto six = e.take(6);
  BOOST_REQUIRE(six.size() == 3u);
  for (std::uint32_t i = 0; i < 3; ++i) BOOST_TEST(six[i].chunk == i);  // in the order they came
  BOOST_TEST(e.size() == 0u);
  BOOST_TEST(e.take(6).empty());  // once
}

BOOST_AUTO_TEST_CASE(a_users_ring_holds_any_later_call_until_the_bound) {
  ring_early e;
  // Call 2 not started yet: its own pieces and any later call's wait.
  BOOST_TEST((e.hold(piece(9, 0), 9, 2, ring_early::any, 4) == verdict::held));
  BOOST_TEST((e.hold(piece(2, 0), 2, 2, ring_early::any, 4) == verdict::held));
  BOOST_TEST((e.hold(piece(1, 0), 1, 2, ring_early::any, 4) == verdict::behind));
  BOOST_TEST((e.hold(piece(3, 0), 3, 2, ring_early::any, 4) == verdict::held));
  BOOST_TEST(e.take(2).size() == 1u);
  BOOST_TEST(e.size() == 2u);
  e.clear();
  BOOST_TEST(e.size() == 0u);
  BOOST_TEST(e.take(9).empty());
  BOOST_TEST((e.hold(piece(4, 0), 4, 2, ring_early::any, 1) == verdict::held));
  BOOST_TEST((e.hold(piece(4, 1), 4, 2, ring_early::any, 1) == verdict::too_many));
}
