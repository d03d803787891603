// Tests for core/ring_seats.cpp: every replica sits in the ring, or with local groups only
// their leaders (and workers in no group); a seat's neighbours wrap round; a replica
// outside the ring, or a ring of one, has no seat.
#define BOOST_TEST_MODULE ring_seats
#include <boost/test/unit_test.hpp>

#include "core/local_groups.hpp"
#include "core/ring_seats.hpp"

using namespace troupe;
using replicas = std::vector<std::uint32_t>;

BOOST_AUTO_TEST_CASE(without_groups_every_replica_is_in_the_ring) {
  BOOST_TEST(ring_replicas(4, {}) == (replicas{0, 1, 2, 3}));
  BOOST_TEST(ring_replicas(3, {{}, {}, {}}) == (replicas{0, 1, 2}));
  BOOST_TEST(ring_replicas(0, {}).empty());
}

BOOST_AUTO_TEST_CASE(with_groups_only_the_leaders_and_the_lone_workers_are) {
  const auto groups = local_groups({"cuda@a", "cuda@b", "cuda@a", "", "cuda@b", "cuda@c", "cuda@a"});
  BOOST_TEST(ring_replicas(7, groups) == (replicas{0, 1, 3, 5}));
  BOOST_TEST(ring_replicas(2, local_groups({"cpu@h:1", "cpu@h:1"})) == (replicas{0}));
}

BOOST_AUTO_TEST_CASE(a_seat_knows_its_neighbours_round_the_ring) {
  const replicas ring{0, 1, 3, 5};
  const auto first = seat_in(ring, 0);
  BOOST_REQUIRE(first.has_value());
  BOOST_TEST(first->index == 0u);
  BOOST_TEST(first->size == 4u);
  BOOST_TEST(first->prev == 5u);
  BOOST_TEST(first->next == 1u);
  const auto third = seat_in(ring, 3);
  BOOST_REQUIRE(third.has_value());
  BOOST_TEST(third->index == 2u);
  BOOST_TEST(third->prev == 1u);
  BOOST_TEST(third->next == 5u);
  const auto last = seat_in(ring, 5);
  BOOST_REQUIRE(last.has_value());
  BOOST_TEST(last->index == 3u);
  BOOST_TEST(last->next == 0u);
  const auto pair = seat_in(replicas{2, 4}, 4);
  BOOST_REQUIRE(pair.has_value());
  BOOST_TEST(pair->prev == 2u);
  BOOST_TEST(pair->next == 2u);  // one neighbour on both sides
}

BOOST_AUTO_TEST_CASE(no_seat_outside_the_ring_or_in_a_ring_of_one) {
  BOOST_TEST(!seat_in(replicas{0, 1, 3}, 2).has_value());
  BOOST_TEST(!seat_in(replicas{0}, 0).has_value());
  BOOST_TEST(!seat_in(replicas{}, 0).has_value());
}
