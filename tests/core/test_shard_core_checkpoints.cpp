// Tests for core/shard_core_checkpoints.cpp (Note [Checkpoint steps]): in sync a
// checkpoint falls due exactly when its round closes, at multiples of the interval and at
// epoch ends, once each; in async it falls due when the slowest live member reaches the
// step, including when a slow member leaves; a step the coordinator asks for falls due
// there, unless it has passed; the image holds the parameters, the
// optimizer's state and the version of that moment; a shard restored from an image and
// started at its clock goes on bitwise as the shard it was taken from.
#define BOOST_TEST_MODULE shard_core_checkpoints
#include <boost/test/unit_test.hpp>

#include <optional>

#include "core/shard_core.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;

namespace {

constexpr std::int64_t n = 8;

shard_config config(sync_mode mode, std::int64_t every, std::int64_t epoch_steps) {
  shard_config cfg;
  cfg.mode = mode;
  cfg.optimizer = optimizer_config{optimizer_kind::sgd, 0.9f, true, 0.f};  // momentum: state worth keeping
  cfg.schedule = lr_schedule{lr_schedule_kind::cosine, 0.1f, 2, 20, 0.f};
  cfg.ranges = {{0, 0, 0, n}};
  cfg.checkpoint_every = every;
  cfg.checkpoint_epoch_steps = epoch_steps;
  return cfg;
}

shard_core started(sync_mode mode, std::int64_t every = 0, std::int64_t epoch_steps = 0) {
  shard_core core(config(mode, every, epoch_steps), test::random_tensor({n}, 7));
  core.start({0, 1});
  return core;
}

tensor grad(int seed) { return test::random_tensor({n}, static_cast<std::uint64_t>(seed)); }

// One sync round: both members push their clock-`round` gradient.
void sync_round(shard_core& s, std::int64_t round) {
  s.push(0, round, round, grad(static_cast<int>(2 * round)));
  s.push(1, round, round, grad(static_cast<int>(2 * round + 1)));
}

}  // namespace

BOOST_AUTO_TEST_CASE(in_sync_a_checkpoint_falls_due_when_its_round_closes) {
  auto s = started(sync_mode::sync, 3, 5);  // every 3 steps, epochs of 5
  std::vector<std::int64_t> due;
  for (std::int64_t r = 0; r < 10; ++r) {
    s.push(0, r, r, grad(static_cast<int>(2 * r)));
    BOOST_TEST(!s.take_checkpoint_due().has_value());  // the round is still open
    s.push(1, r, r, grad(static_cast<int>(2 * r + 1)));
    if (auto d = s.take_checkpoint_due()) {
      BOOST_TEST(*d == s.version());  // exactly at the close
      due.push_back(*d);
    }
    BOOST_TEST(!s.take_checkpoint_due().has_value());  // taken once
  }
  BOOST_TEST(due == (std::vector<std::int64_t>{3, 5, 6, 9, 10}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(no_checkpoint_falls_due_without_a_plan) {
  auto s = started(sync_mode::sync);
  for (std::int64_t r = 0; r < 6; ++r) {
    sync_round(s, r);
    BOOST_TEST(!s.take_checkpoint_due().has_value());
  }
}

BOOST_AUTO_TEST_CASE(in_async_it_falls_due_when_the_slowest_member_reaches_the_step) {
  auto s = started(sync_mode::async, 2);
  for (int c = 0; c < 5; ++c) s.push(0, c, 0, grad(c));  // member 0 runs ahead
  BOOST_TEST(!s.take_checkpoint_due().has_value());
  s.push(1, 0, 0, grad(10));
  BOOST_TEST(!s.take_checkpoint_due().has_value());  // the slowest has finished 1
  s.push(1, 1, 0, grad(11));
  auto due = s.take_checkpoint_due();
  BOOST_REQUIRE(due.has_value());
  BOOST_TEST(*due == 2);
  const auto img = s.image(*due);
  BOOST_TEST(img.version == 7);  // member 0's five and member 1's two gradients are in it
  BOOST_TEST(img.step == 2);
  // The slow member leaves: the fast one's 5 steps pass the next due step, 4.
  s.member_left(1);
  due = s.take_checkpoint_due();
  BOOST_REQUIRE(due.has_value());
  BOOST_TEST(*due == 4);
}

BOOST_AUTO_TEST_CASE(a_step_the_coordinator_asks_for_falls_due_there_unless_it_has_passed) {
  for (sync_mode mode : {sync_mode::sync, sync_mode::async}) {
    auto s = started(mode);  // no steps of its own
    s.request_checkpoint(3);
    s.request_checkpoint(1);
    std::vector<std::int64_t> due;
    for (std::int64_t r = 0; r < 5; ++r) {
      sync_round(s, r);
      if (auto d = s.take_checkpoint_due()) due.push_back(*d);
      if (r == 3) s.request_checkpoint(2);  // passed already: not taken
    }
    BOOST_TEST(due == (std::vector<std::int64_t>{1, 3}), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(the_image_holds_the_state_of_its_moment) {
  auto s = started(sync_mode::sync, 2);
  sync_round(s, 0);
  sync_round(s, 1);
  BOOST_REQUIRE((s.take_checkpoint_due() == std::optional<std::int64_t>(2)));
  const shard_image img = s.image(2);
  BOOST_TEST(img.version == 2);
  BOOST_TEST(img.optimizer_steps == 2);
  BOOST_TEST(same_bits(img.params, s.params()));
  BOOST_TEST(img.slot2.empty());  // SGD keeps one slot
  BOOST_TEST((img.ranges == std::vector<std::pair<std::int64_t, std::int64_t>>{{0, n}}));
  sync_round(s, 2);  // the image is a copy: later updates leave it alone
  BOOST_TEST(!same_bits(img.params, s.params()));
}

BOOST_AUTO_TEST_CASE(a_restored_shard_goes_on_bitwise_as_the_one_it_was_taken_from) {
  for (sync_mode mode : {sync_mode::sync, sync_mode::async}) {
    auto a = started(mode, 3);
    for (std::int64_t r = 0; r < 3; ++r) sync_round(a, r);  // in async: each member's clock r
    const auto due = a.take_checkpoint_due();
    BOOST_REQUIRE((due == std::optional<std::int64_t>(3)));
    const shard_image img = a.image(3);
    // A fresh shard (other initial parameters) restored at clock 3.
    shard_core b(config(mode, 3, 0), test::random_tensor({n}, 99));
    BOOST_REQUIRE(!b.restore(img, 3));
    b.start({0, 1}, {}, 3);
    BOOST_TEST(b.version() == a.version());
    for (std::int64_t r = 3; r < 7; ++r) {
      sync_round(a, r);
      sync_round(b, r);
    }
    BOOST_TEST(same_bits(a.params(), b.params()));
    BOOST_TEST(a.version() == b.version());
    BOOST_TEST((b.take_checkpoint_due() == std::optional<std::int64_t>(6)));  // not 3 again
  }
}

BOOST_AUTO_TEST_CASE(an_image_that_does_not_fit_is_refused) {
  auto a = started(sync_mode::sync);
  shard_image img = a.image(0);
  img.params = tensor({n + 1});
  shard_core b(config(sync_mode::sync, 0, 0), tensor({n}));
  auto why = b.restore(img, 0);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("9 parameters") != std::string::npos);
  img = a.image(0);
  img.slot2 = tensor({n});  // Adam's second moment for an SGD shard
  why = b.restore(img, 0);
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST(why->find("SGD") != std::string::npos);
}
