// Tests for client/optimizer_spec.cpp: a user's set_optimizer spec becomes the shards'
// kv_optimizer field for field, and every unusable setting is refused with a bad_job
// fault that names the setting, before anything reaches a shard.
#define BOOST_TEST_MODULE optimizer_spec
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "client/optimizer_spec.hpp"
#include "tests/support/local_store.hpp"

using namespace troupe;
using namespace troupe::kv;

namespace {

// The fault's detail when `spec` is refused; fails the test when it is accepted.
std::string refusal_of(const optimizer_spec& spec) {
  auto r = to_kv_optimizer(spec);
  const auto* f = std::get_if<fault>(&r);
  BOOST_REQUIRE_MESSAGE(f, "the spec was accepted");
  BOOST_TEST((f->code == errc::bad_job));
  return f->detail;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_setting_reaches_the_shards_optimizer) {
  optimizer_spec s;
  s.kind = "adamw";
  s.lr = 0.003f;
  s.momentum = 0.5f;
  s.nesterov = true;
  s.weight_decay = 0.01f;
  s.beta1 = 0.8f;
  s.beta2 = 0.99f;
  s.eps = 1e-6f;
  s.schedule = "cosine";
  s.warmup_updates = 10;
  s.total_updates = 500;
  s.final_fraction = 0.1f;
  auto r = to_kv_optimizer(s);
  const auto* o = std::get_if<kv_optimizer>(&r);
  BOOST_REQUIRE(o);
  BOOST_TEST((o->config.kind == optimizer_kind::adamw));
  BOOST_TEST(o->config.momentum == 0.5f);
  BOOST_TEST(o->config.nesterov);
  BOOST_TEST(o->config.weight_decay == 0.01f);
  BOOST_TEST(o->config.beta1 == 0.8f);
  BOOST_TEST(o->config.beta2 == 0.99f);
  BOOST_TEST(o->config.eps == 1e-6f);
  BOOST_TEST((o->schedule.kind == lr_schedule_kind::cosine));
  BOOST_TEST(o->schedule.base == 0.003f);
  BOOST_TEST(o->schedule.warmup_steps == 10);
  BOOST_TEST(o->schedule.total_steps == 500);
  BOOST_TEST(o->schedule.final_fraction == 0.1f);
}

BOOST_AUTO_TEST_CASE(the_defaults_are_plain_sgd_at_a_constant_lr) {
  auto r = to_kv_optimizer(optimizer_spec{});
  const auto* o = std::get_if<kv_optimizer>(&r);
  BOOST_REQUIRE(o);
  BOOST_TEST((o->config.kind == optimizer_kind::sgd));
  BOOST_TEST(o->config.momentum == 0.f);
  BOOST_TEST(o->config.weight_decay == 0.f);
  BOOST_TEST((o->schedule.kind == lr_schedule_kind::constant));
  BOOST_TEST(o->schedule.at(0) == 0.01f);
  BOOST_TEST(o->schedule.at(1000) == 0.01f);
}

BOOST_AUTO_TEST_CASE(each_unusable_setting_is_refused_by_name) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct bad_case {
    std::function<void(optimizer_spec&)> spoil;
    std::string named;
  };
  const std::vector<bad_case> cases = {
      {[](optimizer_spec& s) { s.kind = "rmsprop"; }, "kind rmsprop"},
      {[](optimizer_spec& s) { s.schedule = "step"; }, "schedule step"},
      {[](optimizer_spec& s) { s.lr = 0.f; }, "lr"},
      {[](optimizer_spec& s) { s.lr = -0.1f; }, "lr"},
      {[nan](optimizer_spec& s) { s.lr = nan; }, "lr"},
      {[inf](optimizer_spec& s) { s.lr = inf; }, "lr"},
      {[](optimizer_spec& s) { s.momentum = 1.f; }, "momentum"},
      {[](optimizer_spec& s) { s.momentum = -0.1f; }, "momentum"},
      {[nan](optimizer_spec& s) { s.momentum = nan; }, "momentum"},
      {[](optimizer_spec& s) { s.weight_decay = -1e-4f; }, "weight_decay"},
      {[inf](optimizer_spec& s) { s.weight_decay = inf; }, "weight_decay"},
      {[](optimizer_spec& s) { s.beta1 = 1.f; }, "beta1"},
      {[](optimizer_spec& s) { s.beta2 = -0.5f; }, "beta2"},
      {[](optimizer_spec& s) { s.eps = 0.f; }, "eps"},
      {[nan](optimizer_spec& s) { s.eps = nan; }, "eps"},
      {[inf](optimizer_spec& s) { s.eps = inf; }, "eps"},
      {[](optimizer_spec& s) { s.warmup_updates = -1; }, "warmup_updates"},
      {[](optimizer_spec& s) { s.total_updates = 0; }, "total_updates"},
      {[](optimizer_spec& s) { s.final_fraction = 1.5f; }, "final_fraction"},
      {[nan](optimizer_spec& s) { s.final_fraction = nan; }, "final_fraction"},
  };
  for (const auto& c : cases) {
    optimizer_spec s;
    c.spoil(s);
    const std::string why = refusal_of(s);
    BOOST_TEST_CONTEXT("refusal: " << why) {
      BOOST_TEST(test::contains(why, "set_optimizer: "));
      BOOST_TEST(test::contains(why, c.named));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_edges_of_each_range_are_accepted) {
  optimizer_spec s;
  s.momentum = 0.f;
  s.beta1 = 0.f;
  s.beta2 = 0.f;
  s.weight_decay = 0.f;
  s.warmup_updates = 0;
  s.total_updates = 1;
  s.final_fraction = 1.f;
  BOOST_TEST(std::holds_alternative<kv_optimizer>(to_kv_optimizer(s)));
  s.final_fraction = 0.f;
  BOOST_TEST(std::holds_alternative<kv_optimizer>(to_kv_optimizer(s)));
}
