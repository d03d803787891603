// ring_seats: who sits in a --mode allreduce ring and where (Note [Rings of leaders] in
// ring_seats.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace troupe {

// The replicas whose stage i forms the ring of stage i, ascending: every replica, or with
// --local-reduce (one stage) only the leader of each local group. groups: each replica's
// local group as local_groups() gives it (empty: none; an empty vector: no groups).
std::vector<std::uint32_t> ring_replicas(std::uint32_t replicas, const std::vector<std::vector<std::uint32_t>>& groups);

// Where one replica sits in a ring: its index, the ring's size and the replicas before
// and after it (the same one when the ring has two).
struct ring_seat {
  std::uint32_t index = 0, size = 0, prev = 0, next = 0;
};

// The seat of `replica` in `ring`; nullopt when it is not in it or the ring has fewer
// than two members (there is nothing to reduce with).
std::optional<ring_seat> seat_in(const std::vector<std::uint32_t>& ring, std::uint32_t replica);

}  // namespace troupe
