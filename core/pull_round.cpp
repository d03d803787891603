// pull_round: a training member's pulls of one step, and which of them are answered.
#include "core/pull_round.hpp"

#include <algorithm>
#include <limits>

namespace troupe {

pull_round::pull_round(const member_slices& slices, bool two_bit)
    : two_bit_(two_bit),
      piece_asked_(slices.shards()),
      whole_asked_(slices.shards(), false),
      base_version_(slices.shards(), 0),
      view_(slices.shards()) {}

std::vector<kv_pull> pull_round::start(const member_slices& slices, std::uint32_t rank, std::uint32_t stage,
                                       std::int64_t clock, const std::function<bool(std::uint32_t)>& in_pieces) {
  std::vector<kv_pull> out;
  pending_ = 0;
  if (slices.active().empty()) return out;
  const std::size_t buckets = slices.buckets().size();
  bucket_missing_.assign(buckets, 0);
  for (std::uint32_t s : slices.active()) {
    piece_asked_[s].assign(buckets, false);
    for (std::size_t k = 0; k < buckets; ++k) bucket_missing_[k] += slices.piece(s, k).numel > 0;
    if (two_bit_ || !in_pieces(s)) {
      whole_asked_[s] = true;
      out.push_back(step_pull(s, rank, stage, clock, two_bit_ && view_[s].empty()));
      continue;
    }
    base_version_[s] = std::numeric_limits<std::int64_t>::max();  // the oldest piece's, once in
    for (std::size_t k = buckets; k-- > 0;) {
      const slice_piece& p = slices.piece(s, k);
      if (p.numel == 0) continue;
      piece_asked_[s][k] = true;
      kv_pull r = step_pull(s, rank, stage, clock);
      if (p.numel < slices.numel(s)) {
        r.piece_offset = p.offset;
        r.piece_numel = p.numel;
      }
      out.push_back(r);
    }
  }
  pending_ = out.size();
  return out;
}

pull_round::answer_place pull_round::place_of(const member_slices& slices, std::uint32_t s, std::int64_t piece_offset,
                                              std::int64_t piece_numel) const {
  if (s >= slices.shards()) return {true, std::nullopt, 0};  // the caller refuses its shape
  const auto& asked = piece_asked_[s];
  if (std::find(asked.begin(), asked.end(), true) == asked.end())
    return {whole_asked_[s] && piece_numel == 0, std::nullopt, slices.numel(s)};
  for (std::size_t k = 0; k < slices.buckets().size(); ++k) {
    const slice_piece& p = slices.piece(s, k);
    const bool whole = p.numel == slices.numel(s);
    if (asked[k] && (whole ? piece_numel == 0 : piece_offset == p.offset && piece_numel == p.numel))
      return {true, k, p.numel};
  }
  return {false, std::nullopt, 0};
}

std::vector<std::size_t> pull_round::took(const member_slices& slices, std::uint32_t s,
                                          std::optional<std::size_t> bucket, std::int64_t version) {
  std::vector<std::size_t> complete;
  if (pending_ == 0 || s >= slices.shards()) return complete;
  --pending_;
  base_version_[s] = bucket ? std::min(base_version_[s], version) : version;
  if (!bucket) whole_asked_[s] = false;
  for (std::size_t k = 0; k < slices.buckets().size(); ++k) {
    if (slices.piece(s, k).numel == 0 || (bucket && k != *bucket)) continue;
    if (bucket) piece_asked_[s][k] = false;
    if (--bucket_missing_[k] == 0) complete.push_back(k);
  }
  return complete;
}

int pull_round::layers_ready(const member_slices& slices, int layers) const {
  if (bucket_missing_.empty()) return layers;  // nothing is pulled
  int top = 0;
  for (std::size_t k = slices.buckets().size(); k-- > 0 && bucket_missing_[k] == 0;)
    top = slices.buckets()[k].top_layer;
  return top;
}

}  // namespace troupe
