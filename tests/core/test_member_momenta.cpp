// Tests for --async-rule dana (core/member_momenta.cpp, Note [Momentum per member]), by
// hand on a shard: each member steps with its own velocity and the parameters are kept a
// velocity ahead; a built-in job's push steps 1/N of the lr and a key-value job's the lr
// as sent; the optimizer's slot 0 is the sum of the velocities, which a leaver leaves and a
// checkpoint keeps; after a restore each member's first push starts from an equal share of
// it; one pusher alone steps plain SGD with the sum as its velocity, and pushers that
// come later start from shares of it; momentum 0, sync rounds and Adam are left alone.
#define BOOST_TEST_MODULE member_momenta
#include <boost/test/unit_test.hpp>

#include <numeric>
#include <vector>

#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

namespace {

constexpr std::int64_t n = 4;

std::vector<std::uint32_t> ranks(std::uint32_t count) {
  std::vector<std::uint32_t> r(count);
  std::iota(r.begin(), r.end(), 0u);
  return r;
}

// SGD at lr 1 under dana, no weight decay, parameters 0.
shard_config dana_config(float momentum, sync_mode mode = sync_mode::async, optimizer_kind kind = optimizer_kind::sgd) {
  shard_config cfg;
  cfg.mode = mode;
  cfg.rule = async_rule::dana;
  cfg.optimizer = optimizer_config{kind, momentum, false, 0.f};
  cfg.schedule = lr_schedule{lr_schedule_kind::constant, 1.f, 0, 1, 0.f};
  return cfg;
}

shard_core started(const shard_config& cfg, std::uint32_t members) {
  shard_core core(cfg, tensor({n}));
  core.start(ranks(members));
  return core;
}

tensor filled(float v) { return test::filled(n, v); }

float at(const shard_core& c, std::int64_t i = 0) { return c.params().data<float>()[i]; }
float velocity_sum(const shard_core& c) { return c.image(0).slot1.data<float>()[0]; }

}  // namespace

// Two members, momentum 0.5: each push steps lr / 2 by 2 v' - v with the pusher's own v.
BOOST_AUTO_TEST_CASE(each_member_steps_with_its_own_velocity_a_step_ahead) {
  auto c = started(dana_config(0.5f), 2);
  BOOST_TEST(!c.push(0, 0, 0, filled(1.f)).error);  // v0 = 1: -0.5 * 2
  BOOST_TEST(at(c) == -1.f, tt::tolerance(1e-6f));
  c.push(1, 0, 1, filled(1.f));  // v1 = 1 (not 0.5 * v0 + 1): -1 more
  BOOST_TEST(at(c) == -2.f, tt::tolerance(1e-6f));
  c.push(0, 1, 2, filled(1.f));  // v0 = 1.5: -0.5 * (3 - 1)
  BOOST_TEST(at(c) == -3.f, tt::tolerance(1e-6f));
  BOOST_TEST(velocity_sum(c) == 2.5f, tt::tolerance(1e-6f));
  BOOST_TEST(c.image(0).optimizer_steps == 3);
}

BOOST_AUTO_TEST_CASE(a_key_value_jobs_push_steps_the_lr_as_sent) {
  shard_config cfg = dana_config(0.5f);
  cfg.rule_keeps_lr = true;  // troupe.torch divides its pushes by the workers itself
  auto c = started(cfg, 2);
  c.push(0, 0, 0, filled(1.f));
  BOOST_TEST(at(c) == -2.f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(a_member_that_leaves_takes_its_velocity_out_of_the_sum) {
  auto c = started(dana_config(0.5f), 3);
  c.push(0, 0, 0, filled(1.f));
  c.push(1, 0, 1, filled(2.f));
  BOOST_TEST(velocity_sum(c) == 3.f, tt::tolerance(1e-6f));
  c.member_left(1);
  BOOST_TEST(velocity_sum(c) == 1.f, tt::tolerance(1e-6f));
  c.member_joined(1, 1);  // back afresh: zero velocity, so its push steps lr / 3 by 2 g
  const float before = at(c);
  c.push(1, 1, 2, filled(3.f));
  BOOST_TEST(at(c) == before - 2.f, tt::tolerance(1e-5f));
  BOOST_TEST(velocity_sum(c) == 4.f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(after_a_restore_each_member_starts_from_an_equal_share_of_the_sum) {
  auto c = started(dana_config(0.5f), 2);
  c.push(0, 0, 0, filled(1.f));
  c.push(1, 0, 1, filled(3.f));  // velocities 1 and 3
  const shard_image image = c.image(1);
  shard_core resumed(dana_config(0.5f), tensor({n}));
  BOOST_REQUIRE(!resumed.restore(image, 1));
  resumed.start(ranks(2), {}, 1);
  const float before = at(resumed);
  BOOST_TEST(before == at(c), tt::tolerance(1e-6f));
  resumed.push(0, 1, 2, filled(0.f));  // v = 4 / 2, v' = 1: -0.5 * (2 - 2)
  BOOST_TEST(at(resumed) == before, tt::tolerance(1e-6f));
  BOOST_TEST(velocity_sum(resumed) == 3.f, tt::tolerance(1e-6f));  // 1 + the unclaimed share 2
  resumed.push(1, 1, 3, filled(0.f));  // the same share for the second member
  BOOST_TEST(at(resumed) == before, tt::tolerance(1e-6f));
  BOOST_TEST(velocity_sum(resumed) == 2.f, tt::tolerance(1e-6f));  // 1 + 1
}

BOOST_AUTO_TEST_CASE(one_pusher_alone_steps_plain_sgd_and_later_pushers_share_its_velocity) {
  auto c = started(dana_config(0.5f), 2);
  c.member_left(1);
  c.push(0, 0, 0, filled(1.f));  // PyTorch's SGD: v = 1
  c.push(0, 1, 1, filled(1.f));  // v = 1.5
  BOOST_TEST(at(c) == -2.5f, tt::tolerance(1e-6f));
  BOOST_TEST(velocity_sum(c) == 1.5f, tt::tolerance(1e-6f));
  c.member_joined(1, 1);
  c.push(0, 2, 2, filled(0.f));  // v = 1.5 / 2, v' = 0.375: -0.5 * (0.75 - 0.75)
  c.push(1, 1, 3, filled(0.f));  // the same share, not half of the sum as it is now
  BOOST_TEST(at(c) == -2.5f, tt::tolerance(1e-6f));
  BOOST_TEST(velocity_sum(c) == 0.75f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(without_momentum_the_update_is_the_momentum_rules) {
  auto c = started(dana_config(0.f), 2);
  c.push(0, 0, 0, filled(1.f));
  c.push(0, 1, 1, filled(1.f));
  BOOST_TEST(at(c) == -1.f, tt::tolerance(1e-6f));  // twice lr / 2, nothing looked ahead
  shard_config kv = dana_config(0.f);
  kv.rule_keeps_lr = true;
  auto plain = started(kv, 2);
  plain.push(0, 0, 0, filled(1.f));
  plain.push(0, 1, 1, filled(1.f));
  BOOST_TEST(at(plain) == -2.f, tt::tolerance(1e-6f));  // a key-value job's plain SGD, as set
}

BOOST_AUTO_TEST_CASE(sync_rounds_and_adam_are_left_alone) {
  auto sync_c = started(dana_config(0.5f, sync_mode::sync), 2);
  sync_c.push(0, 0, 0, filled(1.f));
  sync_c.push(1, 0, 0, filled(1.f));
  BOOST_TEST(at(sync_c) == -2.f, tt::tolerance(1e-6f));  // the round's sum at lr 1, one velocity
  shard_config adam = dana_config(0.5f, sync_mode::async, optimizer_kind::adam);
  shard_config adam_plain = adam;
  adam_plain.rule = async_rule::none;
  auto a = started(adam, 2), b = started(adam_plain, 2);
  for (auto* c : {&a, &b}) {
    c->push(0, 0, 0, filled(1.f));
    c->push(1, 0, 1, filled(-0.5f));
  }
  for (std::int64_t i = 0; i < n; ++i) BOOST_TEST(at(a, i) == at(b, i));
}

// Two own velocities, then one member leaves: the other steps plain SGD from its own
// velocity alone, the sum of the velocities left.
BOOST_AUTO_TEST_CASE(a_pusher_left_alone_steps_plain_sgd_from_the_velocities_left) {
  auto c = started(dana_config(0.5f), 2);
  c.push(0, 0, 0, filled(1.f));  // v0 = 1
  c.push(1, 0, 1, filled(3.f));  // v1 = 3
  c.member_left(1);
  BOOST_TEST(velocity_sum(c) == 1.f, tt::tolerance(1e-6f));
  const float before = at(c);
  c.push(0, 1, 2, filled(1.f));  // PyTorch's SGD from v = 1: v = 1.5, -1.5
  BOOST_TEST(at(c) == before - 1.5f, tt::tolerance(1e-6f));
  BOOST_TEST(velocity_sum(c) == 1.5f, tt::tolerance(1e-6f));
}
