// Tests for core/pipeline_schedule.cpp: for K in 1..4 and M in 1..8, both schedules run
// every forward and backward exactly once per stage; executed together (a stage's forward
// needs the previous stage's, a backward the next stage's and its own forward) they never
// deadlock; 1F1B never holds more than K - i activations at stage i, GPipe holds M.
// Followed through real stage replicas, both compute the unsplit model's gradients
// (bitwise with one microbatch) in the slots they promise.
#define BOOST_TEST_MODULE pipeline_schedule
#include <boost/test/unit_test.hpp>

#include <set>

#include "core/pipeline_schedule.hpp"
#include "tests/support/pipeline_sim.hpp"

using namespace troupe;

namespace {

// Runs all stages' lists against each other; returns false on a deadlock.
bool executes(pipeline_schedule s, int k, int m) {
  std::vector<std::vector<pipeline_action>> lists;
  for (int i = 0; i < k; ++i) lists.push_back(stage_actions(s, k, i, m));
  std::vector<std::size_t> pos(k, 0);
  std::vector<std::set<int>> fwd_done(k), bwd_done(k);
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < k; ++i) {
      if (pos[i] == lists[i].size()) continue;
      const auto a = lists[i][pos[i]];
      bool ready;
      if (a.forward)
        ready = i == 0 || fwd_done[i - 1].count(a.microbatch);
      else
        ready = fwd_done[i].count(a.microbatch) && (i == k - 1 || bwd_done[i + 1].count(a.microbatch));
      if (!ready) continue;
      (a.forward ? fwd_done : bwd_done)[i].insert(a.microbatch);
      ++pos[i];
      progress = true;
    }
  }
  for (int i = 0; i < k; ++i)
    if (pos[i] != lists[i].size()) return false;
  return true;
}

std::vector<test::stage_step> as_steps(const std::vector<pipeline_action>& actions) {
  std::vector<test::stage_step> out;
  for (const auto& a : actions) out.push_back({a.forward, a.microbatch});
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_action_once_dependencies_respected_memory_bounded) {
  for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b})
    for (int k = 1; k <= 4; ++k)
      for (int m = 1; m <= 8; ++m)
        BOOST_TEST_CONTEXT(name_of(s) << " K=" << k << " M=" << m) {
          for (int i = 0; i < k; ++i) {
            const auto a = stage_actions(s, k, i, m);
            BOOST_REQUIRE(a.size() == static_cast<std::size_t>(2 * m));
            std::set<int> f, b;
            for (const auto& x : a) {
              BOOST_TEST((x.microbatch >= 0 && x.microbatch < m));
              BOOST_TEST((x.forward ? f : b).insert(x.microbatch).second);
              if (!x.forward) BOOST_TEST(f.count(x.microbatch) == 1u);  // its own forward came first
            }
            const int peak = peak_stored(a);
            if (s == pipeline_schedule::one_f_one_b)
              BOOST_TEST(peak <= k - i);
            else
              BOOST_TEST(peak == m);
          }
          BOOST_TEST(executes(s, k, m));
        }
}

BOOST_AUTO_TEST_CASE(one_f_one_b_shape) {
  const auto a = stage_actions(pipeline_schedule::one_f_one_b, 3, 0, 4);
  const std::vector<pipeline_action> expect{{true, 0}, {true, 1}, {true, 2}, {false, 0},
                                            {true, 3}, {false, 1}, {false, 2}, {false, 3}};
  BOOST_TEST((a == expect));
  const auto last = stage_actions(pipeline_schedule::one_f_one_b, 3, 2, 2);
  BOOST_TEST((last == std::vector<pipeline_action>{{true, 0}, {false, 0}, {true, 1}, {false, 1}}));
}

BOOST_AUTO_TEST_CASE(names_and_bubble) {
  BOOST_TEST((*parse_pipeline_schedule("1f1b") == pipeline_schedule::one_f_one_b));
  BOOST_TEST(parse_pipeline_schedule("zb").error().message.find("gpipe or 1f1b") != std::string::npos);
  BOOST_TEST(theoretical_bubble(4, 4) == 3.0 / 7.0);
  BOOST_TEST(theoretical_bubble(1, 8) == 0.0);
}

// Tolerance for M > 1: the weight-gradient sums are split into M partial sums, which
// changes only their float rounding (1e-5 of the largest gradient is ~100 ulps there).
BOOST_AUTO_TEST_CASE(followed_through_stage_replicas_each_schedule_computes_the_unsplit_gradients) {
  for (const char* spec : {"mlp", "cnn"}) {
    const model m = test::build_model(spec);
    const test::minibatch mb = test::random_batch(24, 3);
    const test::reference ref = test::unsplit(m, mb);
    for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b})
      for (int micro : {1, 4})
        BOOST_TEST_CONTEXT(spec << " K=4 M=" << micro << " " << name_of(s)) {
          std::vector<std::vector<test::stage_step>> orders;
          std::vector<int> slots;
          for (int i = 0; i < 4; ++i) {
            const auto actions = stage_actions(s, 4, i, micro);
            orders.push_back(as_steps(actions));
            slots.push_back(peak_stored(actions));
          }
          const auto out = test::run_pipeline(m, {1, 2, 3}, micro, orders, slots, ref.params, mb);
          if (micro == 1) {
            BOOST_TEST(test::same_bits(out.grads, ref.grads));
            BOOST_TEST(out.loss == ref.loss);
          } else {
            BOOST_TEST(test::max_relative_difference(out.grads, ref.grads) < 1e-5);
            BOOST_TEST(std::fabs(out.loss - ref.loss) < 1e-5 * std::fabs(ref.loss));
          }
          BOOST_TEST(out.peak == slots, boost::test_tools::per_element());
        }
  }
}
