// The three roles of a cluster node, each in its own actor system. Each function returns
// when the node's part of the job is over: the coordinator with the job's result or
// error; a server or worker with none when the job ended well, or the reason it stopped
// (the job failed, the coordinator went away or refused it).
#pragma once

#include <memory>

#include "actors/coordinator.hpp"
#include "actors/pipeline_stage.hpp"
#include "core/ring_lanes.hpp"
#include "monitoring/observability.hpp"
#include "net/node_options.hpp"
#include "net/node_system.hpp"
#include "train/dataset.hpp"
#include "train/model.hpp"
#include "transport/lane.hpp"

namespace troupe {

// Reaches the coordinator at plan.join (retrying until plan.connect_timeout_s: nodes start
// in any order) and checks that it speaks this version's protocol.
caf::expected<coordinator_actor> reach_coordinator(caf::actor_system& sys, const node_plan& plan);
// This node's proof of the job's secret for joining `coordinator` as `role` (Note [Join proofs]).
std::string proof_for(caf::actor_system& sys, const node_plan& plan, const char* role,
                      const coordinator_actor& coordinator);

// What a coordinator node does with its job's end, before its actor system is torn
// down: says it (the result or the error), saves what it must, and returns the process's
// exit code. The node then tears down; a teardown stuck past its limit leaves the process
// with `if_stuck` of that code (Note [A node's teardown] in net/node_system.cpp).
struct coordinator_end {
  std::function<int(caf::expected<job_result>&)> conclude;
  std::function<int(int code)> if_stuck;
};

// job must be prepared (prepare_job) and m its model (a key-value job's: model::none(),
// with no data). on_listening gets the bound address. Returns end.conclude's exit code.
int run_coordinator_node(const node_plan& plan, const job_spec& job, const model& m,
                         std::shared_ptr<const dataset_split> data, job_callbacks cb, const observability& obs,
                         const std::function<void(const endpoint&)>& on_listening, const coordinator_end& end,
                         std::optional<resume_point> resume = std::nullopt);

// The job's tag for the same-host fast path (empty when the plan turns it off), after
// removing the segments a crashed process of the job left behind.
std::string fast_path_tag(const node_plan& plan);

// This node's end of the bulk lanes (Note [Bulk lanes] in transport/lane.hpp), from its plan:
// TLS with its files when it has them, its handshake and connection timeouts. None when the
// plan turns lanes off; a shard that cannot listen on any port runs without (a warning).
expected<std::shared_ptr<lane::shard_end>> shard_lanes_for(const node_plan& plan);
expected<std::shared_ptr<lane::member_end>> member_lanes_for(const node_plan& plan);
// A worker's ends of the bulk lanes between ring neighbours (Note [Ring lanes] in
// core/ring_lanes.cpp), made when its member first needs them: a listener on its listen
// host (--lane-port, else any free port) for its previous neighbour, and a dialler that
// wants a worker's certificate for its next one. Unset when the plan turns lanes off.
expected<ring_lane_ends> ring_lanes_for(const node_plan& plan);

// A server or a worker joins its job again each time the coordinator restarts it in place,
// and, with plan.coordinator_timeout_s, when its coordinator is lost and comes back (Note
// [Joining again] in net/node.cpp); the error is the role's last end. `if_stuck`: Note [A
// node's teardown] in net/node_system.cpp.
caf::error run_server_node(const node_plan& plan, const observability& obs, stuck_teardown_exit if_stuck = {});

// data_dir: where this node finds the dataset (empty: the directory the job names).
caf::error run_worker_node(const node_plan& plan, const std::string& data_dir, const observability& obs,
                           compute_options compute = {}, stuck_teardown_exit if_stuck = {});

}  // namespace troupe
