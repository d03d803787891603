// The coordinator actor: holds the job spec and the key-range table, admits shards and
// workers (assigning shard indices and worker ranks), starts the job once everyone has
// joined, tracks worker clocks and epochs, evaluates on the test set after each epoch,
// monitors every member and applies the failure policy, and answers `run` with the job's
// result or error.
//
// Failure policy: a dead worker is logged, counted and removed from every shard's
// membership (sync rounds close without it, ssp bounds ignore it); the job goes on while
// one worker lives. A dead shard, a diverged worker, or no progress for stall_timeout
// ends the job with an error, never a hang.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "actors/observability.hpp"
#include "actors/protocol.hpp"
#include "tensor/dataset.hpp"
#include "tensor/model.hpp"

namespace troupe {

struct epoch_summary {
  int epoch = 0;                    // 0-based
  int epochs = 0;
  double seconds = 0.0;             // since training started
  double samples_per_second = 0.0;  // all workers, over this epoch
  double train_loss = 0.0;          // mean over the epoch's steps of all workers
  double mean_staleness = 0.0;      // of the gradients applied in this epoch
  std::int64_t max_staleness = 0;   // since the start
  bool evaluated = false;
  double test_accuracy = 0.0, test_loss = 0.0;
  std::uint32_t live_workers = 0;   // members: workers, or stages of all replicas
  // Pipelines (pipeline_stages > 1): the bubble measured over this epoch's steps and the
  // (K - 1) / (M + K - 1) of equal stages.
  std::uint32_t pipeline_stages = 1;
  std::int32_t microbatches = 1;
  double bubble = 0.0, theoretical_bubble = 0.0;
};

struct job_callbacks {
  std::function<void(const epoch_summary&)> on_epoch;
  std::function<void(const std::string&)> on_event;  // a worker lost, a job refused...
};

// job must be prepared and valid (see prepare_job in actors/runtime.hpp) and m must be
// its model; data is used for evaluation only.
coordinator_actor spawn_coordinator(caf::actor_system& sys, job_spec job, const model& m,
                                    std::shared_ptr<const dataset_split> data, job_callbacks cb,
                                    observability obs = {});

}  // namespace troupe
