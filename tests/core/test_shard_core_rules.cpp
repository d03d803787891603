// Tests for core/shard_core_rules.cpp, by hand: --async-rule momentum lowers SGD's
// momentum (and past zero, the lr) by the live members that push on arrival, follows
// members that leave, and leaves sync rounds and Adam alone; dcasgd compensates a
// gradient for what moved since the sender's answered pull, piece by piece, and not for a
// member that has no answered pull.
#define BOOST_TEST_MODULE shard_core_rules
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <vector>

#include "core/shard_core.hpp"

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

tensor filled(float v) {
  tensor t({n});
  std::fill_n(t.data<float>(), n, v);
  return t;
}

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
  c.worker_left(2);
  c.worker_left(3);  // two pushers: momentum 0.8
  c.push(0, 0, 0, filled(1.f));
  c.push(1, 0, 0, filled(1.f));
  BOOST_TEST(at(c, 0) == -(1.f + 1.8f), tt::tolerance(1e-6f));
  c.worker_joined(2, 1);
  c.worker_joined(3, 1);  // four again: v = 0.6 * 1.8 + 1
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

BOOST_AUTO_TEST_CASE(a_member_that_rejoined_has_no_copy_until_its_next_pull) {
  auto dc = make_shard(async_rule::dcasgd, 2, 0.f);
  dc.answered(0);
  dc.push(1, 0, 0, filled(1.f));  // params -0.5
  dc.worker_left(0);
  dc.worker_joined(0, 1);
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
