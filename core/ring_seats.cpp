// ring_seats: who sits in a --mode allreduce ring and where.
#include "core/ring_seats.hpp"

#include <algorithm>

namespace troupe {

// Note [Rings of leaders]
// In --mode allreduce stage i of every replica sums its gradient round a ring (Note [Ring
// all-reduce of gradients] in member_ring.cpp). With --local-reduce (one stage) the
// workers of one node first sum within their local group (NCCL between the GPUs of a
// machine, threads in rank order on the CPU), then only each group's leader, its lowest
// rank, goes round a ring of the leaders (and of workers in no group), which carries one
// gradient per node instead of one per worker; once the ring is done the leader gives
// the group its sum (the others contribute zeros) and every worker applies the same
// optimizer step, so all stay bitwise equal. The coordinator numbers the ring and sends
// each member its list (member_assignment::ring); a member whose replica is not in it
// takes no part in the ring, and a ring of one reduces nothing.
std::vector<std::uint32_t> ring_replicas(std::uint32_t replicas,
                                         const std::vector<std::vector<std::uint32_t>>& groups) {
  std::vector<std::uint32_t> ring;
  for (std::uint32_t r = 0; r < replicas; ++r)
    if (r >= groups.size() || groups[r].empty() || groups[r].front() == r) ring.push_back(r);
  return ring;
}

std::optional<ring_seat> seat_in(const std::vector<std::uint32_t>& ring, std::uint32_t replica) {
  const auto at = std::find(ring.begin(), ring.end(), replica);
  if (ring.size() < 2 || at == ring.end()) return std::nullopt;
  const auto n = static_cast<std::uint32_t>(ring.size());
  const auto i = static_cast<std::uint32_t>(at - ring.begin());
  return ring_seat{i, n, ring[(i + n - 1) % n], ring[(i + 1) % n]};
}

}  // namespace troupe
