// A shard server outside any job, for benchmarks and tests of the shard itself: a
// stand-in coordinator that welcomes exactly one shard into `job` as shard 0, holding one
// key range of `numel` floats, then admits job.workers members in the order they join
// (ranks 0, 1, ...). Once all have joined it starts the shard with them, so that the
// shard serves each rank only from the actor that joined as it (Note [Members are
// identities]), and welcomes each with the shard's handle. More members are refused;
// progress reports are ignored. Its local handle also takes lone_leave, lone_snapshot and
// lone_stats, which it passes on to the shard as the shard's coordinator.
#pragma once

#include <cstdint>

#include "actors/protocol.hpp"

namespace troupe {

// Local triggers (Note [Type IDs and local triggers]).
struct lone_leave {
  std::uint32_t rank = 0;
};
struct lone_snapshot {};
struct lone_stats {};

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::lone_leave)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::lone_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::lone_stats)

namespace troupe {

using lone_coordinator_actor =
    coordinator_actor::extend<caf::reacts_to<lone_leave>, caf::replies_to<lone_snapshot>::with<params_reply>,
                              caf::replies_to<lone_stats>::with<shard_stats>>;

lone_coordinator_actor spawn_lone_coordinator(caf::actor_system& sys, job_spec job, std::int64_t numel);

}  // namespace troupe
