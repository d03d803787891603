// shard_counters: what a shard core counts of the gradients and pulls it served, for the
// coordinator's statistics and the shard's metrics.
#pragma once

#include <array>
#include <cstdint>
#include <map>

#include "base/errc.hpp"

namespace troupe {

inline constexpr int staleness_buckets = 8;  // 0, 1, 2, 3, 4, 5-8, 9-16, >16
int staleness_bucket(std::int64_t staleness);

struct shard_counters {
  std::int64_t updates = 0;    // optimizer steps applied
  std::int64_t gradients = 0;  // gradients accepted
  std::int64_t rejected = 0;   // gradients or pulls refused
  std::int64_t late = 0;       // gradients (or pieces) dropped: their round closed without them
  std::map<errc, std::int64_t> rejected_by;
  std::int64_t pulls = 0;       // pulls answered
  std::int64_t pulls_held = 0;  // of those, answered after being held
  std::int64_t staleness_sum = 0, staleness_count = 0, staleness_max = 0;
  std::array<std::int64_t, staleness_buckets> staleness_hist{};
};

}  // namespace troupe
