// Test helper for job_core's tests (tests/core/test_job_core.cpp, test_job_epochs.cpp,
// test_job_watch.cpp): a job_core stepped by hand without actors or threads, with explicit
// time: shards and members join, report steps, epochs and their end, and gathers are
// answered as the shards would.
#pragma once

#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/job_core.hpp"
#include "tests/support/actions.hpp"
#include "tests/support/tiny_job.hpp"

namespace troupe::test::job_core_tests {

using namespace job_actions;
using std::chrono::milliseconds;

// A tiny job whose stall timeout is 5 s.
inline job_spec tiny_job(sync_mode mode, std::uint32_t workers = 2, std::uint32_t servers = 2) {
  job_spec j = test::tiny_job(mode, workers, servers);
  j.stall_timeout_ms = 5000;
  return j;
}

// The job's outcome from a finish action: its result, or the fault's text.
inline std::string fault_of(const job_actions_list& actions) {
  const auto f = only<finish>(actions);
  BOOST_REQUIRE(std::holds_alternative<fault>(f.outcome));
  return to_string(std::get<fault>(f.outcome));
}

struct harness {
  job_spec job;
  model m;
  job_clock::time_point now = job_clock::time_point{} + std::chrono::hours(1);
  std::unique_ptr<job_core> core;
  ticket next = 1;

  explicit harness(job_spec j, observability obs = {}) : job(std::move(j)), m(*build_model(job)) {
    core = std::make_unique<job_core>(job, m, std::move(obs), now);
  }
  void later(milliseconds d) { now += d; }
  job_actions_list shard(std::string host = {}, std::uint16_t port = 0, std::string id = "job-under-test") {
    return core->on_shard_join(next++, shard_join{std::move(id), std::move(host), port, {}}, now);
  }
  job_actions_list member(std::string host = {}, std::uint16_t port = 0, std::string id = "job-under-test",
                          std::string locality = {}, std::int32_t wanted_rank = -1) {
    return core->on_member_join(
        next++, worker_join{std::move(id), std::move(host), port, std::move(locality), {}, wanted_rank}, now);
  }
  job_actions_list member_asking_for(std::int32_t rank, std::string host = {}) {
    return member(std::move(host), 0, "job-under-test", {}, rank);
  }
  // Every shard and member joins and the shards start; returns the members' welcomes.
  std::vector<welcome_member> start() {
    for (std::uint32_t s = 0; s < job.servers; ++s) shard();
    for (std::uint32_t r = 0; r < members(job); ++r) member();
    auto go = core->shards_started(now);
    return all_of<welcome_member>(go);
  }
  job_actions_list step(std::uint32_t rank, std::int64_t clock, std::int32_t epoch, std::int64_t samples = 50) {
    return core->on_step(step_report{rank, clock, epoch, 0.5, samples, 0.0, 0, 0}, now);
  }
  job_actions_list epoch(std::uint32_t rank, std::int32_t e) {
    return core->on_epoch(worker_epoch{rank, e, 0.5, 1, 50, 0.01, tensor()}, now);
  }
  job_actions_list done(std::uint32_t rank, std::int64_t clock) {
    return core->on_done(worker_done{rank, clock, 0, 1}, now);
  }
  // The tiny job (2 members, 2 epochs of 1 step) from its start until both members are
  // done, its first epoch evaluated; returns what the last done gave (the last epoch's
  // gather).
  job_actions_list train_until_done() {
    start();
    step(0, 1, 0);
    step(1, 1, 0);
    epoch(0, 0);
    only<evaluate>(answer(only<gather>(epoch(1, 0))));
    core->on_evaluated(eval_reply{0, 0.5, 1.0});
    step(0, 2, 1);
    step(1, 2, 1);
    epoch(0, 1);
    epoch(1, 1);
    done(0, 2);
    return done(1, 2);
  }
  // Answers a gather as the shards would: statistics, and snapshots of the right size.
  job_actions_list answer(const gather& g, std::int64_t staleness_sum = 0, std::int64_t count = 0) {
    job_actions_list out;
    const key_table table = partition_parameters(m, job.servers, job.big_array_bound);
    for (std::uint32_t s = 0; s < job.servers; ++s) {
      shard_stats st;
      st.shard = s;
      st.staleness_sum = staleness_sum;
      st.staleness_count = count;
      auto a = core->on_stats(g.id, st);
      out.insert(out.end(), a.begin(), a.end());
      if (!g.with_params) continue;
      auto b = core->on_snapshot(g.id, s, params_reply{s, 1, tensor({table.shard_numel[s]})});
      out.insert(out.end(), b.begin(), b.end());
    }
    return out;
  }
};

}  // namespace troupe::test::job_core_tests
