// Tests for tensor/optimizer.cpp: Adam and AdamW through optimizer_state against values
// computed by hand, optimizer_state bookkeeping, the state a checkpoint keeps and restores, and the
// schedules.
#define BOOST_TEST_MODULE optimizer
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <utility>

#include "tensor/optimizer.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::vec;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(adam_first_step_moves_by_lr_times_sign) {
  // With bias correction, Adam's first step is lr * g / (|g| + eps) per element.
  optimizer_config cfg;
  cfg.kind = optimizer_kind::adam;
  optimizer_state opt(cfg, 3);
  tensor p = vec({1.f, 1.f, 1.f}), g = vec({0.3f, -4.f, 0.f});
  opt.step(p, g, 0.01f);
  BOOST_TEST(opt.steps() == 1);
  BOOST_TEST(p.data<float>()[0] == 0.99f, tt::tolerance(1e-5f));
  BOOST_TEST(p.data<float>()[1] == 1.01f, tt::tolerance(1e-5f));
  BOOST_TEST(p.data<float>()[2] == 1.f);
}

namespace {

// Adam's two steps (lr 0.1, default betas and eps) on the gradients 1 then 3, by hand in
// double: m = 0.9 m + 0.1 g, v = 0.999 v + 0.001 g^2, each bias-corrected.
std::pair<double, double> adam_steps_on_1_then_3() {
  const double m1 = 0.1, v1 = 0.001, m2 = 0.9 * m1 + 0.1 * 3, v2 = 0.999 * v1 + 0.001 * 9;
  return {0.1 * (m1 / 0.1) / (std::sqrt(v1 / 0.001) + 1e-8),
          0.1 * (m2 / (1 - 0.81)) / (std::sqrt(v2 / (1 - 0.998001)) + 1e-8)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(adam_second_step_by_hand) {
  optimizer_config cfg;
  cfg.kind = optimizer_kind::adam;
  optimizer_state opt(cfg, 1);
  tensor p = vec({0.f});
  opt.step(p, vec({1.f}), 0.1f);
  opt.step(p, vec({3.f}), 0.1f);
  const auto [step1, step2] = adam_steps_on_1_then_3();
  BOOST_TEST(p.data<float>()[0] == -(step1 + step2), tt::tolerance(1e-5));
}

// AdamW shrinks the parameters by lr * weight_decay, then takes Adam's step without the
// decay in its gradient (PyTorch's AdamW); Adam with the same weight_decay adds it to the
// gradient instead, and lands elsewhere.
BOOST_AUTO_TEST_CASE(adamw_decays_the_parameters_apart_from_the_gradient) {
  optimizer_config cfg;
  cfg.kind = optimizer_kind::adamw;
  cfg.weight_decay = 0.5f;
  optimizer_state w(cfg, 1);
  BOOST_TEST(!w.slot(1).empty());  // Adam's two moments
  tensor p = vec({2.f});
  w.step(p, vec({1.f}), 0.1f);
  w.step(p, vec({3.f}), 0.1f);
  const auto [step1, step2] = adam_steps_on_1_then_3();
  const double after1 = 2.0 * (1 - 0.1 * 0.5) - step1;
  const double want = after1 * (1 - 0.1 * 0.5) - step2;
  BOOST_TEST(p.data<float>()[0] == want, tt::tolerance(1e-5));
  cfg.kind = optimizer_kind::adam;
  optimizer_state a(cfg, 1);
  tensor q = vec({2.f});
  a.step(q, vec({1.f}), 0.1f);
  a.step(q, vec({3.f}), 0.1f);
  BOOST_TEST(std::abs(q.data<float>()[0] - p.data<float>()[0]) > 0.05f);
}

BOOST_AUTO_TEST_CASE(state_steps_sgd_through_the_functor) {
  optimizer_config cfg;  // sgd, momentum 0.9
  optimizer_state opt(cfg, 2);
  tensor p = vec({1.f, 1.f});
  opt.step(p, vec({1.f, 2.f}), 0.5f);
  BOOST_TEST(p.data<float>()[0] == 0.5f);
  BOOST_TEST(p.data<float>()[1] == 0.f);
  BOOST_CHECK_THROW(opt.step(tensor({3}), tensor({3}), 0.1f), contract_error);
}

BOOST_AUTO_TEST_CASE(a_restored_state_steps_bitwise_as_the_one_it_was_copied_from) {
  optimizer_config cfg;
  cfg.kind = optimizer_kind::adam;
  optimizer_state a(cfg, 3), b(cfg, 3);
  tensor pa = vec({1.f, 2.f, 3.f});
  a.step(pa, vec({0.5f, -1.f, 2.f}), 0.1f);
  a.step(pa, vec({0.25f, 1.f, -3.f}), 0.1f);
  tensor pb = vec({0.f, 0.f, 0.f});
  copy(pb, pa);
  BOOST_REQUIRE(!b.restore(a.steps(), a.slot(0), a.slot(1)));
  BOOST_TEST(b.steps() == 2);
  a.step(pa, vec({1.f, 1.f, 1.f}), 0.1f);
  b.step(pb, vec({1.f, 1.f, 1.f}), 0.1f);
  BOOST_TEST(test::same_bits(pa, pb));
  // What does not fit is refused, and changes nothing.
  BOOST_TEST(b.restore(1, tensor({2}), tensor({3})).has_value());
  BOOST_TEST(b.restore(1, tensor({3}), tensor()).has_value());  // Adam keeps two slots
  BOOST_TEST(b.restore(-1, tensor({3}), tensor({3})).has_value());
  BOOST_TEST(b.steps() == 3);
  optimizer_state sgd(optimizer_config{}, 3);
  BOOST_TEST(sgd.slot(1).empty());
  BOOST_TEST(sgd.restore(4, tensor({3}), tensor({3})).has_value());  // a second slot SGD does not keep
  BOOST_TEST(!sgd.restore(4, tensor({3}), tensor()).has_value());
  BOOST_TEST(sgd.steps() == 4);
}

BOOST_AUTO_TEST_CASE(parse_names) {
  BOOST_TEST((*parse_optimizer_kind("adam") == optimizer_kind::adam));
  BOOST_TEST((*parse_optimizer_kind("adamw") == optimizer_kind::adamw));
  BOOST_TEST(name_of(optimizer_kind::adamw) == "adamw");
  BOOST_TEST(parse_optimizer_kind("rmsprop").error().message.find("sgd, adam or adamw") != std::string::npos);
  BOOST_TEST((*parse_lr_schedule_kind("cosine") == lr_schedule_kind::cosine));
  BOOST_TEST(!parse_lr_schedule_kind("exp").has_value());
}

BOOST_AUTO_TEST_CASE(parse_betas) {
  const auto b = parse_adam_betas("0.9,0.99");
  BOOST_REQUIRE(b.has_value());
  BOOST_TEST(b->beta1 == 0.9f);
  BOOST_TEST(b->beta2 == 0.99f);
  BOOST_TEST(parse_adam_betas("0,0")->beta2 == 0.f);
  for (const char* text :
       {"", "0.9", "0.9,", ",0.99", "0.9;0.99", "0.9,1", "-0.1,0.9", "0.9,0.99,0.5", "0.9,0.99x", "nan,0.9", "a,b"}) {
    const auto r = parse_adam_betas(text);
    BOOST_TEST_INFO(text);
    BOOST_REQUIRE(!r.has_value());
    BOOST_TEST(r.error().message.find("B1,B2") != std::string::npos);
    BOOST_TEST(r.error().message.find(std::string("'") + text + "'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(schedules) {
  lr_schedule s{lr_schedule_kind::cosine, 1.f, 10, 110, 0.f};
  BOOST_TEST(s.at(0) == 0.19f, tt::tolerance(1e-6f));   // warm-up starts at base/10
  BOOST_TEST(s.at(9) == 1.f, tt::tolerance(1e-6f));
  BOOST_TEST(s.at(10) == 1.f, tt::tolerance(1e-6f));
  BOOST_TEST(s.at(60) == 0.5f, tt::tolerance(1e-6f));   // half way through the cosine
  BOOST_TEST(s.at(110) == 0.f, tt::tolerance(1e-6f));
  BOOST_TEST(s.at(500) == 0.f, tt::tolerance(1e-6f));   // clamped after the end
  lr_schedule lin{lr_schedule_kind::linear, 2.f, 0, 100, 0.5f};
  BOOST_TEST(lin.at(50) == 1.5f, tt::tolerance(1e-6f));
  lr_schedule c{lr_schedule_kind::constant, 0.3f, 0, 100, 0.f};
  BOOST_TEST(c.at(99) == 0.3f);
}
