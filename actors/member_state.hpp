// The state of one pipeline_stage actor (a member: a worker, or one stage of a pipeline
// replica) and what its two source files share: pipeline_stage.cpp runs the training
// loop, member_wiring.cpp connects the member to its shards, its pipeline neighbours and
// its local group. Private to those two files.
#pragma once

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/pipeline_stage.hpp"
#include "actors/protocol.hpp"
#include "core/pipeline_schedule.hpp"
#include "core/stage_inbox.hpp"
#include "tensor/backend.hpp"
#include "tensor/compute.hpp"
#include "tensor/group_comm.hpp"
#include "tensor/optimizer.hpp"
#include "tensor/stage_replica.hpp"

namespace troupe::member_detail {

using clock_type = std::chrono::steady_clock;
using wall = std::chrono::system_clock;
using connect_retry_atom = caf::atom_constant<caf::atom("reconnect")>;
// A member with nothing to pull, to itself: start the next step.
using next_step_atom = caf::atom_constant<caf::atom("nextstep")>;
// Stage i -> stage i + 1 across nodes, once connected: "I am your previous stage".
using stage_hello_atom = caf::atom_constant<caf::atom("stagehello")>;

struct member_state {
  coordinator_actor coordinator;
  stage_options opts;
  std::shared_ptr<const dataset_split> data;     // the first and the last stage
  std::uint32_t rank = 0, world = 1;             // member id; replicas
  std::uint32_t replica = 0, stage = 0, stages = 1;
  job_spec job;
  std::vector<shard_actor> shards;
  std::vector<std::uint32_t> active;             // shards that hold part of this stage
  std::vector<std::vector<key_range>> ranges;    // per shard: this stage's, stage-local offsets
  std::vector<std::int64_t> slice_numel;         // per shard
  std::vector<std::int64_t> base_version;        // per shard, of the params in use
  caf::actor prev, next;                         // pipeline neighbours (invalid at the ends)
  std::optional<model> net;                      // this stage's layers
  std::unique_ptr<backend_context> backend;      // off the host, or for a local group
  compute exec;                                  // the host, or backend
  // --local-reduce (Note [Local groups] in local_groups.cpp): the group, ascending, [0]
  // leads; its communicator; the id the leader made, once it has arrived.
  std::vector<std::uint32_t> group;
  std::unique_ptr<group_comm> comm;
  std::optional<std::vector<std::uint8_t>> group_id_bytes;
  bool awaiting_group = false;
  std::unique_ptr<stage_replica> rep;            // real compute (declared after exec: destroyed first)
  std::optional<optimizer_state> local_opt;      // --servers 0
  tensor synthetic_grad;                         // --simulate-compute
  tensor xb, yb;                                 // one microbatch of data
  std::vector<std::int64_t> order;
  std::int64_t steps_per_epoch = 0, step_in_epoch = 0, clock = 0;
  std::int32_t epoch = 0;
  std::size_t pulls_pending = 0;
  std::int64_t acks_pending = 0, rejected = 0;
  double epoch_loss = 0.0;
  std::int64_t epoch_samples = 0;
  clock_type::time_point epoch_start;
  std::chrono::milliseconds timeout{0};
  bool finishing = false;
  std::map<std::string, std::function<void()>> retries;  // pending connects, by peer
  std::function<void()> on_prev_hello;                   // set while waiting for the previous stage
  struct hello { caf::actor sender; std::uint32_t replica, stage; };
  std::optional<hello> early_hello;                      // a hello that came before the welcome
  bool welcomed = false;
  // Until its neighbours are wired (a neighbour may start first and send at once), stage
  // tensors wait here with their senders, and are checked when the stage starts.
  bool wired = false;
  std::vector<std::function<caf::error()>> early;
  lr_schedule schedule;
  // The minibatch in progress: its schedule, where the stage is in it, and the messages
  // that arrived before their action was due, by (step, microbatch).
  bool in_step = false;
  std::int64_t batch = 0;
  int parts = 0;
  std::vector<pipeline_action> actions;
  std::size_t next_action = 0;
  std::vector<int> slot_of;                      // per microbatch
  double step_loss = 0.0, busy = 0.0, forward_s = 0.0, backward_s = 0.0;
  int stored = 0, peak = 0;
  wall::time_point params_ready;                 // the step's parameters arrived
  std::optional<wall::time_point> first_action;  // the step's first forward began
  std::optional<stage_inbox> acts_in, grads_in;
  // Observability: metric handles (if metrics are on), the trace track (if tracing).
  std::optional<monitoring::worker_metrics> m;
  std::optional<monitoring::stage_metrics> sm;
  std::optional<monitoring::device_metrics> dm;  // on a backend
  std::uint32_t track = 0;
  wall::time_point step_begin;
  static inline const char* name = "troupe.pipeline_stage";
};

using stage_pointer = caf::stateful_actor<member_state>*;

inline bool pipelined(const member_state& st) { return st.stages > 1; }
inline bool first_stage(const member_state& st) { return st.stage == 0; }
inline bool last_stage(const member_state& st) { return st.stage + 1 == st.stages; }
inline bool simulated(const member_state& st) { return st.job.simulate_compute_ms > 0.0; }
inline bool grouped(const member_state& st) { return !st.group.empty(); }
inline bool group_leader(const member_state& st) { return grouped(st) && st.group.front() == st.rank; }

// "worker 3" or "stage 1 of replica 0": how logs and errors name a member.
std::string who(const member_state& st);
// Logs e and stops the member with it.
void fail(stage_pointer self, caf::error e);

// A collective of the local group; a failure (a member died) stops this worker.
template <class F>
bool in_group(stage_pointer self, const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const backend_error& e) {
    fail(self, make_error(errc::stage_lost, who(self->state) + ": the local group's " + what + " failed: " + e.what()));
    return false;
  }
}

// pipeline_stage.cpp: starts (or resumes) the training loop at st.clock, once wired.
void start_training(stage_pointer self);

// member_wiring.cpp: joining.
// Connects to the shards and neighbours the welcome names, then starts training.
void connect_peers(stage_pointer self, worker_welcome& w);
// Opens the local group's communicator, then starts training.
void open_group(stage_pointer self);
// Where this member could share a local group: GPUs of one machine (NCCL), or threads of
// one process (the CPU backend).
std::string locality(device d);
// The handlers of stage_hello_atom, group_atom and connect_retry_atom.
void on_stage_hello(stage_pointer self, std::uint32_t replica, std::uint32_t stage);
void on_group_id(stage_pointer self, group_id& g);
void on_connect_retry(stage_pointer self, const std::string& peer);

}  // namespace troupe::member_detail
