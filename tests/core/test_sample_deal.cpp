// Tests for core/sample_deal.cpp: static shares tile each epoch, a grant spreads its
// rows over its steps, a member takes only grants ahead of it, the dealer's grants by
// hand (the current epoch at once, a vacant rank's later epochs as the fastest nears
// them, in proportion to the steps left, within each step's room, a returned grant dealt
// again, a replacement back from the first clock not dealt), a shed's rows given up and
// taken back (Note [Balancing shares]), survivors that keep up losing nothing, and a
// lone survivor taking a lost worker's epoch whole within its extra rows a step (the
// random schedules are in test_sample_deal_schedules.cpp).
#define BOOST_TEST_MODULE sample_deal
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

#include "core/sample_deal.hpp"
#include "tests/support/deal_shapes.hpp"

using namespace troupe;
using troupe::test::small_shape;

namespace {

std::vector<std::int64_t> statics(const deal_shape& d, std::uint32_t rank, std::int64_t clock) {
  std::vector<std::int64_t> out;
  static_positions(d, rank, clock, out);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(static_shares_tile_an_epoch_and_match_the_sampler) {
  const deal_shape d = small_shape(3, 4, 10);  // steps of 4, 4, 2 rows
  std::vector<std::int64_t> all;
  for (std::uint32_t r = 0; r < 3; ++r)
    for (std::int64_t c = 0; c < d.steps_per_epoch; ++c) {
      auto p = statics(d, r, c);
      all.insert(all.end(), p.begin(), p.end());
    }
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(30);
  std::iota(expected.begin(), expected.end(), 0);
  BOOST_TEST(all == expected, boost::test_tools::per_element());
  BOOST_TEST(statics(d, 1, 2) == (std::vector<std::int64_t>{25, 28}), boost::test_tools::per_element());
  BOOST_TEST(statics(d, 1, 5) == statics(d, 1, 2), boost::test_tools::per_element());  // epoch 1, step 2
}

BOOST_AUTO_TEST_CASE(a_grant_spreads_its_rows_evenly_over_its_steps) {
  const rows_grant g{1, 0, 2, {10, 11, 12, 13, 14, 15, 16}};
  BOOST_TEST(grant_rows_at(g, 5, 1).empty());
  std::vector<std::size_t> sizes;
  for (std::int64_t s = 2; s < 5; ++s) sizes.push_back(grant_rows_at(g, 5, s).size());
  BOOST_TEST(sizes == (std::vector<std::size_t>{2, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(grant_rows_at(g, 5, 2)[0] == 10);
  BOOST_TEST(grant_rows_at(g, 5, 5).empty());
}

BOOST_AUTO_TEST_CASE(a_member_takes_only_a_grant_whose_first_step_is_ahead) {
  member_grants mine(5);
  BOOST_TEST(!mine.take(rows_grant{1, 1, 0, {1, 2}}, 5));  // clock 5 is epoch 1, step 0: begun
  BOOST_TEST(mine.take(rows_grant{2, 1, 1, {3, 4}}, 5));
  BOOST_TEST(mine.take(rows_grant{3, 1, 3, {5, 6}}, 5));
  BOOST_TEST(!mine.take(rows_grant{4, 0, 9, {7}}, 0));  // no such step
  BOOST_TEST(mine.count_at(5) == 0);
  BOOST_TEST(mine.rows_at(6).empty());  // 2 rows over 4 steps: steps 2 and 4
  BOOST_TEST(mine.rows_at(7) == (std::vector<std::int64_t>{3}), boost::test_tools::per_element());
  BOOST_TEST(mine.rows_at(9) == (std::vector<std::int64_t>{4, 6}), boost::test_tools::per_element());
  mine.drop_before(10);
  BOOST_TEST(mine.empty());
}

BOOST_AUTO_TEST_CASE(a_lost_ranks_current_epoch_goes_to_the_others_at_once) {
  const deal_shape d = small_shape();
  sample_dealer dealer(d, 3, 0);
  dealer.reported(0, 1);
  dealer.reported(1, 1);
  dealer.reported(2, 1);
  dealer.lost(2);  // trained step 0; steps 1-4 of epoch 0 are orphaned: 8 positions
  const auto grants = dealer.deal();
  BOOST_TEST_REQUIRE(grants.size() == 2u);
  std::int64_t rows = 0;
  for (const auto& [rank, g] : grants) {
    BOOST_TEST(rank != 2u);
    BOOST_TEST(g.epoch == 0);
    BOOST_TEST(g.from_step == 3);  // the report, 1, plus the lookahead
    rows += static_cast<std::int64_t>(g.positions.size());
  }
  BOOST_TEST(rows == 8);
  BOOST_TEST(dealer.dealt() == 8);
  BOOST_TEST(dealer.never_dealt() == 10);  // epoch 1 waits until someone nears it
  dealer.reported(0, 3);
  BOOST_TEST(dealer.deal().size() == 2u);  // 3 + 2 reaches epoch 1's first clock
  BOOST_TEST(dealer.never_dealt() == 0);
  BOOST_TEST(dealer.lost_positions() == 0);
}

// Note [Balancing shares]: 3 ranks of batch 4, 5 steps an epoch, 4 epochs; rank 0 lags
// an epoch behind the others, so its shed waits for the first epoch nobody has begun.
BOOST_AUTO_TEST_CASE(a_shed_behind_the_others_deals_a_later_epoch_and_a_raise_takes_it_back_where_none_was_dealt) {
  const deal_shape d = small_shape(3, 4, 20, 4);
  sample_dealer dealer(d, 3, 0);
  dealer.reported(0, 1);
  dealer.reported(1, 6);
  dealer.reported(2, 6);
  const auto shed = dealer.shed(0, 1);
  BOOST_TEST_REQUIRE(shed.has_value());
  BOOST_TEST(shed->keep == 1);
  BOOST_TEST(shed->not_before == 10);          // epoch 2: nobody has begun it
  BOOST_TEST(!dealer.shed(0, 2).has_value());  // one at a time
  dealer.answered(0, shed->id, true, 10);
  BOOST_TEST(dealer.keeps(0) == 1);
  BOOST_TEST(dealer.deal().empty());       // epoch 2 is dealt as the fastest nears it
  BOOST_TEST(dealer.never_dealt() == 30);  // rows 1-3 of its steps in epochs 2 and 3
  dealer.reported(1, 8);
  dealer.reported(2, 8);
  std::vector<std::int64_t> expected;  // rows 1-3 of epoch 2's steps
  for (std::int64_t c = 10; c < 15; ++c) static_positions(d, 0, c, expected, 1);
  std::vector<std::int64_t> dealt;
  for (const auto& [rank, g] : dealer.deal()) {
    BOOST_TEST(rank != 0u);  // a shedding member takes only what the others cannot
    BOOST_TEST(g.epoch == 2);
    BOOST_TEST(g.from_step == 0);  // all of the epoch's steps to take them in
    dealt.insert(dealt.end(), g.positions.begin(), g.positions.end());
  }
  std::sort(dealt.begin(), dealt.end());
  std::sort(expected.begin(), expected.end());
  BOOST_TEST(dealt == expected, boost::test_tools::per_element());
  BOOST_TEST(dealer.dealt() == 15);
  // It got faster: all its rows again, but only from clock 15, the first not dealt.
  const auto raise = dealer.shed(0, 4);
  BOOST_TEST_REQUIRE(raise.has_value());
  BOOST_TEST(raise->not_before == 15);
  dealer.reported(1, 13);
  dealer.reported(2, 13);
  BOOST_TEST(dealer.deal().empty());  // epoch 3 waits for the answer
  BOOST_TEST(dealer.never_dealt() == 15);
  dealer.answered(0, raise->id, true, 15);
  BOOST_TEST(dealer.deal().empty());  // and then has nothing to deal
  BOOST_TEST(dealer.never_dealt() == 0);
  BOOST_TEST(dealer.dealt() == 15);
}

// In step with the others, a shed applies from the member's next step and the rest of
// its epoch's rows go at once; a lower keep gives up rows already dealt past; a lost
// member's kept rows go too.
BOOST_AUTO_TEST_CASE(a_shed_in_step_applies_at_once_and_a_lost_member_gives_up_its_kept_rows) {
  const deal_shape d = small_shape(3, 4, 20, 2);
  sample_dealer dealer(d, 3, 0);
  auto dealt_rows = [&] {
    std::int64_t rows = 0;
    for (const auto& [rank, g] : dealer.deal()) {
      BOOST_TEST(rank != 0u);
      rows += static_cast<std::int64_t>(g.positions.size());
    }
    return rows;
  };
  for (std::uint32_t r = 0; r < 3; ++r) dealer.reported(r, 1);
  const auto half = dealer.shed(0, 2);
  BOOST_TEST_REQUIRE(half.has_value());
  BOOST_TEST(half->not_before == 0);
  dealer.answered(0, half->id, true, 2);  // its next step
  BOOST_TEST(dealt_rows() == 6);          // rows 2-3 of steps 2-4; dealt to the epoch's end
  const auto less = dealer.shed(0, 1);
  BOOST_TEST_REQUIRE(less.has_value());
  dealer.answered(0, less->id, true, 3);
  BOOST_TEST(dealt_rows() == 2);  // row 1 of steps 3-4, dealt past already
  BOOST_TEST(dealer.keeps(0) == 1);
  BOOST_TEST(!dealer.shed(0, 1).has_value());  // it keeps that many already
  dealer.reported(0, 4);
  dealer.lost(0);  // its kept row 0 of step 4 goes to the others too
  BOOST_TEST(dealt_rows() + dealer.lost_positions() == 1);
}

// In the fastest member's epoch but far behind it, a shed waits for the next epoch: the
// fast member has no steps left there for the rows it would give up.
BOOST_AUTO_TEST_CASE(a_shed_whose_rows_the_others_have_no_room_for_waits_for_the_next_epoch) {
  const deal_shape d = small_shape(2, 4, 40, 2);  // 10 steps an epoch
  sample_dealer dealer(d, 2, 0);
  dealer.reported(0, 1);
  dealer.reported(1, 8);  // it can take rows only from clock 10
  const auto shed = dealer.shed(0, 1);
  BOOST_TEST_REQUIRE(shed.has_value());
  BOOST_TEST(shed->not_before == 10);
  dealer.answered(0, shed->id, true, 10);
  std::int64_t granted = 0;  // epoch 1 at once: rank 1 is near it
  for (const auto& [rank, g] : dealer.deal()) {
    BOOST_TEST(rank == 1u);
    BOOST_TEST(g.epoch == 1);
    granted += static_cast<std::int64_t>(g.positions.size());
  }
  BOOST_TEST(granted == 3 * 10);
  BOOST_TEST(dealer.lost_positions() == 0);
}

// Rows that no member shedding nothing can take go to a shedding member, the shedder
// itself included, rather than untrained.
BOOST_AUTO_TEST_CASE(rows_only_a_shedding_member_can_take_go_to_it) {
  const deal_shape d = small_shape(2, 4, 40, 1);  // 10 steps
  sample_dealer dealer(d, 2, 0);
  dealer.reported(0, 1);
  dealer.reported(1, 1);
  const auto shed = dealer.shed(0, 1);
  BOOST_TEST_REQUIRE(shed.has_value());
  BOOST_TEST(shed->not_before == 0);  // rank 1 has room for 3 rows of each of steps 2-9
  dealer.answered(0, shed->id, true, 2);
  std::int64_t to_one = 0;
  for (const auto& [rank, g] : dealer.deal()) {
    BOOST_TEST(rank == 1u);
    BOOST_TEST(g.from_step == 3);  // its report and the lookahead
    dealer.answered(rank, g.id, true);
    to_one += static_cast<std::int64_t>(g.positions.size());
  }
  BOOST_TEST(to_one == 3 * 8);
  dealer.reported(1, 9);
  dealer.lost(1);  // its step 9 and the 4 granted rows there (24 over steps 3-9): only rank 0 has steps left
  std::int64_t back = 0;
  for (const auto& [rank, g] : dealer.deal()) {
    BOOST_TEST(rank == 0u);
    back += static_cast<std::int64_t>(g.positions.size());
  }
  BOOST_TEST(back == 4 + 4);
  BOOST_TEST(dealer.lost_positions() == 0);
}

BOOST_AUTO_TEST_CASE(a_grant_goes_in_proportion_to_the_steps_left_and_within_each_steps_room) {
  const deal_shape d = small_shape(4, 2, 20, 1);  // 10 steps
  sample_dealer dealer(d, 4, 0);
  dealer.reported(0, 6);  // 4 steps left from clock 8... minus the lookahead: from 8, 2 steps
  dealer.lost(3);         // 20 positions orphaned, all of epoch 0
  const auto grants = dealer.deal();
  std::map<std::uint32_t, std::pair<std::int64_t, std::size_t>> by_rank;
  for (const auto& [rank, g] : grants) by_rank[rank] = {g.from_step, g.positions.size()};
  BOOST_TEST(by_rank[0].first == 8);
  BOOST_TEST(by_rank[1].first == 2);
  // Weights 2 : 8 : 8 of 20 rows; rank 0's 2 steps hold at most 2 x 2.
  BOOST_TEST(by_rank[0].second == 2u);
  BOOST_TEST(by_rank[1].second + by_rank[2].second == 18u);
  BOOST_TEST(dealer.lost_positions() == 0);
}

BOOST_AUTO_TEST_CASE(what_fits_nowhere_is_counted_lost) {
  const deal_shape d = small_shape(2, 2, 4, 1);  // 2 steps of 2 rows
  sample_dealer dealer(d, 2, 0);
  dealer.lost(1);  // 4 positions; rank 0 can take them only from clock 2: none
  BOOST_TEST(dealer.deal().empty());
  BOOST_TEST(dealer.lost_positions() == 4);
}

BOOST_AUTO_TEST_CASE(a_returned_grant_is_dealt_again_and_a_taken_one_is_not) {
  const deal_shape d = small_shape(3, 2, 20, 1);
  sample_dealer dealer(d, 3, 0);
  dealer.lost(2);
  auto first = dealer.deal();
  BOOST_TEST_REQUIRE(first.size() == 2u);
  dealer.answered(first[0].first, first[0].second.id, true);
  dealer.answered(first[1].first, first[1].second.id, false);
  // Dealt again, to the one with room: the first's steps are full (2 extra rows each).
  const auto again = dealer.deal();
  BOOST_TEST_REQUIRE(again.size() == 1u);
  BOOST_TEST(again[0].first == first[1].first);
  BOOST_TEST(again[0].second.positions == first[1].second.positions, boost::test_tools::per_element());
  dealer.answered(first[1].first, first[1].second.id, false);  // answered before: ignored
  BOOST_TEST(dealer.deal().empty());
}

BOOST_AUTO_TEST_CASE(a_lost_members_unanswered_grant_is_orphaned_whole_and_a_taken_one_from_its_clock) {
  const deal_shape d = small_shape(3, 2, 20, 1);  // 10 steps
  sample_dealer dealer(d, 3, 0);
  dealer.lost(2);
  const auto grants = dealer.deal();  // to 0 and 1, from step 2
  BOOST_TEST_REQUIRE(grants.size() == 2u);
  dealer.answered(grants[0].first, grants[0].second.id, true);
  dealer.reported(grants[0].first, 6);  // trained its grant's rows of steps 2-5
  dealer.lost(grants[0].first);
  dealer.lost(grants[1].first);  // never answered: all of it
  std::int64_t expected = 0;
  for (std::int64_t s = 6; s < 10; ++s) expected += grant_rows_at(grants[0].second, 10, s).size();
  expected += static_cast<std::int64_t>(grants[1].second.positions.size());
  expected += 2 * (10 - 6) + 2 * 10;  // the two lost ranks' own steps left
  BOOST_TEST(dealer.deal().empty());  // nobody is left to take them
  BOOST_TEST(dealer.lost_positions() == expected);
}

BOOST_AUTO_TEST_CASE(a_replacement_starts_where_the_deal_stopped) {
  const deal_shape d = small_shape(3, 2, 10, 3);  // 5 steps an epoch, 15 in all
  sample_dealer dealer(d, 3, 0);
  dealer.reported(1, 2);
  dealer.lost(1);  // epoch 0's steps 2-4 orphaned
  dealer.deal();
  BOOST_TEST(dealer.replace(1, 2) == 5);  // wants clock 2; epoch 0's share is dealt
  BOOST_TEST(dealer.deal().empty());      // nothing else is orphaned
  dealer.reported(1, 6);
  dealer.lost(1);
  dealer.reported(0, 14);
  dealer.deal();  // epochs 1 (from 6) and 2 dealt
  BOOST_TEST(dealer.replace(1, 7) == 15);
  BOOST_TEST(dealer.never_dealt() == 0);
}

BOOST_AUTO_TEST_CASE(with_survivors_that_keep_up_nothing_is_lost) {
  // One loss early in each epoch, the others in step: every orphan finds room.
  const deal_shape d = small_shape(4, 4, 40, 3);
  sample_dealer dealer(d, 4, 0);
  for (std::uint32_t r = 0; r < 4; ++r) dealer.reported(r, 1);
  dealer.lost(3);
  std::int64_t granted = 0;
  for (std::int64_t c = 1; c <= d.total_steps; ++c) {
    for (std::uint32_t r = 0; r < 3; ++r) dealer.reported(r, c);
    for (auto& [rank, g] : dealer.deal()) {
      dealer.answered(rank, g.id, true);
      granted += static_cast<std::int64_t>(g.positions.size());
    }
  }
  BOOST_TEST(dealer.lost_positions() == 0);
  BOOST_TEST(dealer.never_dealt() == 0);
  BOOST_TEST(granted == 3 * 40 - 4);  // all of rank 3's share but its first step
}

BOOST_AUTO_TEST_CASE(two_workers_survivor_takes_the_lost_ones_epoch_whole_even_when_its_grant_came_back) {
  BOOST_TEST(max_extra_rows_for(64) == 72);
  BOOST_TEST(max_extra_rows_for(8) == 9);
  BOOST_TEST(max_extra_rows_for(1) == 2);
  // 2 ranks of batch 8, 80 steps an epoch; rank 1 is lost before its first step, and
  // rank 0 can take grants only from 2 steps ahead (the lookahead).
  auto survivor_deals = [](std::int64_t cap, bool return_the_first) {
    deal_shape d = small_shape(2, 8, 640, 1);
    d.max_extra_rows = cap;
    sample_dealer dealer(d, 2, 0);
    dealer.lost(1);
    auto grants = dealer.deal();
    BOOST_TEST_REQUIRE(grants.size() == 1u);
    if (return_the_first) {  // it came after its first step: dealt again from clock 5 + 2
      dealer.reported(0, 5);
      dealer.answered(0, grants[0].second.id, false);
      grants = dealer.deal();
      BOOST_TEST_REQUIRE(grants.size() == 1u);
      BOOST_TEST(grants[0].second.from_step == 7);
    }
    dealer.answered(0, grants[0].second.id, true);
    return std::pair{static_cast<std::int64_t>(grants[0].second.positions.size()), dealer.lost_positions()};
  };
  // A whole batch more a step: 78 steps hold 624 of the 640 rows.
  BOOST_TEST(survivor_deals(8, false).second == 16);
  // An eighth more: all of them, and after the return 73 steps still hold them.
  BOOST_TEST(survivor_deals(max_extra_rows_for(8), false).first == 640);
  BOOST_TEST(survivor_deals(max_extra_rows_for(8), true).first == 640);
  BOOST_TEST(survivor_deals(max_extra_rows_for(8), true).second == 0);
}
