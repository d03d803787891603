// A shard server outside any job, for benchmarks and tests of the shard itself: a
// stand-in coordinator that welcomes exactly one shard into `job` as shard 0, holding one
// key range of `numel` floats, and refuses members. Progress reports are ignored.
#pragma once

#include <cstdint>

#include "actors/protocol.hpp"

namespace troupe {

coordinator_actor spawn_welcome_only_coordinator(caf::actor_system& sys, job_spec job, std::int64_t numel);

}  // namespace troupe
