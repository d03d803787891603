// Partitioning the parameter vector into key ranges, and packing shard buffers.
#include "core/key_table.hpp"

#include <algorithm>
#include <cstring>

namespace troupe {

std::vector<key_range> key_table::ranges_of(std::uint32_t shard) const {
  std::vector<key_range> out;
  for (const auto& r : ranges)
    if (r.shard == shard) out.push_back(r);
  return out;
}

key_table partition_parameters(const model& m, std::uint32_t shards, std::int64_t bound) {
  TROUPE_CHECK(shards >= 1, "partition_parameters: no shards");
  if (bound <= 0) bound = shards == 1 ? m.num_params() + 1 : std::max<std::int64_t>(1024, m.num_params() / (4 * shards));
  key_table t;
  for (const auto& b : m.blocks()) {
    const std::int64_t pieces = (b.numel + bound - 1) / bound;
    for (std::int64_t i = 0; i < pieces; ++i) {
      const std::int64_t lo = b.numel * i / pieces, hi = b.numel * (i + 1) / pieces;
      t.ranges.push_back({0, b.index, b.offset + lo, hi - lo});
    }
  }
  // Largest first onto the least-loaded shard; ties broken by offset and shard index, so
  // every node computes the same table.
  std::vector<std::size_t> order(t.ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return t.ranges[a].length > t.ranges[b].length; });
  t.shard_numel.assign(shards, 0);
  for (std::size_t i : order) {
    const auto lightest = std::min_element(t.shard_numel.begin(), t.shard_numel.end()) - t.shard_numel.begin();
    t.ranges[i].shard = static_cast<std::uint32_t>(lightest);
    t.shard_numel[lightest] += t.ranges[i].length;
  }
  return t;
}

void pack_shard(tensor_view shard_buffer, const_tensor_view flat, const std::vector<key_range>& ranges) {
  float* dst = shard_buffer.data<float>();
  const float* src = flat.data<float>();
  std::int64_t pos = 0;
  for (const auto& r : ranges) {
    TROUPE_CHECK(r.offset + r.length <= flat.numel() && pos + r.length <= shard_buffer.numel(), "pack_shard bounds");
    std::memcpy(dst + pos, src + r.offset, sizeof(float) * r.length);
    pos += r.length;
  }
  TROUPE_CHECK(pos == shard_buffer.numel(), "pack_shard: buffer size does not match the ranges");
}

void unpack_shard(tensor_view flat, const_tensor_view shard_buffer, const std::vector<key_range>& ranges) {
  float* dst = flat.data<float>();
  const float* src = shard_buffer.data<float>();
  std::int64_t pos = 0;
  for (const auto& r : ranges) {
    TROUPE_CHECK(r.offset + r.length <= flat.numel() && pos + r.length <= shard_buffer.numel(), "unpack_shard bounds");
    std::memcpy(dst + r.offset, src + pos, sizeof(float) * r.length);
    pos += r.length;
  }
  TROUPE_CHECK(pos == shard_buffer.numel(), "unpack_shard: buffer size does not match the ranges");
}

}  // namespace troupe
