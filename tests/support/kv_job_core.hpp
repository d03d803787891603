// kv_job_core: a key-value job's core for the tests of core/job_keys.cpp and its
// checkpoints: the job's spec, and its core made, or running (every shard and member
// joined and the shards started), with no CAF.
#pragma once

#include <boost/test/unit_test.hpp>

#include "core/job_core.hpp"
#include "tests/support/actions.hpp"

namespace troupe::test {

inline const auto t0 = job_clock::time_point{};

// A key-value job of `workers` members and `shards` shards; keys split above `bound` floats.
inline job_spec kv_job(std::uint32_t workers, std::uint32_t shards, std::int64_t bound = 1000) {
  job_spec job;
  job.job_id = "job-kv";
  job.kv = true;
  job.workers = workers;
  job.servers = shards;
  job.big_array_bound = bound;
  return job;
}

inline job_core make(const job_spec& job) { return job_core(job, model::none(), {}, t0); }

inline job_core running(const job_spec& job) {
  using namespace job_actions;
  job_core core = make(job);
  const std::uint32_t workers = job.workers, shards = job.servers;
  ticket t = 1;
  for (std::uint32_t s = 0; s < shards; ++s)
    only<welcome_shard>(core.on_shard_join(t++, shard_join{"job-kv", "h", 1, ""}, t0));
  job_actions_list last;
  for (std::uint32_t w = 0; w < workers; ++w)
    last = core.on_member_join(t++, worker_join{"job-kv", "h", 2, "", "", -1}, t0);
  only<start_shards>(last);
  BOOST_REQUIRE_EQUAL(all_of<welcome_member>(core.shards_started(t0)).size(), workers);
  BOOST_REQUIRE(core.phase() == job_phase::training);
  return core;
}

inline job_core running(std::uint32_t workers = 2, std::uint32_t shards = 2, std::int64_t bound = 1000) {
  return running(kv_job(workers, shards, bound));
}

}  // namespace troupe::test
