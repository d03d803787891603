// remote_transport: a kv_transport that is a member of a key-value job's actors, through
// a kv_member actor (client/kv_member.hpp). It either owns a node's actor system built
// from the TROUPE_* environment that `troupe launch` sets (TLS, the job's secret, the
// coordinator's address), or joins a coordinator in an actor system the caller owns (one
// process: tests and embedding). A push copies the caller's floats into one message per
// shard, or into a slot of the same-host fast path (core/channel_pool.hpp) when the
// shard is a process on this host; a pull's reply is copied into the caller's arrays from
// the message or the slot.
#pragma once

#include <memory>

#include "client/kv_transport.hpp"
#include "client/kv_member.hpp"

namespace troupe::kv {

// Joins the job that `env` describes (TROUPE_COORDINATOR, TROUPE_JOB_ID, TROUPE_TLS_DIR
// or TROUPE_INSECURE_NETWORK, TROUPE_SECRET_FILE), asking for rank TROUPE_WORKER_INDEX
// when it is set. `type` is the store type asked for (dist_sync, ...), checked against
// the job's mode; "dist" takes the job's mode.
or_fault<std::unique_ptr<kv_transport>> join_from_environment(const std::map<std::string, std::string>& env,
                                                             const std::string& type);

// TROUPE_WORKER_INDEX in `env`: -1 when unset or empty; an error naming the variable
// when it is not a non-negative integer.
or_fault<std::int32_t> worker_index(const std::map<std::string, std::string>& env);

// Joins `opts.coordinator` in `sys`, which must outlive the transport. In one process the
// message already shares its tensors, so the fast path is off unless a test names the
// job's tag in `fast_path_tag` (the shards must have it too).
or_fault<std::unique_ptr<kv_transport>> join_in_process(caf::actor_system& sys, member_options opts,
                                                       const std::string& job_id,
                                                       const std::string& fast_path_tag = {});

}  // namespace troupe::kv
