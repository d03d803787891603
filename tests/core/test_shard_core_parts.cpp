// Tests for core/shard_core.cpp's parts (a key-value job's shard), step by step and without
// CAF (Note [Rounds per part]):
// sync sums each part's round in rank order and holds a pull until the member's own
// pushes are applied; a member may push a round ahead; async applies on arrival; ssp
// holds exactly the pulls past the bound; a held pull the shell cancels is forgotten; without a server optimizer a part stores the
// round's sum (sync) or the latest gradient (async); a member that leaves closes rounds
// and drops its held pulls; bad gradients and unknown parts are refused and change nothing,
// and a push of several parts is applied whole or not at all;
// a new learning rate keeps the optimizer's momentum, a new rule starts it afresh;
// --async-rule lowers async and ssp's momentum by the live members (Note [Momentum of
// asynchrony]) and leaves sync alone; a value
// lent to a reply keeps what it held while updates go to a copy (Note [Lent values] in
// core/lendable_tensor.hpp).
#define BOOST_TEST_MODULE shard_core_parts
#include <boost/test/unit_test.hpp>

#include <limits>

#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;
namespace tt = boost::test_tools;

namespace {

constexpr std::int64_t n = 6;
const kv_part_id part_a = make_part_id(0, 0), part_b = make_part_id(1, 0);

kv_optimizer plain_sgd() {  // lr 1, no momentum: an update subtracts the gradient
  return {optimizer_config{optimizer_kind::sgd, 0.f, false, 0.f},
          lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f}};
}

// A key-value job's shard config: the rule keeps the user's lr, and `opt` is the shards'
// optimizer (none: parts store what the workers push).
shard_config kv_config(sync_mode mode, std::optional<kv_optimizer> opt, std::int32_t staleness = 0) {
  shard_config cfg;
  cfg.mode = mode;
  cfg.staleness = staleness;
  cfg.rule_keeps_lr = true;
  cfg.has_optimizer = opt.has_value();
  if (opt) {
    cfg.optimizer = opt->config;
    cfg.schedule = opt->schedule;
  }
  return cfg;
}

shard_core make(sync_mode mode, std::optional<kv_optimizer> opt = plain_sgd(), std::int32_t staleness = 0) {
  shard_core core(kv_config(mode, opt, staleness));
  core.start({0, 1, 2});
  BOOST_REQUIRE(!core.define(part_a, "s:a", tensor({n})));
  BOOST_REQUIRE(!core.define(part_b, "s:b", tensor({n})));
  return core;
}

tensor filled(float v) { return test::filled(n, v); }

float at(const shard_core& c, kv_part_id p, int i = 0) { return c.value(p).data<float>()[i]; }

}  // namespace

BOOST_AUTO_TEST_CASE(sync_sums_a_round_in_rank_order_whatever_the_arrival_order) {
  tensor g0 = test::random_tensor({n}, 1, 1e8f), g1 = test::random_tensor({n}, 2),
         g2 = test::random_tensor({n}, 3, 1e-7f);
  auto a = make(sync_mode::sync), b = make(sync_mode::sync);
  a.push_part(0, part_a, 0, g0), a.push_part(1, part_a, 0, g1), a.push_part(2, part_a, 0, g2);
  b.push_part(2, part_a, 0, g2), b.push_part(0, part_a, 0, g0), b.push_part(1, part_a, 0, g1);
  BOOST_TEST(a.version(part_a) == 1);
  BOOST_TEST(a.version(part_b) == 0);  // every part has its own rounds
  BOOST_TEST(same_bits(a.value(part_a), b.value(part_a)));
  for (int i = 0; i < n; ++i) {
    const float expect = -((g0.data<float>()[i] + g1.data<float>()[i]) + g2.data<float>()[i]);
    BOOST_TEST(at(a, part_a, i) == expect);
  }
}

BOOST_AUTO_TEST_CASE(sync_holds_a_pull_until_the_members_own_push_is_applied) {
  auto c = make(sync_mode::sync);
  BOOST_TEST((c.pull_part(0, part_a, 10).decision == shard_core::pull_decision::answer));  // nothing pushed yet
  c.push_part(0, part_a, 0, filled(1.f));
  BOOST_TEST((c.pull_part(0, part_a, 11).decision == shard_core::pull_decision::hold));
  c.push_part(1, part_a, 0, filled(1.f));
  BOOST_TEST(c.take_released().empty());
  c.push_part(2, part_a, 0, filled(1.f));
  BOOST_TEST((c.take_released() == std::vector<shard_core::token>{11}));
  BOOST_TEST(at(c, part_a) == -3.f);
}

BOOST_AUTO_TEST_CASE(a_held_pull_cancelled_is_neither_released_nor_counted) {
  auto c = make(sync_mode::sync);
  c.push_part(0, part_a, 0, filled(1.f));
  BOOST_TEST((c.pull_part(0, part_a, 11).decision == shard_core::pull_decision::hold));
  BOOST_TEST((c.pull_part(0, part_b, 12).decision == shard_core::pull_decision::answer));
  BOOST_TEST(c.held() == 1u);
  c.cancel_pull(11);  // a later part of the same pull was refused
  c.cancel_pull(99);  // a token the core never held: nothing happens
  BOOST_TEST(c.held() == 0u);
  const auto before = c.counters().pulls_held;
  c.push_part(1, part_a, 0, filled(1.f)), c.push_part(2, part_a, 0, filled(1.f));
  BOOST_TEST(c.version(part_a) == 1);
  BOOST_TEST(c.take_released().empty());
  BOOST_TEST(c.counters().pulls_held == before);
}

BOOST_AUTO_TEST_CASE(sync_lets_a_member_push_a_round_ahead) {
  auto c = make(sync_mode::sync);
  c.push_part(0, part_a, 0, filled(1.f));
  auto ahead = c.push_part(0, part_a, 0, filled(10.f));  // round 1 before round 0 closed
  BOOST_TEST(!ahead.error);
  BOOST_TEST(ahead.staleness == 1);  // computed on version 0, for round 1
  c.push_part(1, part_a, 0, filled(1.f)), c.push_part(2, part_a, 0, filled(1.f));
  BOOST_TEST(c.version(part_a) == 1);
  BOOST_TEST(at(c, part_a) == -3.f);
  c.push_part(1, part_a, 1, filled(10.f)), c.push_part(2, part_a, 1, filled(10.f));
  BOOST_TEST(c.version(part_a) == 2);
  BOOST_TEST(at(c, part_a) == -33.f);
}

BOOST_AUTO_TEST_CASE(async_applies_on_arrival_and_measures_staleness) {
  auto c = make(sync_mode::async);
  auto first = c.push_part(1, part_a, 0, filled(1.f));
  BOOST_TEST(first.version == 1);
  BOOST_TEST(first.staleness == 0);
  auto second = c.push_part(0, part_a, 0, filled(2.f));  // computed on version 0, applied on 1
  BOOST_TEST(second.staleness == 1);
  BOOST_TEST(at(c, part_a) == -3.f);
  BOOST_TEST((c.pull_part(2, part_a, 1).decision == shard_core::pull_decision::answer));
}

BOOST_AUTO_TEST_CASE(ssp_holds_exactly_the_pulls_past_the_bound) {
  auto c = make(sync_mode::ssp, plain_sgd(), 1);
  c.push_part(0, part_a, 0, filled(1.f));
  BOOST_TEST((c.pull_part(0, part_a, 1).decision == shard_core::pull_decision::answer));  // 1 ahead: within the bound
  c.push_part(0, part_a, 1, filled(1.f));
  BOOST_TEST((c.pull_part(0, part_a, 2).decision == shard_core::pull_decision::hold));  // 2 ahead of ranks 1 and 2
  c.push_part(1, part_a, 2, filled(1.f));
  BOOST_TEST(c.take_released().empty());
  c.push_part(2, part_a, 3, filled(1.f));
  BOOST_TEST((c.take_released() == std::vector<shard_core::token>{2}));
}

BOOST_AUTO_TEST_CASE(without_a_server_optimizer_parts_store_what_workers_update_with) {
  auto s = make(sync_mode::sync, std::nullopt);
  s.push_part(0, part_a, 0, filled(1.f)), s.push_part(1, part_a, 0, filled(2.f)), s.push_part(2, part_a, 0, filled(4.f));
  BOOST_TEST(at(s, part_a) == 7.f);  // the round's sum
  auto a = make(sync_mode::async, std::nullopt);
  a.push_part(0, part_a, 0, filled(1.f)), a.push_part(1, part_a, 0, filled(5.f));
  BOOST_TEST(at(a, part_a) == 5.f);  // the latest gradient
  a.set_optimizer(plain_sgd());
  a.push_part(2, part_a, 0, filled(2.f));
  BOOST_TEST(at(a, part_a) == 3.f);
}

BOOST_AUTO_TEST_CASE(a_new_learning_rate_keeps_the_momentum_and_a_new_rule_starts_afresh) {
  auto momentum = [](float lr) {
    return kv_optimizer{optimizer_config{optimizer_kind::sgd, 0.5f, false, 0.f},
                        lr_schedule{lr_schedule_kind::constant, lr, 0, 1, 0.f}};
  };
  auto a = make(sync_mode::async, momentum(1.f));
  a.push_part(0, part_a, 0, filled(1.f));  // velocity 1, value -1
  a.set_optimizer(momentum(0.5f));    // a scheduler's step: only the learning rate changes
  a.push_part(0, part_a, 1, filled(1.f));  // velocity 0.5 * 1 + 1 = 1.5, value -1 - 0.5 * 1.5
  BOOST_TEST(at(a, part_a) == -1.75f);
  auto b = make(sync_mode::async, momentum(1.f));
  b.push_part(0, part_a, 0, filled(1.f));
  auto other = momentum(0.5f);
  other.config.momentum = 0.25f;  // another rule: the velocity starts at zero
  b.set_optimizer(other);
  b.push_part(0, part_a, 1, filled(1.f));  // velocity 1, value -1 - 0.5 * 1
  BOOST_TEST(at(b, part_a) == -1.5f);
}

// Note [Momentum of asynchrony]: three live members pushing on arrival make the server's
// SGD momentum 1 - 3 (1 - 0.9) = 0.7 (0.8 once one leaves); sync and --async-rule none
// keep 0.9.
BOOST_AUTO_TEST_CASE(async_rules_lower_the_momentum_by_the_live_members) {
  const kv_optimizer heavy{optimizer_config{optimizer_kind::sgd, 0.9f, false, 0.f},
                           lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f}};
  auto twice = [&](sync_mode mode, async_rule rule, bool one_leaves) {
    shard_config cfg = kv_config(mode, heavy, 1000);
    cfg.rule = rule;
    shard_core c(cfg);
    c.start({0, 1, 2});
    BOOST_REQUIRE(!c.define(part_a, "s:a", tensor({n})));
    if (one_leaves) c.member_left(2);
    for (std::int64_t round = 0; round < 2; ++round)
      for (std::uint32_t m = 0; m < (mode == sync_mode::sync ? 3u : 1u); ++m)
        BOOST_REQUIRE(!c.push_part(m, part_a, round, filled(1.f)).error);
    return at(c, part_a);
  };
  // velocity 1 then mu + 1; the value -1 - (mu + 1)
  BOOST_TEST(twice(sync_mode::async, async_rule::momentum, false) == -1.f - (0.7f + 1.f), tt::tolerance(1e-6f));
  BOOST_TEST(twice(sync_mode::ssp, async_rule::dcasgd, false) == -1.f - (0.7f + 1.f), tt::tolerance(1e-6f));
  BOOST_TEST(twice(sync_mode::async, async_rule::momentum, true) == -1.f - (0.8f + 1.f), tt::tolerance(1e-6f));
  BOOST_TEST(twice(sync_mode::async, async_rule::none, false) == -1.f - (0.9f + 1.f), tt::tolerance(1e-6f));
  // sync: rounds of three summed gradients (3), velocity 3 then 0.9 * 3 + 3
  BOOST_TEST(twice(sync_mode::sync, async_rule::momentum, false) == -3.f - (2.7f + 3.f), tt::tolerance(1e-6f));
  // Plain SGD: the rule would scale the lr by 1/3 (Note [Momentum of asynchrony]); the
  // user's lr stands: two steps of the gradient.
  shard_config plain = kv_config(sync_mode::async, plain_sgd());
  plain.rule = async_rule::momentum;
  shard_core c(plain);
  c.start({0, 1, 2});
  BOOST_REQUIRE(!c.define(part_a, "s:a", tensor({n})));
  c.push_part(0, part_a, 0, filled(1.f));
  c.push_part(1, part_a, 0, filled(1.f));
  BOOST_TEST(at(c, part_a) == -2.f);
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_closes_its_rounds_and_drops_its_pulls) {
  auto c = make(sync_mode::sync);
  c.push_part(0, part_a, 0, filled(1.f)), c.push_part(2, part_a, 0, filled(1.f));
  BOOST_TEST((c.pull_part(0, part_a, 5).decision == shard_core::pull_decision::hold));
  c.push_part(2, part_b, 0, filled(1.f));
  BOOST_TEST((c.pull_part(2, part_b, 6).decision == shard_core::pull_decision::hold));
  c.member_left(2);
  BOOST_TEST((c.take_dropped() == std::vector<shard_core::token>{6}));
  BOOST_TEST(c.version(part_a) == 0);  // rank 1 has not pushed yet
  c.member_left(1);
  BOOST_TEST(c.version(part_a) == 1);  // closed with the gradients of 0 and 2
  BOOST_TEST((c.take_released() == std::vector<shard_core::token>{5}));
  BOOST_TEST(at(c, part_a) == -2.f);
  BOOST_TEST(c.live_members() == 1u);
}

BOOST_AUTO_TEST_CASE(a_member_joining_a_running_job_starts_at_the_open_round) {
  auto c = make(sync_mode::sync);
  for (std::uint32_t r = 0; r < 3; ++r) c.push_part(r, part_a, 0, filled(1.f));
  c.member_joined(3);
  c.push_part(3, part_a, 1, filled(1.f));
  for (std::uint32_t r = 0; r < 3; ++r) c.push_part(r, part_a, 1, filled(1.f));
  BOOST_TEST(c.version(part_a) == 2);
  BOOST_TEST(at(c, part_a) == -7.f);
}

BOOST_AUTO_TEST_CASE(bad_gradients_are_refused_and_change_nothing) {
  auto c = make(sync_mode::async);
  tensor nan = filled(1.f);
  nan.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  auto r1 = c.push_part(0, part_a, 0, nan);
  BOOST_REQUIRE(r1.error);
  BOOST_TEST((r1.error->code == errc::not_finite));
  BOOST_TEST(r1.error->detail.find("\"a\"") != std::string::npos);
  auto r2 = c.push_part(0, part_a, 0, tensor({n + 1}));
  BOOST_REQUIRE(r2.error);
  BOOST_TEST((r2.error->code == errc::bad_shape));
  auto r3 = c.push_part(7, part_a, 0, filled(1.f));
  BOOST_REQUIRE(r3.error);
  BOOST_TEST((r3.error->code == errc::not_member));
  auto r4 = c.push_part(0, make_part_id(9, 0), 0, filled(1.f));
  BOOST_REQUIRE(r4.error);
  BOOST_TEST((r4.error->code == errc::bad_shard));
  BOOST_TEST((c.pull_part(0, make_part_id(9, 0), 1).decision == shard_core::pull_decision::reject));
  BOOST_TEST(at(c, part_a) == 0.f);
  BOOST_TEST(c.version(part_a) == 0);
  // A refused push does not count as one of the member's pushes.
  c.push_part(0, part_a, 0, filled(1.f));
  BOOST_TEST(c.version(part_a) == 1);
}

BOOST_AUTO_TEST_CASE(a_push_of_several_parts_is_applied_whole_or_not_at_all) {
  auto c = make(sync_mode::async);
  tensor nan = filled(1.f);
  nan.data<float>()[5] = std::numeric_limits<float>::infinity();
  const tensor one = filled(1.f), two = filled(2.f);
  // Part b's gradient is refused, so part a, which came first and is fine, is not applied.
  auto refused = c.push_parts(0, {part_a, part_b}, {0, 0}, {one.view(), nan.view()});
  BOOST_REQUIRE(refused.error);
  BOOST_TEST((refused.error->code == errc::not_finite));
  BOOST_TEST(refused.error->detail.find("\"b\"") != std::string::npos);
  BOOST_TEST(refused.versions.empty());
  BOOST_TEST(at(c, part_a) == 0.f);
  BOOST_TEST(c.version(part_a) == 0);
  // A part named twice, and counts that disagree, are malformed; nothing changes.
  auto twice = c.push_parts(0, {part_a, part_a}, {0, 0}, {one.view(), one.view()});
  BOOST_REQUIRE(twice.error);
  BOOST_TEST((twice.error->code == errc::malformed));
  BOOST_TEST((c.push_parts(0, {part_a}, {}, {one.view()}).error->code == errc::malformed));
  BOOST_TEST(c.version(part_a) == 0);
  // A good one applies every part: lr 1 subtracts each gradient.
  auto ok = c.push_parts(0, {part_a, part_b}, {0, 0}, {one.view(), two.view()});
  BOOST_REQUIRE(!ok.error);
  BOOST_TEST(ok.versions == (std::vector<std::int64_t>{1, 1}));
  BOOST_TEST(at(c, part_a) == -1.f);
  BOOST_TEST(at(c, part_b) == -2.f);
}

BOOST_AUTO_TEST_CASE(the_first_definition_wins_and_rows_gather_in_order) {
  shard_core c(kv_config(sync_mode::async, std::nullopt));
  c.start({0});
  tensor first = test::vec({1, 2, 3, 4, 5, 6});
  BOOST_TEST(!c.define(part_a, "s:a", first));
  BOOST_TEST(!c.define(part_a, "s:a", filled(9.f)));
  auto other = c.define(part_a, "s:a", tensor({4}));
  BOOST_REQUIRE(other);
  BOOST_TEST((other->code == errc::bad_shape));
  tensor rows({4});
  c.gather_rows(part_a, {2, 0}, 2, rows);  // rows of 2 elements: row 2 is {5, 6}
  BOOST_TEST(same_bits(rows, test::vec({5, 6, 1, 2})));
  BOOST_TEST(!c.started() == false);
}

BOOST_AUTO_TEST_CASE(a_lent_value_keeps_what_it_held_while_updates_go_to_a_copy) {
  auto c = make(sync_mode::async);
  c.push_part(0, part_a, 0, filled(-1.f));  // value 1 everywhere
  const std::byte* before = c.value(part_a).bytes();
  c.push_part(0, part_a, 1, filled(-1.f));  // nothing lent: updated in place
  BOOST_TEST(c.value(part_a).bytes() == before);
  BOOST_TEST(at(c, part_a) == 2.f);

  tensor lent = c.lend_value(part_a);  // what a reply carries: the value's own memory
  BOOST_TEST(lent.bytes() == before);
  BOOST_TEST(lent.numel() == n);
  c.push_part(1, part_a, 2, filled(-3.f));  // an update overtakes the reply
  BOOST_TEST(at(c, part_a) == 5.f);
  BOOST_TEST(c.value(part_a).bytes() != before);
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(lent.data<float>()[i] == 2.f);  // not torn, not changed

  const std::byte* now = c.value(part_a).bytes();
  lent = tensor();  // the reply is gone: the next update is in place again
  c.push_part(1, part_a, 3, filled(-1.f));
  BOOST_TEST(c.value(part_a).bytes() == now);
  BOOST_TEST(at(c, part_a) == 6.f);
}

// Note [Backup workers], for a user's loop: with one backup a part's round closes with two
// of three pushes; the third, late, is dropped without an error, changes nothing, and its
// sender goes on in the open round (its pull is answered at once).
BOOST_AUTO_TEST_CASE(a_backup_worker_round_closes_without_the_slowest_push_and_drops_it) {
  shard_config cfg = kv_config(sync_mode::sync, plain_sgd());
  cfg.backup_workers = 1;
  shard_core c(cfg);
  c.start({0, 1, 2});
  BOOST_REQUIRE(!c.define(part_a, "s:a", tensor({n})));
  c.push_part(0, part_a, 0, filled(1.f));
  c.push_part(1, part_a, 0, filled(2.f));
  BOOST_TEST(c.version(part_a) == 1);  // two of three
  BOOST_TEST(at(c, part_a) == -3.f);
  const auto late = c.push_part(2, part_a, 0, filled(100.f));
  BOOST_TEST(!late.error);
  BOOST_TEST(late.version == 1);
  BOOST_TEST(at(c, part_a) == -3.f);
  BOOST_TEST(c.counters().late == 1);
  BOOST_TEST((c.pull_part(2, part_a, 9).decision == shard_core::pull_decision::answer));
  // Its next push belongs to the open round, with everyone else's.
  c.push_part(2, part_a, 1, filled(4.f));
  c.push_part(0, part_a, 1, filled(1.f));
  BOOST_TEST(c.version(part_a) == 2);
  BOOST_TEST(at(c, part_a) == -8.f);
}

// Note [Delay compensation], for a user's loop: a member's gradient of a part is
// compensated for what moved since its pull of the whole part was answered. Two members,
// momentum 0 (the user's lr 1 stands), lambda 0.5.
BOOST_AUTO_TEST_CASE(dcasgd_compensates_a_part_for_what_moved_since_the_members_pull) {
  shard_config cfg = kv_config(sync_mode::async, plain_sgd());
  cfg.rule = async_rule::dcasgd;
  cfg.dc_lambda = 0.5f;
  shard_core dc(cfg), plain(kv_config(sync_mode::async, plain_sgd()));
  for (auto* c : {&dc, &plain}) {
    c->start({0, 1});
    BOOST_REQUIRE(!c->define(part_a, "s:a", tensor({n})));
    c->answered(0, part_a);               // member 0 holds the value 0
    c->push_part(1, part_a, 0, filled(1.f));  // no pull of its own: as it is; value -1
    c->push_part(0, part_a, 0, filled(2.f));  // 2 + 0.5 * 4 * (-1 - 0) = 0 with dcasgd
  }
  BOOST_TEST(at(dc, part_a) == -1.f);
  BOOST_TEST(at(plain, part_a) == -3.f);
}
