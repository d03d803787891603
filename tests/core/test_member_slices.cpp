// member_slices: a stage's slices of the shards and its buckets' pieces of them. The MLP
// on 2 shards, one stage: both shards are active, their slices tile the parameters, and
// each bucket's pieces of both shards add up to the bucket; the second stage of a 2-stage
// cut holds only its own layers' ranges; a local group's member (its leader talks to the
// shards) has none active; without buckets there is one piece, the whole slice.
#define BOOST_TEST_MODULE member_slices
#include <boost/test/unit_test.hpp>

#include "core/member_slices.hpp"
#include "tests/support/models.hpp"

using namespace troupe;
using test::build_model;

namespace {

stage_span whole(const model& m) { return {0, m.num_layers(), 0, m.num_params()}; }

}  // namespace

BOOST_AUTO_TEST_CASE(one_stage_on_two_shards_tiles_the_parameters_and_each_bucket) {
  const model m = build_model("mlp");
  const key_table table = partition_parameters(m, 2, 0);
  const member_slices slices(table, whole(m), m, 128 << 10, true);
  BOOST_TEST(slices.shards() == 2u);
  BOOST_TEST(slices.active() == std::vector<std::uint32_t>({0, 1}), boost::test_tools::per_element());
  BOOST_TEST(slices.numel(0) + slices.numel(1) == m.num_params());
  BOOST_TEST(slices.numel(0) == table.shard_numel[0]);
  BOOST_TEST(slices.numel(7) == 0);  // no such shard
  BOOST_REQUIRE(slices.bucketed());
  BOOST_TEST(slices.buckets().size() == 2u);
  for (std::size_t k = 0; k < slices.buckets().size(); ++k) {
    const auto& b = slices.buckets()[k];
    BOOST_TEST(slices.piece(0, k).numel + slices.piece(1, k).numel == b.hi - b.lo);
  }
}

BOOST_AUTO_TEST_CASE(a_later_stage_holds_only_its_own_layers_ranges) {
  const model m = build_model("mlp");
  const key_table table = partition_parameters(m, 2, 0);
  const auto spans = stage_spans(m, {2});
  BOOST_REQUIRE(spans.size() == 2u);
  const model stage = m.stage(spans[1].first_layer, spans[1].last_layer);
  const member_slices slices(table, spans[1], stage, 0, true);
  BOOST_TEST(slices.numel(0) + slices.numel(1) == spans[1].numel);
  for (std::uint32_t s : slices.active())
    for (const key_range& r : slices.ranges(s)) {
      BOOST_TEST(r.offset >= 0);  // stage-local offsets
      BOOST_TEST(r.offset + r.length <= spans[1].numel);
    }
  BOOST_TEST(!slices.bucketed());
  for (std::uint32_t s : slices.active()) BOOST_TEST(slices.piece(s, 0).numel == slices.numel(s));
}

BOOST_AUTO_TEST_CASE(a_local_group_member_has_no_shard_of_its_own_to_talk_to) {
  const model m = build_model("mlp");
  const member_slices slices(partition_parameters(m, 2, 0), whole(m), m, 0, false);
  BOOST_TEST(slices.active().empty());
  BOOST_TEST(slices.numel(0) > 0);  // its layout is still known (for its leader's pulls)
}
