// Tests for core/update_rules.cpp against hand-computed values: the critical-batch cap on
// the sync schedule, the momentum of asynchrony's correction, the warm-up of many
// asynchronous workers, DC-ASGD's compensation, and the rules' names.
#define BOOST_TEST_MODULE update_rules
#include <boost/test/unit_test.hpp>

#include "base/check.hpp"
#include "core/update_rules.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

namespace {

lr_schedule mlp_schedule() {  // the MLP's defaults on one worker: 469 steps an epoch, 5 epochs
  return lr_schedule{lr_schedule_kind::cosine, 0.05f, 235, 2345, 0.f};
}

tensor vec(std::initializer_list<float> v) {
  tensor t({static_cast<std::int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_round_trip_and_an_unknown_one_lists_the_choices) {
  for (auto r : {async_rule::none, async_rule::momentum, async_rule::dcasgd, async_rule::dana})
    BOOST_TEST((*parse_async_rule(name_of(r)) == r));
  auto bad = parse_async_rule("adagrad");
  BOOST_REQUIRE(!bad);
  BOOST_TEST(bad.error().message.find("none, momentum, dcasgd or dana") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(up_to_the_critical_batch_the_schedule_is_untouched) {
  const lr_schedule s = mlp_schedule();
  for (std::uint32_t workers : {1u, 2u, 4u}) {
    const lr_schedule c = cap_at_critical_batch(s, workers, 128, 512);
    BOOST_TEST(c.base == s.base);
    BOOST_TEST(c.warmup_steps == s.warmup_steps);
  }
  const lr_schedule uncapped = cap_at_critical_batch(s, 64, 128, 0);  // 0: linear scaling without a cap
  BOOST_TEST(uncapped.base == s.base);
}

BOOST_AUTO_TEST_CASE(past_it_the_lr_shrinks_and_the_warm_up_stretches_by_the_same_factor) {
  const lr_schedule s = mlp_schedule();
  const lr_schedule c16 = cap_at_critical_batch(s, 16, 128, 512);  // 2048 samples: a quarter
  BOOST_TEST(c16.base == 0.0125f, tt::tolerance(1e-7f));
  BOOST_TEST(c16.warmup_steps == 940);
  BOOST_TEST(c16.total_steps == s.total_steps);
  BOOST_TEST((c16.kind == s.kind));
  const lr_schedule c8 = cap_at_critical_batch(s, 8, 128, 512);
  BOOST_TEST(c8.base == 0.025f, tt::tolerance(1e-7f));
  BOOST_TEST(c8.warmup_steps == 470);
  // The warm-up never runs past the schedule's end.
  BOOST_TEST(cap_at_critical_batch(s, 1024, 128, 512).warmup_steps == s.total_steps);
}

BOOST_AUTO_TEST_CASE(the_cap_never_goes_below_what_one_worker_uses) {
  const lr_schedule s = mlp_schedule();
  BOOST_TEST(cap_at_critical_batch(s, 1, 2048, 512).base == s.base);  // one worker of a batch past the cap
  const lr_schedule two = cap_at_critical_batch(s, 2, 2048, 512);       // two of them: half, not a quarter
  BOOST_TEST(two.base == 0.025f, tt::tolerance(1e-7f));
}

BOOST_AUTO_TEST_CASE(asynchrony_lowers_the_momentum_by_what_n_workers_add) {
  const auto one = correct_for_asynchrony(0.9f, 1);
  BOOST_TEST(one.momentum == 0.9f);
  BOOST_TEST(one.lr_scale == 1.f);
  const auto four = correct_for_asynchrony(0.9f, 4);  // 1 - 4 * 0.1
  BOOST_TEST(four.momentum == 0.6f, tt::tolerance(1e-6f));
  BOOST_TEST(four.lr_scale == 1.f);
  const auto eight = correct_for_asynchrony(0.9f, 8);
  BOOST_TEST(eight.momentum == 0.2f, tt::tolerance(1e-5f));
  const auto ten = correct_for_asynchrony(0.9f, 10);  // used up (0.9f is a little below 0.9)
  BOOST_TEST(ten.momentum == 0.f, tt::tolerance(1e-5f));
  BOOST_TEST(ten.lr_scale == 1.f, tt::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(past_zero_momentum_the_lr_keeps_the_effective_step) {
  const auto sixteen = correct_for_asynchrony(0.9f, 16);  // lr / (16 * 0.1)
  BOOST_TEST(sixteen.momentum == 0.f);
  BOOST_TEST(sixteen.lr_scale == 0.625f, tt::tolerance(1e-6f));
  const auto plain = correct_for_asynchrony(0.f, 4);  // plain SGD: lr / N
  BOOST_TEST(plain.momentum == 0.f);
  BOOST_TEST(plain.lr_scale == 0.25f, tt::tolerance(1e-7f));
}

BOOST_AUTO_TEST_CASE(past_eight_asynchronous_workers_the_warm_up_stretches_by_n_over_8) {
  const lr_schedule s = mlp_schedule();
  for (std::uint32_t workers : {1u, 4u, 8u}) BOOST_TEST(warm_up_for_asynchrony(s, workers).warmup_steps == 235);
  const lr_schedule w16 = warm_up_for_asynchrony(s, 16);
  BOOST_TEST(w16.warmup_steps == 470);
  BOOST_TEST(w16.base == s.base);
  BOOST_TEST(w16.total_steps == s.total_steps);
  BOOST_TEST(warm_up_for_asynchrony(s, 12).warmup_steps == 353);  // 235 x 1.5 = 352.5
  BOOST_TEST(warm_up_for_asynchrony(s, 1000).warmup_steps == s.total_steps);  // never past the end
}

BOOST_AUTO_TEST_CASE(delay_compensation_by_hand) {
  const tensor g = vec({1.f, 2.f, -1.f}), now = vec({0.5f, 1.f, 0.f}), pulled = vec({0.f, 1.5f, 1.f});
  tensor out({3});
  compensate_delay(out, g, now, pulled, 0.5f);
  // g + 0.5 g^2 (now - pulled): 1 + 0.5*1*0.5, 2 + 0.5*4*(-0.5), -1 + 0.5*1*(-1)
  BOOST_TEST(out.data<float>()[0] == 1.25f);
  BOOST_TEST(out.data<float>()[1] == 1.f);
  BOOST_TEST(out.data<float>()[2] == -1.5f);
  tensor in_place = g;  // out may be g
  compensate_delay(in_place, in_place, now, pulled, 0.5f);
  BOOST_TEST(in_place.data<float>()[1] == 1.f);
  BOOST_CHECK_THROW(compensate_delay(out, g, vec({0.f}), pulled, 0.5f), contract_error);
}
