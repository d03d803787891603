// The pipeline_stage actor: a member of a job that trains one stage of the model for one
// data-parallel replica. A plain data-parallel worker is the one-stage, one-microbatch
// case of the same actor (the names "worker" and "member" in logs and metrics mean it).
//
// It joins the coordinator and gets its member id (replica * K + stage), the job, the
// key-range table, the shards and its pipeline neighbours, then loops over its replica's
// data shard until the job's epochs are done:
//   pull its slice of every shard -> follow the schedule's actions for the minibatch
//   (forward: stage 0 reads data, the others wait for the previous stage's activation;
//   the last stage computes the loss; backward: the last stage starts from the loss, the
//   others wait for the next stage's activation gradient) -> push its gradient slices
//   (with --servers 0: apply the optimizer itself) -> report the step.
// A message that arrives before its action is due waits in the stage; one from a
// stranger is dropped; a malformed one from a neighbour stops the stage with a typed
// error. A neighbour that dies stops the stage with stage_lost, never a hang.
//
// It runs detached (its own thread), so its BLAS calls never stall CAF's scheduler.
#pragma once

#include <caf/io/middleman_actor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tensor/dtype.hpp"

#include "actors/observability.hpp"
#include "actors/protocol.hpp"
#include "base/expected.hpp"
#include "tensor/dataset.hpp"

namespace troupe {

// Where and how a member computes.
struct compute_options {
  // Each member opens its own context on this device (a context is one stream and is not
  // shared between threads); a device that cannot be opened fails the member with the
  // backend's reason.
  device where = cpu_device;
  // `--device cuda` without an index in one process: member r takes cuda:(r mod the
  // number of devices), so the workers of a job spread over the machine's GPUs.
  bool spread_over_devices = false;
  bool tf32 = false;  // TF32 tensor-core math on CUDA
};

struct stage_options {
  std::string job_id;
  // Produces the job's dataset once the job is known (in one process: the shared copy;
  // on a worker node: loaded from the job's dataset and data_dir). Its training set must
  // have the job's train_size samples. Only stages that read data call it (the first and
  // the last).
  std::function<expected<std::shared_ptr<const dataset_split>>(const job_spec&)> data;
  std::chrono::milliseconds join_timeout{60000};
  // Connects to shards and neighbours by address (a cluster node: plain or TLS
  // middleman). Without it the handles in the welcome are used as they are.
  std::optional<caf::io::middleman_actor> connector;
  observability obs;
  compute_options compute;
};

// Spawns a member; it joins once join_as_member tells it where neighbours reach it.
caf::actor spawn_pipeline_stage(caf::actor_system& sys, coordinator_actor coordinator, stage_options opts);

// Tells a member to join its coordinator; host/port: where it is published for its
// pipeline neighbours (empty in one process).
void join_as_member(const caf::actor& member, std::string host, std::uint16_t port);

}  // namespace troupe
