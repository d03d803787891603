// Tests for core/member_step.cpp, the training loop's forwards and backwards, stepped
// without actors or threads (tests/support/member_bench.hpp): each pipeline schedule
// stores what it promises and sends each stage tensor before its next action; a
// stranger's activation is dropped with a warning and a malformed one from the neighbour
// stops the stage; an op that throws stops the member with compute_failed; bf16 products
// on the CPU train to parameters near fp32's; simulated compute needs no data.
#define BOOST_TEST_MODULE member_step
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"

using namespace troupe;
using test::same_bits;
using test::member_bench;
using test::member_job;
using test::synthetic;
using test::stop_of;

BOOST_AUTO_TEST_CASE(each_schedule_stores_what_it_promises) {
  for (auto schedule : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b}) {
    job_spec job = member_job(2, 4);
    job.schedule = schedule;
    job.train.epochs = 1;
    member_bench bench(job, synthetic(200));
    bench.start();
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    const std::vector<std::int32_t> peaks{bench.done[0].peak_stored, bench.done[1].peak_stored};
    const std::vector<std::int32_t> want =
        schedule == pipeline_schedule::gpipe ? std::vector<std::int32_t>{4, 4} : std::vector<std::int32_t>{2, 1};
    BOOST_TEST(peaks == want, boost::test_tools::per_element());
  }
}

// Note [Stage tensors leave at once]: under GPipe stage 0 runs four forwards back to
// back, and each activation goes out before the next forward runs.
BOOST_AUTO_TEST_CASE(each_stage_tensor_leaves_before_the_next_action_runs) {
  job_spec job = member_job(2, 4);
  job.schedule = pipeline_schedule::gpipe;
  member_bench bench(job, synthetic(200));
  member_core& stage0 = *bench.members[0];
  stage0.on_welcome(bench.assignment(0));
  BOOST_REQUIRE_EQUAL(stage0.on_wired().size(), 1u);  // its pull
  auto actions = stage0.on_params(0, kv_pull_reply{0, {0}, bench.shard->pack_slice(0, bench.shard->params()), {}, {}});
  for (int mb = 0; mb < 4; ++mb) {
    BOOST_TEST_CONTEXT("after forward " << mb) {
      BOOST_REQUIRE_EQUAL(actions.size(), 2u);
      BOOST_TEST(std::get<member_actions::send_activation>(actions.front()).a.microbatch == mb);
      BOOST_TEST(std::holds_alternative<member_actions::resume>(actions.back()));
    }
    actions = stage0.on_resume();
  }
  BOOST_TEST(actions.empty());  // the backwards wait for stage 1's gradients
}

BOOST_AUTO_TEST_CASE(a_strangers_activation_is_dropped_with_a_warning) {
  member_bench bench(member_job(2, 2), synthetic(200));
  bench.start();
  const auto dropped = bench.members[1]->on_activation(activation{0, 0, 0, 0, tensor({3, 3})}, false, "a stranger");
  BOOST_TEST(stop_of(dropped).empty());
  BOOST_REQUIRE_EQUAL(dropped.size(), 1u);
  const auto& w = std::get<member_actions::warn>(dropped.front());
  BOOST_TEST(w.text == "stage 1 of replica 0: dropped an activation from a stranger claiming stage 0 of replica 0: "
                       "not this stage's neighbour");
  // A neighbour's message that claims another replica is a stranger's too.
  BOOST_TEST(stop_of(bench.members[1]->on_activation(activation{3, 0, 0, 0, tensor({3, 3})}, true, "x")).empty());
  bench.run();
  BOOST_TEST(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_malformed_activation_from_the_neighbour_stops_the_stage) {
  member_bench bench(member_job(2, 2), synthetic(200));
  bench.start();
  const auto wrong_shape = bench.members[1]->on_activation(activation{0, 0, 0, 0, tensor({3, 3})}, true, "stage 0");
  BOOST_TEST(stop_of(wrong_shape) == "bad_shape: stage 1 of replica 0 got an activation for microbatch 0 of step 0 "
                                     "of f32(3, 3), expected f32(20, 256) from stage 0",
             stop_of(wrong_shape));
  BOOST_TEST((bench.members[1]->phase() == member_phase::stopped));
  member_bench late(member_job(2, 2), synthetic(200));
  late.start();
  const auto future = late.members[1]->on_activation_grad(activation_grad{0, 2, 5, 0, tensor({1})}, true, "stage 2");
  BOOST_TEST(stop_of(future).empty());  // stage 1 is the last: any gradient sent to it is a stranger's
  const auto stale = late.members[0]->on_activation_grad(activation_grad{0, 1, 7, 0, tensor({1})}, true, "stage 1");
  BOOST_TEST(stop_of(stale).find("bad_clock") == 0u, stop_of(stale));
}

// Images of 1x14x14 where the job says 1x28x28: the first layer's check throws, and the
// member stops with compute_failed naming what it was doing instead of crashing.
BOOST_AUTO_TEST_CASE(an_op_that_throws_stops_with_compute_failed) {
  auto data = synthetic(200);
  auto small = std::make_shared<dataset_split>(*data);
  small->train.images = tensor({200, 1, 14, 14});
  member_setup setup;
  setup.data = [small](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> {
    return std::shared_ptr<const dataset_split>(small);
  };
  member_bench bench(member_job(1, 1), data, setup);
  bench.start();
  bench.run();
  BOOST_REQUIRE_EQUAL(bench.stopped.size(), 1u);
  BOOST_TEST((bench.stopped[0].code == errc::compute_failed));
  BOOST_TEST(bench.stopped[0].detail.find("worker 0: forward of microbatch 0 failed: ") == 0u,
             bench.stopped[0].detail);
}

// On the CPU the same job trains to the end, to parameters near fp32's: after 20 steps
// the largest difference is 0.011 here and the largest parameter 0.37.
BOOST_AUTO_TEST_CASE(bf16_products_on_the_cpu_train_to_nearby_parameters) {
  std::vector<tensor> params;
  for (precision p : {precision::fp32, precision::bf16}) {
    member_setup setup;
    setup.compute.products = p;
    member_bench bench(member_job(1, 1), synthetic(400), setup);
    bench.start();
    bench.run();
    BOOST_REQUIRE(bench.stopped.empty());
    BOOST_REQUIRE_EQUAL(bench.done.size(), 1u);
    params.push_back(bench.params());
  }
  BOOST_TEST(!same_bits(params[0], params[1]));
  const float diff = test::max_abs_diff(params[0], params[1]);
  BOOST_TEST_MESSAGE("largest parameter difference, bf16 against fp32: " << diff);
  BOOST_TEST(diff < 0.05f);
  float largest = 0.f;
  for (std::int64_t i = 0; i < params[0].numel(); ++i)
    largest = std::max(largest, std::abs(params[0].data<float>()[i]));
  BOOST_TEST_MESSAGE("largest fp32 parameter: " << largest);
  BOOST_TEST(diff < 0.25f * largest);
}

BOOST_AUTO_TEST_CASE(simulated_compute_pushes_a_synthetic_gradient_without_data) {
  job_spec job = member_job(2, 2);
  job.simulate_compute_ms = 0.01;
  job.train.epochs = 1;
  member_setup setup;
  setup.data = [](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> {
    return failure{"simulated compute must not read data"};
  };
  member_bench bench(job, synthetic(200), setup);
  const tensor before = bench.params();
  bench.start();
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.done.size() == 2u);
  BOOST_TEST(!same_bits(bench.params(), before));  // the shard applied the synthetic gradients
}
