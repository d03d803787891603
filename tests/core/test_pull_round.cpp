// pull_round: a training member's pulls of one step. The MLP on 2 shards with 2 gradient
// buckets: a round in pieces asks each shard for its piece of each bucket, the lowest
// layers' first; the buckets complete as their pieces arrive and the layers ready grow
// with them; the base version is the oldest piece's; an answer nobody asked for (a piece
// of another size, a piece answered twice, a whole slice answered twice) is told apart;
// 2-bit pulls ask whole slices, for the full values only while no view is held.
#define BOOST_TEST_MODULE pull_round
#include <boost/test/unit_test.hpp>

#include "core/pull_round.hpp"
#include "tests/support/models.hpp"

using namespace troupe;
using test::build_model;

namespace {

struct two_shards {
  model m = build_model("mlp");
  member_slices slices{partition_parameters(m, 2, 0), {0, m.num_layers(), 0, m.num_params()}, m, 128 << 10, true};
};

auto pieces(bool on) {
  return [on](std::uint32_t) { return on; };
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(a_round_in_pieces_asks_each_bucket_lowest_layers_first, two_shards) {
  BOOST_REQUIRE(slices.buckets().size() == 2u);
  pull_round round(slices, false);
  BOOST_TEST(round.layers_ready(slices, m.num_layers()) == m.num_layers());  // nothing pulled yet
  const auto asks = round.start(slices, 3, 0, 7, pieces(true));
  std::size_t expected = 0;
  for (std::uint32_t s : slices.active())
    for (std::size_t k = 0; k < 2; ++k) expected += slices.piece(s, k).numel > 0;
  BOOST_REQUIRE(asks.size() == expected);
  for (const kv_pull& r : asks) {
    BOOST_TEST(r.worker == 3u);
    BOOST_TEST(r.clock == 7);
    BOOST_TEST((r.parts == std::vector<kv_part_id>{stage_part(0)}));
    BOOST_TEST(!r.full);
  }
  // Per shard, the last bucket (layers nearest the input) is asked first.
  const slice_piece& low = slices.piece(asks.front().shard, 1);
  BOOST_TEST((asks.front().piece_numel == 0 ? slices.numel(asks.front().shard) : asks.front().piece_numel) ==
             low.numel);
  BOOST_TEST(round.open());
  BOOST_TEST(round.layers_ready(slices, m.num_layers()) == 0);
}

BOOST_FIXTURE_TEST_CASE(buckets_complete_as_their_pieces_arrive_and_the_oldest_version_counts, two_shards) {
  pull_round round(slices, false);
  const auto asks = round.start(slices, 0, 0, 0, pieces(true));
  std::int64_t version = 10;
  std::vector<std::size_t> completed;
  int ready_before = round.layers_ready(slices, m.num_layers());
  for (const kv_pull& r : asks) {
    const auto at = round.place_of(slices, r.shard, r.piece_offset, r.piece_numel);
    BOOST_REQUIRE(at.asked);
    BOOST_REQUIRE(at.bucket.has_value());
    BOOST_TEST(at.numel == slices.piece(r.shard, *at.bucket).numel);
    for (std::size_t k : round.took(slices, r.shard, at.bucket, version--)) completed.push_back(k);
    const int ready = round.layers_ready(slices, m.num_layers());
    BOOST_TEST(ready >= ready_before);  // layers only become ready
    ready_before = ready;
    // The same piece again answers nothing.
    BOOST_TEST(!round.place_of(slices, r.shard, r.piece_offset, r.piece_numel).asked);
  }
  BOOST_TEST(!round.open());
  BOOST_TEST(completed.size() == 2u);
  BOOST_TEST(completed.front() == 1u);  // the lowest layers' bucket, asked first, completes first
  BOOST_TEST(round.layers_ready(slices, m.num_layers()) == m.num_layers());
  for (std::uint32_t s : slices.active()) BOOST_TEST(round.base_version(s) < 10);  // the oldest piece's
}

BOOST_FIXTURE_TEST_CASE(an_answer_nobody_asked_for_is_told_apart, two_shards) {
  pull_round round(slices, false);
  round.start(slices, 0, 0, 0, pieces(true));
  const slice_piece& p = slices.piece(0, 0);
  BOOST_REQUIRE(p.numel > 1);
  BOOST_TEST(!round.place_of(slices, 0, p.offset, p.numel - 1).asked);  // another size
  BOOST_TEST(!round.place_of(slices, 0, p.offset + 1, p.numel).asked);  // another place
  BOOST_TEST(!round.place_of(slices, 0, 0, 0).asked);                   // a whole slice, asked in pieces
  const auto past = round.place_of(slices, 9, 0, 0);  // no such shard: its shape is refused by the caller
  BOOST_TEST(past.asked);
  BOOST_TEST(past.numel == 0);
}

BOOST_FIXTURE_TEST_CASE(a_whole_slice_answered_twice_is_not_taken_twice, two_shards) {
  pull_round round(slices, false);
  const auto asks = round.start(slices, 0, 0, 0, pieces(false));
  BOOST_REQUIRE(asks.size() == 2u);
  for (const kv_pull& r : asks) BOOST_TEST(r.piece_numel == 0);
  auto at = round.place_of(slices, 0, 0, 0);
  BOOST_REQUIRE(at.asked);
  BOOST_TEST(!at.bucket.has_value());
  BOOST_TEST(at.numel == slices.numel(0));
  BOOST_TEST(round.took(slices, 0, std::nullopt, 4).empty());  // shard 1's parts of both buckets are missing
  BOOST_TEST(round.base_version(0) == 4);
  BOOST_TEST(!round.place_of(slices, 0, 0, 0).asked);  // shard 0 answered already
  BOOST_TEST(round.open());
  BOOST_TEST(round.took(slices, 1, std::nullopt, 5).size() == 2u);
  BOOST_TEST(!round.open());
}

BOOST_FIXTURE_TEST_CASE(two_bit_pulls_ask_whole_slices_and_full_values_only_without_a_view, two_shards) {
  pull_round round(slices, true);
  auto asks = round.start(slices, 0, 0, 0, pieces(true));  // pieces are not used in 2 bits
  BOOST_REQUIRE(asks.size() == 2u);
  for (const kv_pull& r : asks) {
    BOOST_TEST(r.piece_numel == 0);
    BOOST_TEST(r.full);
  }
  round.view(0) = tensor({slices.numel(0)});
  for (const kv_pull& r : asks) round.took(slices, r.shard, std::nullopt, 1);
  asks = round.start(slices, 0, 0, 1, pieces(true));
  BOOST_TEST(!asks[0].full);  // shard 0's view is held
  BOOST_TEST(asks[1].full);
}

BOOST_AUTO_TEST_CASE(a_member_without_shards_pulls_nothing) {
  const model m = build_model("mlp");
  const member_slices slices(partition_parameters(m, 2, 0), {0, m.num_layers(), 0, m.num_params()}, m, 0, false);
  pull_round round(slices, false);
  BOOST_TEST(round.start(slices, 0, 0, 0, pieces(false)).empty());
  BOOST_TEST(!round.open());
  BOOST_TEST(round.layers_ready(slices, m.num_layers()) == m.num_layers());
  BOOST_TEST(round.took(slices, 0, std::nullopt, 1).empty());  // an answer with none due changes nothing
}
