// The public optimizer_spec checked and turned into the shards' kv_optimizer.
#pragma once

#include "client/kv_transport.hpp"
#include "client/kvstore.hpp"

namespace troupe::kv {

// Why the spec is unusable (naming the setting), or the optimizer it asks for.
or_fault<kv_optimizer> to_kv_optimizer(const optimizer_spec& spec);

}  // namespace troupe::kv
