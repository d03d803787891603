// Tests for core/shard_core_rules.cpp, by hand: --async-rule momentum lowers SGD's
// momentum (and past zero, the lr) by the live members that push on arrival, follows
// members that leave, and leaves sync rounds and Adam alone; dcasgd compensates a
// gradient for what moved since the sender's answered pull, piece by piece, on a pipeline
// stage's slice packed from its ranges, and not for a member that has no answered pull. With --backup-workers a sync round closes with the
// first gradients of all but b of each stage's members, drops a late one (or piece) without
// an error, and counts refused gradients and leavers as the plain round does. In ssp a
// member the coordinator names a straggler is left out of the bound, its gradients apply at
// lr / staleness, and it counts again only once it is no longer named and has caught up.
#define BOOST_TEST_MODULE shard_core_rules
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

namespace {

constexpr std::int64_t n = 6;

std::vector<std::uint32_t> ranks(std::uint32_t count) {
  std::vector<std::uint32_t> r(count);
  std::iota(r.begin(), r.end(), 0u);
  return r;
}

// SGD at lr 1 with the given momentum, no weight decay, parameters 0.
shard_core make_shard(async_rule rule, std::uint32_t members, float momentum, sync_mode mode = sync_mode::async,
                      optimizer_kind kind = optimizer_kind::sgd) {
  shard_config cfg;
  cfg.mode = mode;
  cfg.rule = rule;
  cfg.dc_lambda = 0.5f;
  cfg.optimizer = optimizer_config{kind, momentum, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  shard_core core(cfg, tensor({n}));
  core.start(ranks(members));
  return core;
}

tensor filled(float v) { return test::filled(n, v); }

float at(const shard_core& c, std::int64_t i) { return c.params().data<float>()[i]; }

}  // namespace

BOOST_AUTO_TEST_CASE(four_pushers_turn_momentum_0_9_into_0_6) {
  auto corrected = make_shard(async_rule::momentum, 4, 0.9f), plain = make_shard(async_rule::none, 4, 0.9f);
  for (auto* c : {&corrected, &plain}) {
    BOOST_TEST(!c->push(0, 0, 0, filled(1.f)).error);
    BOOST_TEST(!c->push(1, 0, 0, filled(1.f)).error);
  }
  BOOST_TEST(at(corrected, 0) == -(1.f + 1.6f), tt::tolerance(1e-6f));  // v = 1, then 0.6 * 1 + 1
  BOOST_TEST(at(plain, 0) == -(1.f + 1.9f), tt::tolerance(1e-6f));      // v = 1, then 0.9 * 1 + 1
}

BOOST_AUTO_TEST_CASE(sixteen_pushers_drop_momentum_and_scale_the_lr) {
  auto c = make_shard(async_rule::momentum, 16, 0.9f);
  c.push(0, 0, 0, filled(1.f));
  c.push(1, 0, 0, filled(1.f));
  BOOST_TEST(at(c, n - 1) == -1.25f, tt::tolerance(1e-6f));  // twice lr 0.625, no momentum
}

BOOST_AUTO_TEST_CASE(the_correction_follows_the_live_members) {
  auto c = make_shard(async_rule::momentum, 4, 0.9f);
  c.member_left(2);
  c.member_left(3);  // two pushers: momentum 0.8
  c.push(0, 0, 0, filled(1.f));
  c.push(1, 0, 0, filled(1.f));
  BOOST_TEST(at(c, 0) == -(1.f + 1.8f), tt::tolerance(1e-6f));
  c.member_joined(2, 1);
  c.member_joined(3, 1);  // four again: v = 0.6 * 1.8 + 1
  c.push(2, 1, 2, filled(1.f));
  BOOST_TEST(at(c, 0) == -(2.8f + 2.08f), tt::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(sync_rounds_and_adam_are_left_alone) {
  auto sync_c = make_shard(async_rule::momentum, 4, 0.9f, sync_mode::sync);
  for (std::uint32_t r = 0; r < 4; ++r) sync_c.push(r, 0, 0, filled(0.25f));
  for (std::uint32_t r = 0; r < 4; ++r) sync_c.push(r, 1, 1, filled(0.25f));
  BOOST_TEST(at(sync_c, 0) == -(1.f + 1.9f), tt::tolerance(1e-6f));  // the config's 0.9
  auto adam = make_shard(async_rule::dcasgd, 4, 0.9f, sync_mode::async, optimizer_kind::adam);
  auto adam_plain = make_shard(async_rule::none, 4, 0.9f, sync_mode::async, optimizer_kind::adam);
  for (auto* c : {&adam, &adam_plain}) {
    c->push(0, 0, 0, filled(1.f));
    c->push(1, 0, 0, filled(-0.5f));
  }
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(at(adam, i) == at(adam_plain, i));
}

// Two members, momentum 0: the rule's lr is 1 / 2. lambda 0.5.
BOOST_AUTO_TEST_CASE(dcasgd_compensates_for_what_moved_since_the_senders_pull) {
  auto dc = make_shard(async_rule::dcasgd, 2, 0.f), mom = make_shard(async_rule::momentum, 2, 0.f);
  for (auto* c : {&dc, &mom}) {
    c->answered(0);                  // worker 0 holds the parameters 0
    c->push(1, 0, 0, filled(1.f));   // no answered pull of its own: applied as it is; params -0.5
    c->push(0, 0, 0, filled(2.f));   // 2 + 0.5 * 4 * (-0.5 - 0) = 1 with dcasgd
  }
  BOOST_TEST(at(dc, 0) == -1.f, tt::tolerance(1e-6f));
  BOOST_TEST(at(mom, 0) == -1.5f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(dcasgd_takes_an_answered_piece_into_its_copy) {
  auto dc = make_shard(async_rule::dcasgd, 2, 0.f);
  dc.answered(0);               // copy: 0 everywhere
  dc.push(1, 0, 0, filled(1.f));  // params -0.5
  dc.answered(0, 2, 3);          // [2, 5) now -0.5 in the copy
  dc.push(0, 0, 0, filled(2.f));
  for (std::int64_t i = 0; i < n; ++i) {
    const bool fresh = i >= 2 && i < 5;  // nothing moved since: 2 at lr 0.5; else compensated to 1
    BOOST_TEST(at(dc, i) == (fresh ? -1.5f : -1.f), tt::tolerance(1e-6f));
  }
}

// A pipeline stage's slice lies in two ranges of the shard: [0, 2) and [4, 6) for stage 0,
// [2, 4) for stage 1. Two stage-0 members, so the rule's lr is 1 / 2; lambda 0.5.
BOOST_AUTO_TEST_CASE(dcasgd_compensates_a_stage_slice_packed_from_its_ranges) {
  shard_config cfg;
  cfg.mode = sync_mode::async;
  cfg.rule = async_rule::dcasgd;
  cfg.dc_lambda = 0.5f;
  cfg.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  cfg.stage_slices = {{{0, 2}, {4, 2}}, {{2, 2}}};
  shard_core dc(cfg, tensor({n}));
  dc.start({0, 1, 2}, {0, 0, 1});
  tensor four({4});
  std::fill_n(four.data<float>(), 4, 1.f);
  dc.answered(0);          // worker 0's copy: its 4 floats, all 0
  dc.push(1, 0, 0, four);  // no copy of worker 1's: applied as it is; its ranges -0.5
  std::fill_n(four.data<float>(), 4, 2.f);
  dc.push(0, 0, 0, four);  // 2 + 0.5 * 4 * (-0.5 - 0) = 1 at lr 0.5: -1
  const float want[] = {-1.f, -1.f, 0.f, 0.f, -1.f, -1.f};  // stage 1's range untouched
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(at(dc, i) == want[i], tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(a_member_that_rejoined_has_no_copy_until_its_next_pull) {
  auto dc = make_shard(async_rule::dcasgd, 2, 0.f);
  dc.answered(0);
  dc.push(1, 0, 0, filled(1.f));  // params -0.5
  dc.member_left(0);
  dc.member_joined(0, 1);
  dc.push(0, 1, 1, filled(2.f));  // uncompensated: -0.5 - 0.5 * 2
  BOOST_TEST(at(dc, 0) == -1.5f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(sync_keeps_no_copies) {
  auto sync_c = make_shard(async_rule::dcasgd, 2, 0.f, sync_mode::sync);
  sync_c.answered(0);
  sync_c.push(0, 0, 0, filled(1.f));
  sync_c.push(1, 0, 0, filled(1.f));  // the sum 2 at the config's lr 1
  BOOST_TEST(at(sync_c, 0) == -2.f);
}

namespace {

// Note [Backup workers]: sync, plain SGD at lr 1, `members` members of `stages` stages
// (member r is stage r % stages; each stage owns n / stages elements).
shard_core backup_shard(std::uint32_t members, std::int32_t backups, std::uint32_t stages = 1) {
  shard_config cfg;
  cfg.mode = sync_mode::sync;
  cfg.backup_workers = backups;
  cfg.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  std::vector<std::uint32_t> stage_of(members);
  if (stages > 1) {
    for (std::uint32_t k = 0; k < stages; ++k) cfg.stage_slices.push_back({{k * n / stages, n / stages}});
    for (std::uint32_t r = 0; r < members; ++r) stage_of[r] = r % stages;
  }
  shard_core core(cfg, tensor({n}));
  core.start(ranks(members), stage_of);
  return core;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_backup_worker_round_closes_with_the_first_gradients_and_drops_the_late_one) {
  auto s = backup_shard(4, 1);
  BOOST_TEST((s.pull(3, 1, 7).decision == shard_core::pull_decision::hold));
  s.push(2, 0, 0, filled(4.f));
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST(s.version() == 0);
  const auto third = s.push(3, 0, 0, filled(2.f));
  BOOST_TEST(!third.error);
  BOOST_TEST(!third.late);
  BOOST_TEST(s.version() == 1);               // three of four: the round closed
  BOOST_TEST(at(s, 0) == -7.f);               // 1 + 2 + 4, without worker 1's
  BOOST_TEST(s.take_released() == (std::vector<shard_core::token>{7}));
  const auto late = s.push(1, 0, 0, filled(100.f));
  BOOST_TEST(!late.error);                    // dropped, not refused
  BOOST_TEST(late.late);
  BOOST_TEST(late.version == 1);              // the open round, where its sender goes on
  BOOST_TEST(at(s, 0) == -7.f);               // and it changed nothing
  BOOST_TEST(s.counters().late == 1);
  BOOST_TEST(s.counters().rejected == 0);
  // The late member skips to round 1, which again closes with the first three.
  s.push(1, 1, 1, filled(1.f));
  s.push(3, 1, 1, filled(1.f));
  s.push(0, 1, 1, filled(1.f));
  BOOST_TEST(s.version() == 2);
  BOOST_TEST(at(s, 0) == -10.f);
  BOOST_TEST(s.push(2, 1, 1, filled(1.f)).late);
}

BOOST_AUTO_TEST_CASE(without_backup_workers_a_round_waits_for_everyone_and_late_is_an_error) {
  auto s = backup_shard(3, 0);
  s.push(0, 0, 0, filled(1.f));
  s.push(1, 0, 0, filled(1.f));
  BOOST_TEST(s.version() == 0);
  s.push(2, 0, 0, filled(1.f));
  BOOST_TEST(s.version() == 1);
  const auto again = s.push(2, 0, 0, filled(1.f));
  BOOST_TEST((again.error && again.error->code == errc::stale_round));
  BOOST_TEST(!again.late);
  BOOST_TEST(s.counters().late == 0);
}

BOOST_AUTO_TEST_CASE(a_refused_gradient_counts_toward_the_first_n_and_a_leaver_lowers_the_count) {
  auto s = backup_shard(4, 1);
  tensor bad = filled(1.f);
  bad.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  s.push(0, 0, 0, filled(1.f));
  BOOST_TEST((s.push(1, 0, 0, bad).error->code == errc::not_finite));
  s.push(2, 0, 0, filled(2.f));
  BOOST_TEST(s.version() == 1);  // three submissions, one of them refused
  BOOST_TEST(at(s, 1) == -3.f);
  s.member_left(3);
  s.member_left(2);              // two live: a round needs one
  s.push(1, 1, 1, filled(5.f));
  BOOST_TEST(s.version() == 2);
  BOOST_TEST(at(s, 1) == -8.f);
  s.member_left(1);              // one live, more backups than it: still needs its gradient
  BOOST_TEST(s.version() == 2);
  s.push(0, 2, 2, filled(1.f));
  BOOST_TEST(s.version() == 3);
}

BOOST_AUTO_TEST_CASE(a_late_piece_is_dropped_and_its_open_pieces_with_it) {
  auto s = backup_shard(3, 1);
  gradient_receipt first{{}, 0, n / 2, false}, second{{}, n / 2, n / 2, false};
  BOOST_TEST(!s.push(0, 0, 0, test::filled(n / 2, 1.f), first).late);  // a piece of round 0, still open
  s.push(1, 0, 0, filled(1.f));
  s.push(2, 0, 0, filled(1.f));
  BOOST_TEST(s.version() == 1);
  const auto rest = s.push(0, 0, 0, test::filled(n / 2, 1.f), second);
  BOOST_TEST(rest.late);
  BOOST_TEST(!rest.error);
  BOOST_TEST(at(s, 0) == -2.f);
  // Round 1 from member 0 in pieces: nothing of round 0's piece is left over.
  s.push(0, 1, 1, test::filled(n / 2, 3.f), first);
  s.push(0, 1, 1, test::filled(n / 2, 3.f), second);
  s.push(1, 1, 1, filled(1.f));
  BOOST_TEST(s.version() == 2);
  BOOST_TEST(at(s, 0) == -6.f);
  BOOST_TEST(at(s, n - 1) == -6.f);
}

// Every stage's slice is a part with its own rounds (Note [Rounds per part]).
BOOST_AUTO_TEST_CASE(with_pipeline_stages_each_stages_slice_waits_for_all_but_b_of_its_own_members) {
  // Six members of two stages: three replicas. One backup: each stage needs two.
  auto s = backup_shard(6, 1, 2);
  s.push(0, 0, 0, test::filled(n / 2, 1.f));  // stage 0
  s.push(1, 0, 0, test::filled(n / 2, 1.f));  // stage 1: one of three
  BOOST_TEST(s.version() == 0);
  s.push(2, 0, 0, test::filled(n / 2, 1.f));  // stage 0: two of three, its slice's round closes
  BOOST_TEST(s.version_for(0) == 1);
  BOOST_TEST(s.version_for(1) == 0);          // stage 1's slice still waits
  BOOST_TEST(s.version() == 0);
  BOOST_TEST(s.push(4, 0, 0, test::filled(n / 2, 1.f)).late);  // stage 0's third: too late
  s.push(5, 0, 0, test::filled(n / 2, 2.f));  // stage 1: two of three
  BOOST_TEST(s.version() == 1);
  BOOST_TEST(at(s, 0) == -2.f);           // stage 0: two gradients of 1
  BOOST_TEST(at(s, n - 1) == -3.f);       // stage 1: 1 + 2
  BOOST_TEST(s.push(3, 0, 0, test::filled(n / 2, 1.f)).late);
}

namespace {

// Note [Stragglers outside the bound]: ssp with bound `staleness`, plain SGD at lr 1.
shard_core ssp_shard(std::uint32_t members, std::int32_t staleness) {
  shard_config cfg;
  cfg.mode = sync_mode::ssp;
  cfg.staleness = staleness;
  cfg.rule = async_rule::none;
  cfg.optimizer = optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  shard_core core(cfg, tensor({n}));
  core.start(ranks(members));
  return core;
}

// Member w pushes its next `count` clocks, each computed on the version it saw (base).
void push_clocks(shard_core& s, std::uint32_t w, std::int64_t from, std::int64_t count) {
  for (std::int64_t c = from; c < from + count; ++c) BOOST_TEST_REQUIRE(!s.push(w, c, s.version(), filled(0.f)).error);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_named_straggler_no_longer_holds_the_others) {
  auto s = ssp_shard(3, 1);
  push_clocks(s, 0, 0, 2);
  push_clocks(s, 1, 0, 2);
  // Member 2 has finished nothing: a pull at clock 2 needs clock 1 of everyone.
  BOOST_TEST((s.pull(0, 2, 7).decision == shard_core::pull_decision::hold));
  s.set_straggler(2, true);
  BOOST_TEST(s.straggler(2));
  BOOST_TEST(s.take_released() == std::vector<shard_core::token>{7});
  // The bound still holds between the others: member 1 at clock 4 waits for member 0's 3.
  push_clocks(s, 1, 2, 2);
  BOOST_TEST((s.pull(1, 4, 8).decision == shard_core::pull_decision::hold));
  push_clocks(s, 0, 2, 1);
  BOOST_TEST(s.take_released() == std::vector<shard_core::token>{8});
}

BOOST_AUTO_TEST_CASE(a_straggler_gradient_applies_at_lr_over_its_staleness) {
  auto s = ssp_shard(3, 1);
  s.set_straggler(2, true);
  push_clocks(s, 0, 0, 2);
  push_clocks(s, 1, 0, 2);  // version 4; member 2 pulled version 0
  BOOST_TEST(!s.push(2, 0, 0, filled(1.f)).error);
  BOOST_TEST(at(s, 0) == -0.25f, tt::tolerance(1e-6f));  // lr 1 / staleness 4
  // A member inside the bound keeps the schedule's lr, stale as its gradient is.
  BOOST_TEST(!s.push(0, 2, 0, filled(1.f)).error);
  BOOST_TEST(at(s, 0) == -1.25f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(a_cleared_straggler_counts_again_only_once_it_has_caught_up) {
  auto s = ssp_shard(3, 1);
  s.set_straggler(2, true);
  push_clocks(s, 0, 0, 3);
  push_clocks(s, 1, 0, 3);
  s.set_straggler(2, false);  // still 3 clocks behind: left out, so nobody waits for it
  BOOST_TEST(s.straggler(2));
  BOOST_TEST((s.pull(0, 4, 1).decision == shard_core::pull_decision::answer));
  push_clocks(s, 2, 0, 2);
  BOOST_TEST(s.straggler(2));
  push_clocks(s, 2, 2, 1);  // level with the slowest of the others
  BOOST_TEST(!s.straggler(2));
  push_clocks(s, 0, 3, 2);
  BOOST_TEST((s.pull(0, 5, 2).decision == shard_core::pull_decision::hold));  // needs clock 4 of member 2
  push_clocks(s, 2, 3, 1);
  BOOST_TEST(s.take_released().empty());  // and of member 1
  push_clocks(s, 1, 3, 1);
  BOOST_TEST(s.take_released() == std::vector<shard_core::token>{2});
}

BOOST_AUTO_TEST_CASE(a_straggler_level_with_the_others_is_cleared_at_once) {
  auto s = ssp_shard(2, 1);
  s.set_straggler(1, true);
  s.set_straggler(1, false);
  BOOST_TEST(!s.straggler(1));
}

BOOST_AUTO_TEST_CASE(only_ssp_leaves_stragglers_out_and_only_of_live_members) {
  for (sync_mode mode : {sync_mode::sync, sync_mode::async}) {
    auto s = make_shard(async_rule::none, 2, 0.f, mode);
    s.set_straggler(1, true);
    BOOST_TEST(!s.straggler(1));
  }
  auto s = ssp_shard(3, 1);
  s.set_straggler(7, true);  // not a member: nothing happens
  BOOST_TEST(!s.straggler(7));
  s.member_left(2);
  s.set_straggler(2, true);
  BOOST_TEST(!s.straggler(2));
  // Every member named: the bound falls back to the slowest of them.
  s.set_straggler(0, true);
  s.set_straggler(1, true);
  push_clocks(s, 0, 0, 2);
  BOOST_TEST((s.pull(0, 2, 3).decision == shard_core::pull_decision::hold));
}
