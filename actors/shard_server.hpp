// The shard server actor. It joins the coordinator, initialises its key ranges of the
// model from the job's seed (exactly as a local run would), and then serves pushes and
// pulls through shard_core. Pulls the core holds become response promises, answered when
// the core releases them. It stops when the coordinator goes away.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "actors/protocol.hpp"
#include "monitoring/observability.hpp"
#include "transport/lane.hpp"

namespace troupe {

// Spawns a shard that joins `coordinator` once told where workers can reach it. The
// handle is the local one; publish it as a shard_actor. fast_path_tag: the job's tag for
// the same-host fast path (Note [Same-host fast path] in transport/shared_slots.hpp); empty:
// every tensor travels in its message. lanes: this node's end of the bulk lanes to members
// on other hosts (Note [Bulk lanes] in transport/lane.hpp); none: tensors go in the messages.
local_shard_actor spawn_shard_server(caf::actor_system& sys, coordinator_actor coordinator, std::string job_id,
                                     std::chrono::milliseconds join_timeout, observability obs = {},
                                     std::string fast_path_tag = {},
                                     std::shared_ptr<lane::shard_end> lanes = nullptr);
// Tells the shard to join, advertising host:port (empty host: one process, no address)
// and proving the job's secret with `proof` (Note [Join proofs]; empty: none).
void join_as_shard(const local_shard_actor& shard, std::string host, std::uint16_t port, std::string proof = {});

}  // namespace troupe
