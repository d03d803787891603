// Tests for core/member_core.cpp, stepped without actors or threads
// (tests/support/member_bench.hpp runs the members against a real shard_core): a whole
// job of two stages is bitwise train-local; data that does not match the job, and bf16
// products asked of a device, stop the member at its welcome; a replacement resumes at
// its clock; a lost neighbour stops the stage, but one that owes it nothing more in the
// job's last step is only warned about; the welcome returns the job's frame bound as an
// action and leaves the process's own alone.
#define BOOST_TEST_MODULE member_core
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "core/job_frames.hpp"
#include "tests/support/member_bench.hpp"
#include "tests/support/numeric.hpp"
#include "train/trainer.hpp"
#include "transport/frame_bound.hpp"

using namespace troupe;
using test::same_bits;
using test::member_bench;
using test::member_job;
using test::synthetic;
using test::stop_of;

BOOST_AUTO_TEST_CASE(one_microbatch_through_two_stages_is_bitwise_train_local) {
  auto data = synthetic(400);
  for (std::int64_t bucket_bytes : {std::int64_t{0}, std::int64_t{1}})  // without and with gradient buckets
    BOOST_TEST_CONTEXT("--bucket-bytes " << bucket_bytes) {
      job_spec job = member_job(2, 1);
      job.bucket_bytes = bucket_bytes;
      member_bench bench(job, data);
      bench.start();
      bench.run();
      BOOST_REQUIRE(bench.stopped.empty());
      BOOST_REQUIRE_EQUAL(bench.done.size(), 2u);
      BOOST_TEST(bench.done[0].clock == 20);  // 2 epochs of 400 / 40 steps
      auto local = train_local(bench.job.train, *data);
      BOOST_REQUIRE(local.has_value());
      BOOST_TEST(same_bits(bench.params(), local->params));
      BOOST_TEST(bench.epochs.size() == 4u);  // each stage reports each epoch
      for (std::uint32_t r = 0; r < 2; ++r) BOOST_TEST((bench.members[r]->phase() == member_phase::stopped));
      if (bucket_bytes == 1)  // the stages pulled in pieces
        BOOST_TEST(std::any_of(bench.pulls.begin(), bench.pulls.end(), [](auto& p) { return p.piece_numel > 0; }));
    }
}

// Cores set no process-wide state (docs/DESIGN.md, "Bounded frames"): the shell does.
BOOST_AUTO_TEST_CASE(the_welcome_returns_the_frame_bound_and_leaves_the_process_alone) {
  job_spec job = member_job(2, 1);
  member_bench bench(job, synthetic(400));
  bench.start();
  BOOST_TEST(bench.frame_bytes == max_frame_bytes(bench.job, bench.m));
  BOOST_TEST(bench.frame_bytes > frame_headroom);
  BOOST_TEST(frame_bound() == frame_bound_before_the_job);
}

BOOST_AUTO_TEST_CASE(data_that_does_not_match_the_job_stops_at_the_welcome) {
  member_setup setup;
  setup.data = [](const job_spec&) -> expected<std::shared_ptr<const dataset_split>> { return synthetic(150); };
  member_bench bench(member_job(1, 1), synthetic(200), setup);
  const auto out = bench.members[0]->on_welcome(bench.assignment(0));
  BOOST_TEST(stop_of(out) == "bad_job: worker 0's training set has 150 samples but the job has 200");
  BOOST_TEST(bench.members[0]->on_wired().empty());
}

// bf16 products are computed by the host: a member asked for them on a device stops at
// its welcome, before it opens the device, saying what to change.
BOOST_AUTO_TEST_CASE(bf16_products_on_a_device_stop_at_the_welcome) {
  member_setup setup;
  setup.compute.where = device{device_kind::cuda, 0};
  setup.compute.products = precision::bf16;
  member_bench bench(member_job(1, 1), synthetic(200), setup);
  const auto out = bench.members[0]->on_welcome(bench.assignment(0));
  BOOST_TEST(stop_of(out) ==
             "bad_job: worker 0: --precision bf16 computes on the CPU only, and this member computes on cuda:0; drop "
             "--precision there, or use --tf32 for faster products on CUDA");
}

BOOST_AUTO_TEST_CASE(a_replacement_resumes_at_its_clock) {
  job_spec job = member_job(1, 1);
  job.mode = sync_mode::async;  // alone in sync, it would wait for rounds nobody closes
  job.train.epochs = 3;
  member_bench bench(job, synthetic(400));
  bench.start(12);  // 10 steps per epoch: in epoch 1, step 2
  BOOST_REQUIRE(!bench.pulls.empty());
  BOOST_TEST(bench.pulls.front().clock == 12);
  bench.run();
  BOOST_REQUIRE(bench.stopped.empty());
  BOOST_TEST(bench.steps.front().epoch == 1);
  BOOST_TEST(bench.epochs.size() == 2u);  // epochs 1 and 2
  BOOST_TEST(bench.epochs.front().samples == 8 * 40);  // the rest of epoch 1
  BOOST_TEST(bench.done[0].clock == 30);
}

BOOST_AUTO_TEST_CASE(a_lost_neighbour_stops_the_stage) {
  member_bench bench(member_job(2, 2), synthetic(200));
  bench.start();
  BOOST_TEST(stop_of(bench.members[0]->on_neighbour_down(false, "remote_link_unreachable")) ==
             "stage_lost: stage 1 of replica 0 is gone (remote_link_unreachable); stage 0 of replica 0 stops, since "
             "its pipeline cannot finish a step without it");
  BOOST_TEST((bench.members[0]->phase() == member_phase::stopped));
}

// Note [A pipeline neighbour gone in the last step]. Stage 1 finishes first: stage 0's
// last backward waits for its gradient, and stage 0 then waits only for its own push's
// answer.
BOOST_AUTO_TEST_CASE(a_neighbour_that_owes_nothing_more_in_the_last_step_is_only_warned_about) {
  member_bench whole(member_job(2, 2), synthetic(200));
  whole.start();
  whole.run();
  BOOST_REQUIRE(whole.done.size() == 2u);
  const std::int64_t last_clock = 2 * 5 - 1;  // 2 epochs of 200 samples in batches of 40

  member_bench bench(member_job(2, 2), synthetic(200));
  bench.start();
  while (!bench.done.contains(1) && !bench.queue.empty()) bench.run(1);
  BOOST_REQUIRE(bench.done.contains(1));
  BOOST_REQUIRE(!bench.done.contains(0));
  // Stage 1 leaves and its connection closes first: stage 0 has every gradient it needs.
  const auto gone = bench.members[0]->on_neighbour_down(false, "remote_link_unreachable");
  BOOST_TEST(stop_of(gone).empty(), stop_of(gone));
  BOOST_REQUIRE(gone.size() == 1u);
  const auto* w = std::get_if<member_actions::warn>(&gone.front());
  BOOST_REQUIRE(w != nullptr);
  BOOST_TEST(w->text == "stage 1 of replica 0 is gone (remote_link_unreachable) during the job's last step; stage 0 "
                        "of replica 0 needs nothing more from it and finishes",
             w->text);
  bench.run();
  BOOST_TEST(bench.done.contains(0));
  BOOST_TEST(bench.stopped.empty());
  BOOST_TEST(same_bits(bench.params(), whole.params()));  // it finished as if nothing had happened
  // A finished stage needs nothing from its previous one either.
  BOOST_TEST(stop_of(bench.members[1]->on_neighbour_down(true, "remote_link_unreachable")).empty());

  // In the last step, before its parameters came (so before any of its backwards had
  // their gradients), the next stage still owes stage 0 everything: it stops.
  member_bench early(member_job(2, 2), synthetic(200));
  early.start();
  const auto asked_last = [&] {
    return std::any_of(early.pulls.begin(), early.pulls.end(),
                       [&](const kv_pull& q) { return q.worker == 0 && q.clock == last_clock; });
  };
  while (!asked_last() && !early.queue.empty()) early.run(1);
  BOOST_REQUIRE(asked_last());
  BOOST_TEST(stop_of(early.members[0]->on_neighbour_down(false, "remote_link_unreachable")).find("stage_lost") == 0u);
  BOOST_TEST((early.members[0]->phase() == member_phase::stopped));

  // In the last step, its forwards run and its backwards still waiting for their
  // gradients (stage 1 has had none of this step's activations yet): it stops too.
  member_bench waiting(member_job(2, 2), synthetic(200));
  waiting.start();
  const auto began_last = [&] {
    return std::any_of(waiting.pulls.begin(), waiting.pulls.end(),
                       [&](const kv_pull& q) { return q.worker == 0 && q.clock == last_clock; }) &&
           waiting.members[0]->in_step();
  };
  while (!began_last() && !waiting.queue.empty()) waiting.run(1);
  BOOST_REQUIRE(began_last());
  BOOST_TEST(stop_of(waiting.members[0]->on_neighbour_down(false, "remote_link_unreachable")).find("stage_lost") ==
             0u);
}
