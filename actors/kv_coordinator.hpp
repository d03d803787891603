// The coordinator actor of a key-value job (the client library's): the shell around
// kv_job_core (core/kv_job_core.hpp). It speaks the same published interface as a
// training job's coordinator (coordinator_actor), so shard servers and members join it
// the same way; it answers the key-value calls, refuses training reports, and ends when
// every member has left.
#pragma once

#include "actors/coordinator.hpp"

namespace troupe {

// job.kv must be set. The handle is the local one (run_request waits for the result);
// publish it as a coordinator_actor.
local_coordinator_actor spawn_kv_coordinator(caf::actor_system& sys, job_spec job, job_callbacks cb, join_gate gate = {});

}  // namespace troupe
