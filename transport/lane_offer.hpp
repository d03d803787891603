// lane_offer: what a shard tells a member that asked for a bulk lane (Note [Bulk lanes] in
// transport/lane.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

// Shard -> member, asked with lane_open_atom: where the shard's lane listens and the
// one-time token (32 bytes) that binds the member's two lane connections to its rank.
struct lane_offer {
  std::uint16_t port = 0;
  std::string token;
};

}  // namespace troupe
