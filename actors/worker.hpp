// The worker actor: joins the coordinator, gets its rank, the job, the key-range table and
// the shards, then loops pull -> forward/backward -> push -> clock over its shard of the
// data until the job's epochs are done. It runs detached (its own thread), so its BLAS
// calls never stall CAF's scheduler; OpenBLAS runs single-threaded in it.
#pragma once

#include <caf/io/middleman_actor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/observability.hpp"
#include "actors/protocol.hpp"
#include "tensor/dataset.hpp"
#include "tensor/expected.hpp"

namespace troupe {

struct worker_options {
  std::string job_id;
  // Produces the job's dataset once the job is known (in one process: the shared copy;
  // on a worker node: loaded from the job's dataset and data_dir). Its training set must
  // have the job's train_size samples.
  std::function<expected<std::shared_ptr<const dataset_split>>(const job_spec&)> data;
  std::chrono::milliseconds join_timeout{60000};
  // Connects to shards by address (a cluster node: plain or TLS middleman). Without it the
  // shard handles in the welcome are used as they are.
  std::optional<caf::io::middleman_actor> connector;
  observability obs;
};

caf::actor spawn_worker(caf::actor_system& sys, coordinator_actor coordinator, worker_options opts);

}  // namespace troupe
