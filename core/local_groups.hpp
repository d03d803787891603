// Local groups for --local-reduce (Note [Local groups] in local_groups.cpp): which
// workers share a node, and which of them talk to the shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

// For each worker (by rank), its local group in ascending rank order, or empty: workers
// with the same non-empty locality form a group when there are at least two of them.
std::vector<std::vector<std::uint32_t>> local_groups(const std::vector<std::string>& localities);

// Whether worker `rank`, of `group` (empty: none), pushes to and pulls from the shards:
// only a group's leader, its lowest rank, does.
inline bool pushes_to_shards(const std::vector<std::uint32_t>& group, std::uint32_t rank) {
  return group.empty() || group.front() == rank;
}

}  // namespace troupe
