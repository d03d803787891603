// Running a whole job inside one process: spawn the coordinator, S shard servers and N
// workers (or D replicas x K pipeline stages) of a job prepared by prepare_job (in
// core/job.hpp) in one actor system, and wait for the outcome. `troupe train` and the
// tests use it; nothing here opens a network port.
#pragma once

#include <memory>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/pipeline_stage.hpp"
#include "actors/protocol.hpp"
#include "base/expected.hpp"
#include "core/job.hpp"
#include "train/dataset.hpp"

namespace troupe {

// Scheduler threads for an in-process job (one per core; workers bring their own threads).
void configure_in_process(caf::actor_system_config& cfg);

struct job_handles {
  local_coordinator_actor coordinator;
  std::vector<local_shard_actor> shards;
  std::vector<local_stage_actor> workers;  // members, in spawn order
};

// Spawns one prepared job in `sys`; the protocol types must be registered in its config.
// A lost shard ends it: in one process nothing joins again (--on-shard-loss is fail).
job_handles spawn_job(caf::actor_system& sys, job_spec job, const model& m,
                      std::shared_ptr<const dataset_split> data, job_callbacks cb, observability obs = {},
                      compute_options compute = {}, std::optional<resume_point> resume = std::nullopt);

// Waits for the job's result. Note [Waiting for a job]: the wait itself has no deadline
// because a job may legitimately train for days; the coordinator's stall watchdog turns
// any lack of progress into an error within stall_timeout_ms, so the wait always ends.
caf::expected<job_result> await_job(caf::actor_system& sys, const local_coordinator_actor& coordinator);

// prepare_job + a fresh actor system + spawn_job + await_job. resume: from that checkpoint
// of the prepared job (Note [Resuming a job]).
caf::expected<job_result> run_job_in_process(job_spec job, std::shared_ptr<const dataset_split> data,
                                             job_callbacks cb = {}, observability obs = {},
                                             compute_options compute = {},
                                             std::optional<resume_point> resume = std::nullopt);

}  // namespace troupe
