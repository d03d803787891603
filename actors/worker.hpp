// The worker actor: joins the coordinator, gets its rank, the job, the key-range table and
// the shards, then loops pull -> forward/backward -> push -> clock over its shard of the
// data until the job's epochs are done. It runs detached (its own thread), so its BLAS
// calls never stall CAF's scheduler; OpenBLAS runs single-threaded in it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "actors/protocol.hpp"
#include "tensor/dataset.hpp"

namespace troupe {

// `data` must be the dataset the coordinator described in the job (same training size).
caf::actor spawn_worker(caf::actor_system& sys, coordinator_actor coordinator, std::string job_id,
                        std::shared_ptr<const dataset_split> data, std::chrono::milliseconds join_timeout);

}  // namespace troupe
