// Tests for core/local_groups.cpp: workers with the same locality group, ascending, led
// by the lowest rank; lone workers and workers without a locality stay on their own.
#define BOOST_TEST_MODULE local_groups
#include <boost/test/unit_test.hpp>

#include "core/local_groups.hpp"

using namespace troupe;
using group = std::vector<std::uint32_t>;

BOOST_AUTO_TEST_CASE(same_locality_groups_and_the_lowest_rank_leads) {
  const auto g = local_groups({"cuda@a", "cuda@b", "cuda@a", "", "cuda@b", "cuda@c", "cuda@a"});
  BOOST_REQUIRE_EQUAL(g.size(), 7u);
  BOOST_TEST(g[0] == (group{0, 2, 6}));
  BOOST_TEST(g[2] == (group{0, 2, 6}));
  BOOST_TEST(g[6] == (group{0, 2, 6}));
  BOOST_TEST(g[1] == (group{1, 4}));
  BOOST_TEST(g[3].empty());  // no locality
  BOOST_TEST(g[5].empty());  // alone on its node
  BOOST_TEST(pushes_to_shards(g[0], 0));
  BOOST_TEST(!pushes_to_shards(g[2], 2));
  BOOST_TEST(pushes_to_shards(g[1], 1));
  BOOST_TEST(!pushes_to_shards(g[4], 4));
  BOOST_TEST(pushes_to_shards(g[3], 3));
  BOOST_TEST(pushes_to_shards(g[5], 5));
}

BOOST_AUTO_TEST_CASE(distinct_localities_form_no_group) {
  for (const auto& g : local_groups({"cpu@h:1", "cpu@h:2", "cpu@h:3"})) BOOST_TEST(g.empty());
  BOOST_TEST(local_groups({}).empty());
}
