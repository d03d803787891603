// member_slices: a stage's slices of the shards and its gradient buckets' pieces of them.
#include "core/member_slices.hpp"

namespace troupe {

member_slices::member_slices(const key_table& table, const stage_span& span, const model& stage,
                             std::int64_t bucket_bytes, bool talks_to_shards) {
  for (std::uint32_t s = 0; s < table.shards(); ++s) {
    ranges_.push_back(stage_ranges(table.ranges_of(s), span));
    std::int64_t n = 0;
    for (const auto& r : ranges_.back()) n += r.length;
    numel_.push_back(n);
    if (n > 0 && talks_to_shards) active_.push_back(s);
  }
  buckets_ = plan_buckets(stage, bucket_bytes);
  for (std::uint32_t s = 0; s < table.shards(); ++s) {
    pieces_.emplace_back();
    for (const gradient_bucket& b : buckets_) pieces_.back().push_back(piece_of(ranges_[s], b.lo, b.hi));
  }
}

}  // namespace troupe
