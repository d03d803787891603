// environment_join: a key-value store's process joining the job that `troupe launch`
// started, from the TROUPE_* environment it sets (TLS, the job's secret, the
// coordinator's address, the worker index), as a member with a node's actor system of
// its own (client/remote_transport.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "client/kv_transport.hpp"

namespace troupe::kv {

// Joins the job that `env` describes (TROUPE_COORDINATOR, TROUPE_JOB_ID, TROUPE_TLS_DIR
// or TROUPE_INSECURE_NETWORK, TROUPE_SECRET_FILE), asking for rank TROUPE_WORKER_INDEX
// when it is set. `type` is the store type asked for (dist_sync, ...), checked against
// the job's mode; "dist" takes the job's mode. What is missing or malformed in `env` is
// refused by name before anything is started.
or_fault<std::unique_ptr<kv_transport>> join_from_environment(const std::map<std::string, std::string>& env,
                                                             const std::string& type);

// TROUPE_WORKER_INDEX in `env`: -1 when unset or empty; an error naming the variable
// when it is not a non-negative integer.
or_fault<std::int32_t> worker_index(const std::map<std::string, std::string>& env);

}  // namespace troupe::kv
