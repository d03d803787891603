// member_slices: where a training member's stage lies on the job's shards, and how its
// gradient is cut for them (Note [Gradient buckets] in core/gradient_buckets.hpp): the
// shards that hold part of the stage, each one's key ranges (stage-local offsets, in the
// order the shard's buffer keeps them) and slice size, the gradient buckets in the order
// backward completes them (one: pushes after backward), and each shard's piece of each
// bucket. Fixed once built from the welcome's key table; the member's core
// (core/member_core.hpp) packs and unpacks its pushes and pulls by it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/gradient_buckets.hpp"
#include "core/key_table.hpp"
#include "core/pipeline_layout.hpp"
#include "train/model.hpp"

namespace troupe {

class member_slices {
 public:
  member_slices() = default;
  // Stage `span` of the model (whose layers are `stage`) on the shards of `table`, its
  // gradient in buckets of at least `bucket_bytes` (0: one bucket). `talks_to_shards`
  // false: a local group's member whose leader talks to the shards, so none is active.
  member_slices(const key_table& table, const stage_span& span, const model& stage, std::int64_t bucket_bytes,
                bool talks_to_shards);

  std::uint32_t shards() const { return static_cast<std::uint32_t>(numel_.size()); }
  // The shards this member pulls from and pushes to, in index order.
  const std::vector<std::uint32_t>& active() const { return active_; }
  // The stage's part of shard s: its size (0 for none, or past the shards) and ranges.
  std::int64_t numel(std::uint32_t s) const { return s < numel_.size() ? numel_[s] : 0; }
  const std::vector<key_range>& ranges(std::uint32_t s) const { return ranges_.at(s); }

  const std::vector<gradient_bucket>& buckets() const { return buckets_; }
  bool bucketed() const { return buckets_.size() > 1; }
  // Shard s's piece of bucket k.
  const slice_piece& piece(std::uint32_t s, std::size_t k) const { return pieces_.at(s).at(k); }

 private:
  std::vector<std::uint32_t> active_;
  std::vector<std::vector<key_range>> ranges_;  // per shard
  std::vector<std::int64_t> numel_;             // per shard
  std::vector<gradient_bucket> buckets_;
  std::vector<std::vector<slice_piece>> pieces_;  // per shard, per bucket
};

}  // namespace troupe
