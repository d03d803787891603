// The shard server actor. It joins the coordinator, initialises its key ranges of the
// model from the job's seed (exactly as a local run would), and then serves pushes and
// pulls through shard_core. Pulls the core holds become response promises, answered when
// the core releases them. It stops when the coordinator goes away.
#pragma once

#include <string>

#include "actors/protocol.hpp"

namespace troupe {

shard_actor spawn_shard_server(caf::actor_system& sys, coordinator_actor coordinator, std::string job_id);

}  // namespace troupe
