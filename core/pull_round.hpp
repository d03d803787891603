// pull_round: a training member's pulls of one step (core/member_core.hpp), free of
// compute: which pulls a step makes (a whole slice per shard, or with layer-by-layer
// pulls one piece per gradient bucket: Note [Gradient buckets] in
// core/gradient_buckets.hpp), which pull an answer answers (an answer nobody asked for
// is told apart, so the member stops instead of training on it), which buckets an answer
// completes, the version each shard's parameters come from, and with --pull-precision
// 2bit the view of each slice the member holds (Note [2-bit pulls] in core/pull_views.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/member_slices.hpp"
#include "core/kv_messages.hpp"
#include "tensor/tensor.hpp"

namespace troupe {

class pull_round {
 public:
  pull_round() = default;
  // For a member whose slices are `slices`; `two_bit`: --pull-precision 2bit, whose pulls
  // ask for whole slices (answered as changes to the view held).
  pull_round(const member_slices& slices, bool two_bit);

  // The pulls of step `clock` by member `rank` of pipeline stage `stage`, one round at a
  // time (the previous one answered). A shard for which `in_pieces` says so (and not in 2 bits) is asked for its
  // piece of each bucket, the last bucket (the lowest layers) first; any other for its
  // whole slice, and in 2 bits for the full values when no view is held.
  std::vector<kv_pull> start(const member_slices& slices, std::uint32_t rank, std::uint32_t stage, std::int64_t clock,
                             const std::function<bool(std::uint32_t)>& in_pieces);

  // Where an answer of shard s for [piece_offset, +piece_numel) belongs. `asked` false: it
  // answers no pull of this round (a piece not asked for, or a slice answered twice);
  // else `bucket` is the piece's bucket (nullopt: the whole slice) and `numel` the count
  // of elements it must carry (0 for a shard past the job's).
  struct answer_place {
    bool asked = false;
    std::optional<std::size_t> bucket;
    std::int64_t numel = 0;
  };
  answer_place place_of(const member_slices& slices, std::uint32_t s, std::int64_t piece_offset,
                        std::int64_t piece_numel) const;

  // The answer of shard s at `version` is taken (a piece of `bucket`, or nullopt: its
  // whole slice): returns the buckets whose parameters are now all here, in index order.
  std::vector<std::size_t> took(const member_slices& slices, std::uint32_t s, std::optional<std::size_t> bucket,
                                std::int64_t version);

  // Whether answers are still due this round.
  bool open() const { return pending_ > 0; }
  // Layers [0, n) whose parameters are all here this round (every layer when nothing
  // was pulled); `layers`: the stage's count.
  int layers_ready(const member_slices& slices, int layers) const;
  // The version of shard s's parameters in use: its answer's, or with pieces the oldest
  // piece's.
  std::int64_t base_version(std::uint32_t s) const { return s < base_version_.size() ? base_version_[s] : 0; }
  // --pull-precision 2bit: the view of shard s's slice this member holds (empty: none yet).
  tensor& view(std::uint32_t s) { return view_.at(s); }

 private:
  bool two_bit_ = false;
  std::size_t pending_ = 0;
  std::vector<int> bucket_missing_;             // per bucket: the answers still to come
  std::vector<std::vector<bool>> piece_asked_;  // per shard, per bucket: asked and not answered
  std::vector<bool> whole_asked_;               // per shard: its whole slice asked and not answered
  std::vector<std::int64_t> base_version_;      // per shard
  std::vector<tensor> view_;                    // per shard, in 2 bits
};

}  // namespace troupe
