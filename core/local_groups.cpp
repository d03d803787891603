// local_groups: grouping workers by locality.
#include "core/local_groups.hpp"

#include <map>

namespace troupe {

// Note [Local groups]
// With --local-reduce (sync, one stage), workers that report the same locality form a
// local group: after each backward they all-reduce their gradients among themselves
// (NCCL between the GPUs of a node; threads on the CPU backend), and only the group's
// leader (its lowest rank) pushes the sum and pulls the new parameters, which it then
// shares with the group the same way (the others all-reduce zeros onto its copy). The
// shards see one member per group: a sync round sums the leaders' sums, in rank order,
// which is the same sum as every worker's gradient in rank order. The leader makes the
// communicator's id; it reaches the others through the coordinator (group_atom). A group
// whose member dies fails as a whole (its collectives fail) and is not replaced.
std::vector<std::vector<std::uint32_t>> local_groups(const std::vector<std::string>& localities) {
  std::map<std::string, std::vector<std::uint32_t>> by_locality;
  for (std::uint32_t r = 0; r < localities.size(); ++r)
    if (!localities[r].empty()) by_locality[localities[r]].push_back(r);
  std::vector<std::vector<std::uint32_t>> groups(localities.size());
  for (const auto& [where, ranks] : by_locality)
    if (ranks.size() >= 2)
      for (std::uint32_t r : ranks) groups[r] = ranks;
  return groups;
}

}  // namespace troupe
