// local_transport: a kv_transport whose shards live in this process, shared by the
// workers of one local group (kvstore::open_local_group). Every call runs at once on the
// caller's thread under the group's lock; a pull the shard holds (sync, ssp) completes on
// the thread whose push released it.
#pragma once

#include <memory>

#include "client/kv_transport.hpp"

namespace troupe::kv {

struct local_group_config {
  sync_mode mode = sync_mode::sync;
  std::uint32_t servers = 1;
  std::int32_t staleness = 2;
  std::int64_t big_array_bound = 0;
};

// `workers` transports, rank r at index r, over one set of shards.
std::vector<std::unique_ptr<kv_transport>> make_local_group(const local_group_config& cfg, std::uint32_t workers);

}  // namespace troupe::kv
