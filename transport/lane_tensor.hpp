// lane_tensor: how a message names a tensor that travels on a bulk lane beside it.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

// A tensor sent on the bulk lane beside the message (Note [Bulk lanes] in transport/lane.hpp):
// the payload's ticket on its lane, and the tensor's dtype and extents. Ticket 0: none,
// the tensor is in the message (or in shared memory).
struct lane_tensor {
  std::uint64_t ticket = 0;
  std::uint8_t dtype = 0;
  std::vector<std::int64_t> dims;
  bool empty() const { return ticket == 0; }
};

}  // namespace troupe
