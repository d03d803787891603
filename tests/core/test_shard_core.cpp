// Tests for core/shard_core.cpp, step by step and without CAF: sync sums in rank order
// and releases held pulls only when a round closes; ssp holds exactly the pulls past the
// bound; async applies on arrival; a worker that leaves closes its rounds; every kind of
// bad gradient is rejected with its error and leaves the parameters untouched; a pull of
// the whole buffer is answered with the parameters themselves, which an update leaves to
// the reply, and a stage's slice is answered packed; a gradient pushed in pieces makes
// the same update as a whole one, and a bad piece refuses its clock.
#define BOOST_TEST_MODULE shard_core
#include <boost/test/unit_test.hpp>

#include <array>
#include <cstring>
#include <limits>

#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;

namespace {

constexpr std::int64_t n = 8;

// Plain SGD with lr 1 and no momentum: an update subtracts the (averaged) gradient.
shard_core make_shard(sync_mode mode, std::int32_t staleness = 0, bool staleness_lr = false) {
  shard_config cfg;
  cfg.mode = mode;
  cfg.staleness = staleness;
  cfg.staleness_lr = staleness_lr;
  cfg.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  shard_core core(cfg, tensor({n}));
  core.start({0, 1, 2});
  return core;
}

// Three gradients whose float sum depends on the order: (a + b) + c != a + (b + c).
std::array<tensor, 3> order_sensitive() {
  return {test::random_tensor({n}, 1, 1e8f), test::random_tensor({n}, 2), test::random_tensor({n}, 3, 1e-7f)};
}

tensor filled(float v) {
  tensor t({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = v;
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sync_sums_in_rank_order_whatever_the_arrival_order) {
  const auto [g0, g1, g2] = order_sensitive();
  auto a = make_shard(sync_mode::sync), b = make_shard(sync_mode::sync);
  a.push(0, 0, 0, g0);
  a.push(1, 0, 0, g1);
  a.push(2, 0, 0, g2);
  b.push(2, 0, 0, g2);
  b.push(0, 0, 0, g0);
  b.push(1, 0, 0, g1);
  BOOST_TEST(a.version() == 1);
  BOOST_TEST(same_bits(a.params(), b.params()));
  // And the update is -(g0 + g1 + g2), summed in rank order.
  for (std::int64_t i = 0; i < n; ++i) {
    const float expect = -((g0.data<float>()[i] + g1.data<float>()[i]) + g2.data<float>()[i]);
    BOOST_TEST(a.params().data<float>()[i] == expect);
  }
}

BOOST_AUTO_TEST_CASE(sync_holds_pulls_until_the_round_closes) {
  auto s = make_shard(sync_mode::sync);
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
  auto s = make_shard(sync_mode::sync);
  BOOST_TEST((*s.push(0, 1, 0, filled(1.f)).error == errc::bad_clock));
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((*s.push(0, 0, 0, filled(1.f)).error == errc::duplicate));
  s.push(1, 0, 0, filled(1.f));
  s.push(2, 0, 0, filled(1.f));
  BOOST_TEST((*s.push(1, 0, 0, filled(1.f)).error == errc::stale_round));
}

BOOST_AUTO_TEST_CASE(a_worker_that_leaves_does_not_stall_sync) {
  auto s = make_shard(sync_mode::sync);
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST((s.pull(0, 1, 7).decision == shard_core::pull_decision::hold));
  BOOST_TEST((s.pull(2, 1, 8).decision == shard_core::pull_decision::hold));  // a pull of the leaver
  s.worker_left(2);
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -6.f);
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{7}));
  BOOST_TEST(s.take_dropped() == (std::vector<shard_core::token>{8}));
  BOOST_TEST((*s.push(2, 1, 1, filled(1.f)).error == errc::not_member));
  // The next round needs only the two who remain.
  s.push(0, 1, 1, filled(1.f));
  s.push(1, 1, 1, filled(1.f));
  BOOST_TEST(s.version() == 2);
}

BOOST_AUTO_TEST_CASE(a_rejected_gradient_counts_as_submitted_in_sync) {
  auto s = make_shard(sync_mode::sync);
  tensor bad = filled(1.f);
  bad.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST((*s.push(2, 0, 0, bad).error == errc::not_finite));
  BOOST_TEST(s.version() == 1);  // the round closed with the two good gradients
  BOOST_TEST(s.params().data<float>()[3] == -6.f);
}

BOOST_AUTO_TEST_CASE(an_unreadable_gradient_is_refused_as_malformed_and_the_clocks_move_on) {
  auto sync = make_shard(sync_mode::sync);
  sync.push(0, 0, 0, filled(2.f));
  sync.push(1, 0, 0, filled(4.f));
  auto out = sync.push(2, 0, 0, tensor(), {"code 3 at element 7"});
  BOOST_TEST((*out.error == errc::malformed));
  BOOST_TEST(out.detail == "code 3 at element 7");
  BOOST_TEST(sync.version() == 1);  // the round counted it, as any refused gradient
  BOOST_TEST(sync.counters().rejected_by.at(errc::malformed) == 1);
  auto async = make_shard(sync_mode::async);
  BOOST_TEST((*async.push(0, 0, 0, filled(1.f), {"a torn slot"}).error == errc::malformed));
  BOOST_TEST(async.version() == 0);  // nothing applied
  BOOST_TEST(!async.push(0, 1, 0, filled(1.f)).error);  // the worker's next clock is taken
}

// Note [Scanned on arrival]: a gradient the transport vouched for is not scanned again,
// in any mode (the NaN stands for bytes the core must not read twice); with the default
// receipt the same gradient is refused.
BOOST_AUTO_TEST_CASE(a_gradient_the_transport_scanned_is_not_scanned_again) {
  tensor odd = filled(1.f);
  odd.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  for (auto mode : {sync_mode::sync, sync_mode::async, sync_mode::ssp}) {
    auto s = make_shard(mode);
    BOOST_TEST((*s.push(0, 0, 0, tensor(odd)).error == errc::not_finite));
    gradient_receipt scanned;
    scanned.finite = true;
    BOOST_TEST(!s.push(1, 0, 0, tensor(odd), scanned).error);
  }
}

// Elements [offset, offset + len) of t.
tensor part(const tensor& t, std::int64_t offset, std::int64_t len) {
  tensor out({len});
  std::memcpy(out.data<float>(), t.data<float>() + offset, static_cast<std::size_t>(len) * sizeof(float));
  return out;
}

BOOST_AUTO_TEST_CASE(pieces_make_the_same_sync_round_as_whole_gradients) {
  const auto [g0, g1, g2] = order_sensitive();
  auto whole = make_shard(sync_mode::sync), pieces = make_shard(sync_mode::sync);
  whole.push(0, 0, 0, g0);
  whole.push(1, 0, 0, g1);
  whole.push(2, 0, 0, g2);
  // Worker 1 pushes the top of its slice first, as backward produces it.
  pieces.push(0, 0, 0, g0);
  auto top = pieces.push(1, 0, 0, part(g1, 5, 3), {{}, 5, 3});
  BOOST_TEST(!top.error);
  BOOST_TEST(top.version == 0);
  BOOST_TEST(!pieces.push(1, 0, 0, part(g1, 2, 3), {{}, 2, 3}).error);
  BOOST_TEST((pieces.pull(0, 1, 40).decision == shard_core::pull_decision::hold));
  pieces.push(2, 0, 0, g2);
  BOOST_TEST(pieces.version() == 0);  // worker 1's gradient is not complete
  BOOST_TEST(pieces.take_released().empty());
  auto last = pieces.push(1, 0, 0, part(g1, 0, 2), {{}, 0, 2});
  BOOST_TEST(!last.error);
  BOOST_TEST(pieces.version() == 1);
  BOOST_TEST(same_bits(whole.params(), pieces.params()));
  BOOST_TEST(pieces.take_released() == (std::vector<shard_core::token>{40}));
  BOOST_TEST(pieces.counters().gradients == 3);  // one gradient, however many pieces
}

BOOST_AUTO_TEST_CASE(pieces_make_one_async_update_when_the_gradient_is_complete) {
  tensor g = test::random_tensor({n}, 4);
  auto whole = make_shard(sync_mode::async), pieces = make_shard(sync_mode::async);
  whole.push(0, 0, 0, g);
  BOOST_TEST(!pieces.push(0, 0, 0, part(g, 4, 4), {{}, 4, 4}).error);
  BOOST_TEST(pieces.version() == 0);  // nothing applied yet
  BOOST_TEST(pieces.params().data<float>()[7] == 0.f);
  BOOST_TEST(!pieces.push(0, 0, 0, part(g, 0, 4), {{}, 0, 4}).error);
  BOOST_TEST(pieces.version() == 1);
  BOOST_TEST(same_bits(whole.params(), pieces.params()));
  BOOST_TEST(!pieces.push(0, 1, 1, part(g, 0, 8), {{}, 0, 8}).error);  // a piece of the whole slice is a gradient
  BOOST_TEST(pieces.version() == 2);
}

BOOST_AUTO_TEST_CASE(a_refused_piece_refuses_its_clock_and_the_round_goes_on) {
  tensor g = filled(1.f);
  tensor bad = part(g, 0, 4);
  bad.data<float>()[1] = std::numeric_limits<float>::infinity();
  auto s = make_shard(sync_mode::sync);
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST(!s.push(2, 0, 0, part(g, 4, 4), {{}, 4, 4}).error);
  const auto out = s.push(2, 0, 0, bad, {{}, 0, 4});
  BOOST_TEST((*out.error == errc::not_finite));
  BOOST_TEST(out.detail.find("piece [0, +4) of worker 2's clock-0 gradient") != std::string::npos, out.detail);
  BOOST_TEST(s.version() == 1);  // the round closed with the two whole gradients
  BOOST_TEST(s.params().data<float>()[7] == -6.f);  // and nothing of worker 2's good piece
  // The clock's later pieces are refused with the same code; the next clock is taken.
  auto late = make_shard(sync_mode::async);
  BOOST_TEST(!late.push(0, 0, 0, part(g, 0, 2), {{}, 0, 2}).error);
  BOOST_TEST((*late.push(0, 0, 0, part(g, 1, 2), {{}, 1, 2}).error == errc::duplicate));  // overlaps [0, 2)
  const auto again = late.push(0, 0, 0, part(g, 3, 5), {{}, 3, 5});
  BOOST_TEST((*again.error == errc::duplicate));
  BOOST_TEST(again.detail.find("an earlier piece was refused") != std::string::npos, again.detail);
  BOOST_TEST(late.version() == 0);
  BOOST_TEST(late.params().data<float>()[0] == 0.f);
  BOOST_TEST(!late.push(0, 1, 0, g).error);
  BOOST_TEST(late.version() == 1);
}

BOOST_AUTO_TEST_CASE(a_piece_outside_the_slice_or_unreadable_is_refused) {
  auto s = make_shard(sync_mode::async);
  BOOST_TEST((*s.push(0, 0, 0, part(filled(1.f), 0, 4), {{}, 6, 4}).error == errc::bad_shape));
  BOOST_TEST((*s.push(1, 0, 0, part(filled(1.f), 0, 4), {{}, -1, 4}).error == errc::bad_shape));
  BOOST_TEST((*s.push(2, 0, 0, part(filled(1.f), 0, 3), {{}, 0, 4}).error == errc::bad_shape));  // 3 floats said 4
  auto sync = make_shard(sync_mode::sync);
  BOOST_TEST((*sync.push(0, 0, 0, tensor(), {"a torn slot", 4, 4}).error == errc::malformed));
  BOOST_TEST(s.version() == 0);
  BOOST_TEST(s.counters().rejected == 3);
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_loses_its_open_pieces) {
  auto s = make_shard(sync_mode::sync);
  s.push(0, 0, 0, filled(2.f));
  s.push(1, 0, 0, filled(4.f));
  BOOST_TEST(!s.push(2, 0, 0, part(filled(8.f), 0, 4), {{}, 0, 4}).error);
  s.worker_left(2);
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -6.f);
}

BOOST_AUTO_TEST_CASE(async_applies_each_gradient_on_arrival) {
  auto s = make_shard(sync_mode::async);
  auto out = s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(!out.error);
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(s.params().data<float>()[0] == -1.f);
  out = s.push(0, 0, 0, filled(2.f));  // computed on version 0, arrives at version 1
  BOOST_TEST(out.staleness == 1);
  BOOST_TEST(s.params().data<float>()[0] == -3.f);
  BOOST_TEST((s.pull(2, 0, 1).decision == shard_core::pull_decision::answer));
  BOOST_TEST(s.counters().staleness_max == 1);
  BOOST_TEST((*s.push(1, 0, 1, filled(1.f)).error == errc::duplicate));
  BOOST_TEST((*s.push(1, 5, 1, filled(1.f)).error == errc::bad_clock));
}

BOOST_AUTO_TEST_CASE(staleness_scales_the_learning_rate) {
  auto s = make_shard(sync_mode::async, 0, true);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));   // staleness 1 -> lr 1
  s.push(2, 0, 0, filled(4.f));   // staleness 2 -> lr 1/2
  BOOST_TEST(s.params().data<float>()[0] == -4.f);
}

BOOST_AUTO_TEST_CASE(ssp_holds_exactly_the_pulls_past_the_bound) {
  auto s = make_shard(sync_mode::ssp, 1);
  // Worker 0 races ahead; workers 1 and 2 have finished nothing.
  BOOST_TEST((s.pull(0, 0, 1).decision == shard_core::pull_decision::answer));
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((s.pull(0, 1, 2).decision == shard_core::pull_decision::answer));  // 1 - 1 <= 0
  s.push(0, 1, 1, filled(1.f));
  BOOST_TEST((s.pull(0, 2, 3).decision == shard_core::pull_decision::hold));    // 2 - 1 > 0
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.take_released().empty());  // worker 2 is still at 0
  BOOST_TEST(s.version() == 3);           // but every gradient was applied on arrival
  s.push(2, 0, 0, filled(1.f));
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{3}));
}

BOOST_AUTO_TEST_CASE(ssp_with_zero_staleness_waits_for_everyone) {
  auto s = make_shard(sync_mode::ssp, 0);
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((s.pull(0, 1, 1).decision == shard_core::pull_decision::hold));
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.take_released().empty());
  s.worker_left(2);  // the slowest leaves: the bound is met by those who remain
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{1}));
}

BOOST_AUTO_TEST_CASE(bad_gradients_are_rejected_and_leave_parameters_untouched) {
  auto s = make_shard(sync_mode::async);
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
    BOOST_TEST((*out.error == c.expect), "expected " << to_string(c.expect) << ", got " << to_string(*out.error));
    BOOST_TEST(!out.detail.empty());
  }
  BOOST_TEST(same_bits(s.params(), before));
  BOOST_TEST(s.version() == version);
  BOOST_TEST(s.counters().rejected == static_cast<std::int64_t>(cases.size()));
  BOOST_TEST(s.counters().rejected_by.at(errc::not_finite) == 2);
}

BOOST_AUTO_TEST_CASE(nothing_is_served_before_start) {
  shard_config cfg;
  shard_core s(cfg, tensor({n}));
  BOOST_TEST((*s.push(0, 0, 0, filled(1.f)).error == errc::not_started));
  BOOST_TEST((s.pull(0, 0, 1).decision == shard_core::pull_decision::reject));
}

BOOST_AUTO_TEST_CASE(staleness_bucket_edges) {
  BOOST_TEST(staleness_bucket(0) == 0);
  BOOST_TEST(staleness_bucket(4) == 4);
  BOOST_TEST(staleness_bucket(5) == 5);
  BOOST_TEST(staleness_bucket(9) == 6);
  BOOST_TEST(staleness_bucket(100) == 7);
}

BOOST_AUTO_TEST_CASE(a_rejoining_worker_counts_from_its_round_in_sync) {
  auto s = make_shard(sync_mode::sync);
  s.worker_left(2);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.version() == 1);
  s.worker_joined(2, 2);  // expected from round 2 on
  s.push(0, 1, 1, filled(1.f));
  s.push(1, 1, 1, filled(1.f));
  BOOST_TEST(s.version() == 2);  // round 1 did not wait for it
  BOOST_TEST((*s.push(2, 1, 1, filled(1.f)).error == errc::stale_round));
  s.push(0, 2, 2, filled(1.f));
  s.push(1, 2, 2, filled(1.f));
  BOOST_TEST(s.version() == 2);  // round 2 waits for the rejoined worker
  s.push(2, 2, 2, filled(1.f));
  BOOST_TEST(s.version() == 3);
}

BOOST_AUTO_TEST_CASE(a_rejoining_worker_starts_at_its_clock_in_ssp) {
  auto s = make_shard(sync_mode::ssp, 0);
  s.worker_left(2);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));
  s.worker_joined(2, 1);
  BOOST_TEST((s.pull(0, 1, 5).decision == shard_core::pull_decision::answer));  // worker 2 counts as at clock 1
  BOOST_TEST(!s.push(2, 1, 2, filled(1.f)).error.has_value());
}

BOOST_AUTO_TEST_CASE(a_whole_slice_is_answered_with_the_parameters_themselves_and_updates_leave_it_alone) {
  auto s = make_shard(sync_mode::async);
  s.push(0, 0, 0, filled(-1.f));  // parameters 1 everywhere
  tensor reply = s.params_for(0);
  BOOST_TEST(reply.bytes() == s.params().bytes());  // not a copy: Note [Lent values]
  s.push(1, 0, 0, filled(-2.f));                   // an update overtakes the reply
  BOOST_TEST(s.params().data<float>()[0] == 3.f);
  BOOST_TEST(reply.bytes() != s.params().bytes());
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(reply.data<float>()[i] == 1.f);
}

BOOST_AUTO_TEST_CASE(a_stages_slice_is_answered_packed) {
  shard_config cfg;
  cfg.stage_slices = {{{0, 3}, {5, 2}}, {{3, 2}, {7, 1}}};
  tensor p({n});
  for (std::int64_t i = 0; i < n; ++i) p.data<float>()[i] = static_cast<float>(i);
  shard_core s(cfg, std::move(p));
  s.start({0, 1}, {0, 1});
  tensor a = s.params_for(0), b = s.params_for(1);
  BOOST_REQUIRE(a.numel() == 5);
  BOOST_REQUIRE(b.numel() == 3);
  const float want_a[] = {0, 1, 2, 5, 6}, want_b[] = {3, 4, 7};
  for (int i = 0; i < 5; ++i) BOOST_TEST(a.data<float>()[i] == want_a[i]);
  for (int i = 0; i < 3; ++i) BOOST_TEST(b.data<float>()[i] == want_b[i]);
}
