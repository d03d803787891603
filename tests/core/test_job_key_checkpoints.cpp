// Tests for Note [The last checkpoints of a key-value job] (core/job_keys.cpp,
// core/job_durability.cpp), without CAF: when the last member of a key-value job leaves,
// the result waits for the checkpoints under way (a commit, a file of a step written in
// part in sync, a file a shard has begun in any mode), asks a shard with no member left
// for each step written in part, and gives up on a file after --request-timeout.
#define BOOST_TEST_MODULE job_key_checkpoints
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <optional>
#include <variant>

#include "core/job_core.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/kv_job_core.hpp"

using namespace troupe;
using namespace troupe::job_actions;
using test::all_of;
using test::kv_job;
using test::only;
using test::running;
using test::t0;

namespace {

// An async job of 2 members and 2 shards that checkpoints every 2 steps, running.
job_core async_with_checkpoints() {
  auto job = kv_job(2, 2);
  job.mode = sync_mode::async;
  job.checkpoints.dir = "ck";
  job.checkpoints.every = 2;
  return running(job);
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_result_waits_for_the_checkpoints_under_way_when_the_last_member_leaves) {
  // Note [The last checkpoints of a key-value job].
  auto job = kv_job(2, 2);
  job.mode = sync_mode::sync;  // its shards close the same rounds: shard 1's file of 4 may still come
  job.checkpoints.dir = "ck";
  job.checkpoints.every = 2;
  auto core = running(job);
  // The first file of a step asks every shard for it (one holding no pushed key takes it at once).
  BOOST_TEST(only<request_checkpoint>(core.on_checkpoint_saved(checkpoint_saved{0, 2, 2, "kv-shard-0.tf", ""})).step == 2);
  BOOST_TEST(only<commit_checkpoint>(core.on_checkpoint_saved(checkpoint_saved{1, 2, 2, "kv-shard-1.tf", ""})).step ==
             2);
  BOOST_TEST(all_of<commit_checkpoint>(core.on_checkpoint_saved(checkpoint_saved{0, 4, 4, "kv-shard-0.tf", ""})).empty());
  core.on_done(worker_done{0}, t0);
  const auto last = core.on_done(worker_done{1}, t0);
  BOOST_TEST(all_of<finish>(last).empty());                    // checkpoint 2 is being committed
  BOOST_TEST(only<request_checkpoint>(last).step == 4);        // a shard with no member left takes it at once
  BOOST_TEST(all_of<finish>(core.on_checkpoint_committed(2, std::nullopt)).empty());
  const auto overdue = t0 + std::chrono::milliseconds(job.request_timeout_ms) + std::chrono::seconds(1);
  BOOST_TEST(all_of<finish>(core.on_tick(t0 + std::chrono::seconds(1))).empty());
  auto out = core.on_tick(overdue);
  BOOST_TEST(only<note>(out).text.find("checkpoint 4 in ck was not written by every shard") != std::string::npos);
  const auto end = only<finish>(out);
  BOOST_REQUIRE(std::holds_alternative<job_result>(end.outcome));
  BOOST_TEST(std::get<job_result>(end.outcome).checkpoints_written == 1);
}

BOOST_AUTO_TEST_CASE(a_file_begun_before_the_last_member_leaves_holds_the_result_in_any_mode) {
  // Note [The last checkpoints of a key-value job]: shard 0 took its image of step 4, and
  // no file of it is written yet when the last member leaves.
  auto core = async_with_checkpoints();
  BOOST_TEST(core.on_checkpoint_begun(checkpoint_begun{0, 4}).empty());
  core.on_done(worker_done{0}, t0);
  const auto last = core.on_done(worker_done{1}, t0);
  BOOST_TEST(all_of<finish>(last).empty());              // shard 0's file of 4 is under way
  BOOST_TEST(only<request_checkpoint>(last).step == 4);  // shard 1, with no member left, takes it at once
  BOOST_TEST(core.on_checkpoint_begun(checkpoint_begun{1, 4}).empty());
  BOOST_TEST(all_of<finish>(core.on_checkpoint_saved(checkpoint_saved{0, 4, 4, "kv-shard-0.tf", ""})).empty());
  const auto both = core.on_checkpoint_saved(checkpoint_saved{1, 4, 4, "kv-shard-1.tf", ""});
  BOOST_TEST(all_of<finish>(both).empty());
  BOOST_TEST(only<commit_checkpoint>(both).step == 4);
  const auto end = only<finish>(core.on_checkpoint_committed(4, std::nullopt));
  BOOST_REQUIRE(std::holds_alternative<job_result>(end.outcome));
  BOOST_TEST(std::get<job_result>(end.outcome).checkpoints_written == 1);
}

BOOST_AUTO_TEST_CASE(in_async_a_file_never_begun_does_not_hold_the_result) {
  auto core = async_with_checkpoints();
  BOOST_TEST(core.on_checkpoint_begun(checkpoint_begun{0, 4}).empty());
  const auto first = core.on_checkpoint_saved(checkpoint_saved{0, 4, 4, "kv-shard-0.tf", ""});
  BOOST_TEST(all_of<commit_checkpoint>(first).empty());
  core.on_done(worker_done{0}, t0);
  const auto last = core.on_done(worker_done{1}, t0);
  // Shard 1 may never reach step 4 in async: it is asked for it, and the result does not wait.
  BOOST_TEST(only<request_checkpoint>(last).step == 4);
  BOOST_TEST(all_of<finish>(last).size() == 1u);
}
