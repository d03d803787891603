// Tests for core/shard_core.cpp, step by step and without CAF: sync holds pulls until a
// round closes and ssp exactly the pulls past the bound; a sync round's clocks out of
// order and duplicates are refused; a worker that leaves closes its rounds and drops its
// held pulls, and one that rejoins counts from its round (sync) or its clock (ssp); every
// kind of bad gradient is refused with its error and leaves the parameters untouched, an
// unreadable one as malformed, and one the transport scanned is not scanned again.
#define BOOST_TEST_MODULE shard_core
#include <boost/test/unit_test.hpp>
#include <limits>
#include <vector>

#include "tests/support/plain_shard.hpp"

using namespace troupe;
using test::filled;
using test::plain_shard;
using test::same_bits;

namespace {

constexpr std::int64_t n = test::plain_numel;

}  // namespace

BOOST_AUTO_TEST_CASE(sync_holds_pulls_until_the_round_closes) {
  auto s = plain_shard(sync_mode::sync);
  BOOST_TEST((s.pull(0, 0, 100).decision == shard_core::pull_decision::answer));
  s.push(0, 0, 0, filled(3.f));
  BOOST_TEST((s.pull(0, 1, 101).decision == shard_core::pull_decision::hold));
  s.push(1, 0, 0, filled(6.f));
  BOOST_TEST((s.pull(1, 1, 102).decision == shard_core::pull_decision::hold));
  BOOST_TEST(s.take_released().empty());
  BOOST_TEST(s.params().data<float>()[0] == 0.f);  // nothing applied before the round closes
  s.push(2, 0, 0, filled(9.f));
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -18.f);  // the sum, applied once
  auto released = s.take_released();
  BOOST_TEST(released == (std::vector<shard_core::token>{101, 102}));
  BOOST_TEST(s.counters().pulls_held == 2);
}

BOOST_AUTO_TEST_CASE(sync_rejects_rounds_out_of_order_and_duplicates) {
  auto s = plain_shard(sync_mode::sync);
  BOOST_TEST((s.push(0, 1, 0, filled(1.f)).error->code == errc::bad_clock));
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((s.push(0, 0, 0, filled(1.f)).error->code == errc::duplicate));
  s.push(1, 0, 0, filled(1.f));
  s.push(2, 0, 0, filled(1.f));
  BOOST_TEST((s.push(1, 0, 0, filled(1.f)).error->code == errc::stale_round));
}

BOOST_AUTO_TEST_CASE(a_worker_that_leaves_does_not_stall_sync) {
  auto s = plain_shard(sync_mode::sync);
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST((s.pull(0, 1, 7).decision == shard_core::pull_decision::hold));
  BOOST_TEST((s.pull(2, 1, 8).decision == shard_core::pull_decision::hold));  // a pull of the leaver
  s.member_left(2);
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -6.f);
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{7}));
  BOOST_TEST(s.take_dropped() == (std::vector<shard_core::token>{8}));
  BOOST_TEST((s.push(2, 1, 1, filled(1.f)).error->code == errc::not_member));
  // The next round needs only the two who remain.
  s.push(0, 1, 1, filled(1.f));
  s.push(1, 1, 1, filled(1.f));
  BOOST_TEST(s.version() == 2);
}

BOOST_AUTO_TEST_CASE(an_unreadable_gradient_is_refused_as_malformed_and_the_clocks_move_on) {
  auto sync = plain_shard(sync_mode::sync);
  sync.push(0, 0, 0, filled(2.f));
  sync.push(1, 0, 0, filled(4.f));
  auto out = sync.push(2, 0, 0, tensor(), {"code 3 at element 7"});
  BOOST_TEST((out.error->code == errc::malformed));
  BOOST_TEST(out.error->detail == "code 3 at element 7");
  BOOST_TEST(sync.version() == 1);  // the round counted it, as any refused gradient
  BOOST_TEST(sync.counters().rejected_by.at(errc::malformed) == 1);
  auto async = plain_shard(sync_mode::async);
  BOOST_TEST((async.push(0, 0, 0, filled(1.f), {"a torn slot"}).error->code == errc::malformed));
  BOOST_TEST(async.version() == 0);                     // nothing applied
  BOOST_TEST(!async.push(0, 1, 0, filled(1.f)).error);  // the worker's next clock is taken
}

// Note [Scanned on arrival]: a gradient the transport vouched for is not scanned again,
// in any mode (the NaN stands for bytes the core must not read twice); with the default
// receipt the same gradient is refused.
BOOST_AUTO_TEST_CASE(a_gradient_the_transport_scanned_is_not_scanned_again) {
  tensor odd = filled(1.f);
  odd.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  for (auto mode : {sync_mode::sync, sync_mode::async, sync_mode::ssp}) {
    auto s = plain_shard(mode);
    BOOST_TEST((s.push(0, 0, 0, tensor(odd)).error->code == errc::not_finite));
    gradient_receipt scanned;
    scanned.finite = true;
    BOOST_TEST(!s.push(1, 0, 0, tensor(odd), scanned).error);
  }
}

BOOST_AUTO_TEST_CASE(ssp_holds_exactly_the_pulls_past_the_bound) {
  auto s = plain_shard(sync_mode::ssp, 1);
  // Worker 0 races ahead; workers 1 and 2 have finished nothing.
  BOOST_TEST((s.pull(0, 0, 1).decision == shard_core::pull_decision::answer));
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((s.pull(0, 1, 2).decision == shard_core::pull_decision::answer));  // 1 - 1 <= 0
  s.push(0, 1, 1, filled(1.f));
  BOOST_TEST((s.pull(0, 2, 3).decision == shard_core::pull_decision::hold));  // 2 - 1 > 0
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.take_released().empty());  // worker 2 is still at 0
  BOOST_TEST(s.version() == 3);           // but every gradient was applied on arrival
  s.push(2, 0, 0, filled(1.f));
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{3}));
}

BOOST_AUTO_TEST_CASE(ssp_with_zero_staleness_waits_for_everyone) {
  auto s = plain_shard(sync_mode::ssp, 0);
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((s.pull(0, 1, 1).decision == shard_core::pull_decision::hold));
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.take_released().empty());
  s.member_left(2);  // the slowest leaves: the bound is met by those who remain
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{1}));
}

BOOST_AUTO_TEST_CASE(bad_gradients_are_rejected_and_leave_parameters_untouched) {
  auto s = plain_shard(sync_mode::async);
  s.push(0, 0, 0, filled(1.f));
  const tensor before = s.params();
  const std::int64_t version = s.version();
  tensor nan = filled(1.f), inf = filled(1.f);
  nan.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  inf.data<float>()[7] = std::numeric_limits<float>::infinity();
  struct bad_case {
    std::uint32_t worker;
    std::int64_t clock;
    tensor grad;
    errc expect;
  };
  std::vector<bad_case> cases;
  cases.push_back({1, 0, nan, errc::not_finite});
  cases.push_back({2, 0, inf, errc::not_finite});
  cases.push_back({0, 1, tensor({n + 1}), errc::bad_shape});
  cases.push_back({0, 2, tensor({2, 4}), errc::bad_shape});
  cases.push_back({0, 3, tensor({n}, dtype::i32), errc::bad_dtype});
  cases.push_back({0, 4, tensor(), errc::bad_dtype});
  cases.push_back({9, 0, filled(1.f), errc::not_member});
  for (auto& c : cases) {
    auto out = s.push(c.worker, c.clock, 0, c.grad);
    BOOST_REQUIRE(out.error.has_value());
    BOOST_TEST((out.error->code == c.expect), "expected " << to_string(c.expect) << ", got " << to_string(out.error->code));
    BOOST_TEST(!out.error->detail.empty());
  }
  BOOST_TEST(same_bits(s.params(), before));
  BOOST_TEST(s.version() == version);
  BOOST_TEST(s.counters().rejected == static_cast<std::int64_t>(cases.size()));
  BOOST_TEST(s.counters().rejected_by.at(errc::not_finite) == 2);
}

BOOST_AUTO_TEST_CASE(nothing_is_served_before_start) {
  shard_config cfg;
  shard_core s(cfg, tensor({n}));
  BOOST_TEST((s.push(0, 0, 0, filled(1.f)).error->code == errc::not_started));
  BOOST_TEST((s.pull(0, 0, 1).decision == shard_core::pull_decision::reject));
}

BOOST_AUTO_TEST_CASE(a_rejoining_worker_counts_from_its_round_in_sync) {
  auto s = plain_shard(sync_mode::sync);
  s.member_left(2);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.version() == 1);
  s.member_joined(2, 2);  // expected from round 2 on
  s.push(0, 1, 1, filled(1.f));
  s.push(1, 1, 1, filled(1.f));
  BOOST_TEST(s.version() == 2);  // round 1 did not wait for it
  BOOST_TEST((s.push(2, 1, 1, filled(1.f)).error->code == errc::stale_round));
  s.push(0, 2, 2, filled(1.f));
  s.push(1, 2, 2, filled(1.f));
  BOOST_TEST(s.version() == 2);  // round 2 waits for the rejoined worker
  s.push(2, 2, 2, filled(1.f));
  BOOST_TEST(s.version() == 3);
}

BOOST_AUTO_TEST_CASE(a_rejoining_worker_starts_at_its_clock_in_ssp) {
  auto s = plain_shard(sync_mode::ssp, 0);
  s.member_left(2);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));
  s.member_joined(2, 1);
  BOOST_TEST((s.pull(0, 1, 5).decision == shard_core::pull_decision::answer));  // worker 2 counts as at clock 1
  BOOST_TEST(!s.push(2, 1, 2, filled(1.f)).error.has_value());
}
