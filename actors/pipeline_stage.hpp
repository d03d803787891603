// The pipeline_stage actor: a member of a job that trains one stage of the model for one
// data-parallel replica (a plain worker is the one-stage case; "worker" and "member" in
// logs and metrics mean it). It is the shell around member_core (core/member_core.hpp),
// which holds the training loop and its checks: the shell joins the coordinator, wires
// the member to its shards and pipeline neighbours (member_wiring.cpp), decodes messages
// into calls of the core and carries out the actions the core returns.
//
// It runs detached (its own thread) by default, so its BLAS calls never stall CAF's
// scheduler.
#pragma once

#include <caf/io/middleman_actor.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "actors/protocol.hpp"
#include "core/member_core.hpp"
#include "core/ring_lanes.hpp"
#include "transport/lane.hpp"

namespace troupe {

struct stage_options {
  std::string job_id;
  std::int32_t wanted_rank = -1;  // worker_join::wanted_rank
  // How the member gets its data, where it computes, what it reports to
  // (member_setup in core/member_core.hpp).
  std::function<expected<std::shared_ptr<const dataset_split>>(const job_spec&)> data;
  compute_options compute;
  // Where it says it runs, for --local-reduce's groups (Note [Local groups] in
  // core/local_groups.cpp); empty: member_locality(compute.where), the GPUs of one
  // machine or one process on the CPU.
  std::string locality;
  observability obs;
  std::chrono::milliseconds join_timeout{60000};
  // Connects to shards and neighbours by address (a cluster node: plain or TLS
  // middleman). Without it the handles in the welcome are used as they are.
  std::optional<caf::io::middleman_actor> connector;
  // Told before each connection by address which role the peer there must hold: "server"
  // for a shard, "worker" for a stage; a TLS node checks the peer's certificate against it
  // (Note [Certificate roles] in net/tls_handshake_guard.cpp). Optional.
  std::function<void(const std::string& host, std::uint16_t port, const char* role)> expect_peer;
  // The job's tag for the same-host fast path to remote shards (Note [Same-host fast path]
  // in transport/shared_slots.hpp); empty: every tensor travels in its message.
  std::string fast_path_tag;
  // Pushes and pulls to those shards through the channels' doorbells once they listen
  // (Note [Doorbells] in transport/doorbell.hpp); false: as actor messages.
  bool doorbells = true;
  // This node's end of the bulk lanes to shards on other hosts (Note [Bulk lanes] in
  // transport/lane.hpp); none: tensors go in the messages.
  std::shared_ptr<lane::member_end> lanes;
  // --mode allreduce between hosts: this node's ends of the bulk lanes between ring
  // neighbours (Note [Ring lanes] in core/ring_lanes.cpp); unset: ring pieces go in the
  // messages.
  ring_lane_ends ring_lanes;
  // On its own thread (compute blocks). Off only for tests under CAF's deterministic
  // scheduler with simulated compute.
  bool detached = true;
};

// Spawns a member; it joins once join_as_member tells it where neighbours reach it. The
// handle is the local one; publish it as a stage_actor.
local_stage_actor spawn_pipeline_stage(caf::actor_system& sys, coordinator_actor coordinator, stage_options opts);

// Tells a member to join its coordinator; host/port: where it is published for its
// pipeline neighbours (empty in one process); proof: of the job's secret (Note [Join
// proofs] in net/job_secret.hpp; empty: none).
void join_as_member(const local_stage_actor& member, std::string host, std::uint16_t port, std::string proof = {});

}  // namespace troupe
