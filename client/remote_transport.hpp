// remote_transport: a kv_transport that is a member of a key-value job's actors, through
// a kv_member actor (client/kv_member.hpp). It either owns a node's actor system (built
// from the TROUPE_* environment that `troupe launch` sets: client/environment_join.hpp),
// or joins a coordinator in an actor system the caller owns (one process: tests and
// embedding). A push copies the caller's floats into one message per
// shard, or into a slot of the same-host fast path (transport/channel_pool.hpp) when the
// shard is a process on this host; a pull's reply is copied into the caller's arrays from
// the message or the slot.
#pragma once

#include <memory>

#include "client/kv_transport.hpp"
#include "client/kv_member.hpp"

namespace troupe::kv {

// Joins `opts.coordinator` with a node's actor system (sys, configured by cfg) that the
// transport then owns, proving the job's secret with `proof`
// (client/environment_join.hpp builds them from the TROUPE_* environment).
or_fault<std::unique_ptr<kv_transport>> join_owning(std::unique_ptr<caf::actor_system_config> cfg,
                                                    std::unique_ptr<caf::actor_system> sys, member_options opts,
                                                    const std::string& fast_path_tag, const std::string& job_id,
                                                    const std::string& proof);

// Joins `opts.coordinator` in `sys`, which must outlive the transport. In one process the
// message already shares its tensors, so the fast path is off unless a test names the
// job's tag in `fast_path_tag` (the shards must have it too).
or_fault<std::unique_ptr<kv_transport>> join_in_process(caf::actor_system& sys, member_options opts,
                                                       const std::string& job_id,
                                                       const std::string& fast_path_tag = {});

}  // namespace troupe::kv
