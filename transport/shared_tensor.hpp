// shared_tensor: the descriptor of a tensor that a same-host peer left in shared memory,
// which a message carries instead of the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

// A tensor left in a same-host peer's shared memory instead of the message (Note
// [Same-host fast path] in transport/shared_slots.hpp): the segment, the slot's offset and
// capacity in bytes, the ticket its writer stamped, and the tensor's dtype and extents.
// A ring mailbox's piece (Note [Ring mailboxes] in transport/ring_mailbox.hpp) uses the same
// fields, its ticket being the piece's end in the mailbox's stream.
// An empty segment: nothing is shared, the tensor travels in the message.
struct shared_tensor {
  std::string segment;
  std::uint64_t offset = 0;
  std::uint64_t capacity = 0;
  std::uint64_t ticket = 0;
  std::uint8_t dtype = 0;
  std::vector<std::int64_t> dims;
  bool empty() const { return segment.empty(); }
};

}  // namespace troupe
