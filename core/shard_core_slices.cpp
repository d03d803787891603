// shard_core: a training member's slice of the shard's buffer (Note [Slices]
// below), which the shard keeps as its stage's part: its length, packing a buffer laid out
// like the parameters into it, the parameters a pull is answered with, a layer-by-layer
// pull's piece of them, and the whole buffer assembled from the stages' parts.
//
// Note [Slices]
// Members are the actors that push and pull: data-parallel workers, or the stages of
// pipeline replicas. In a training job a member of stage k owns the slice of the shard's
// buffer (its key ranges concatenated in offset order) that holds stage k's parameters
// (for a plain worker, stage 0 of 1: the whole buffer); the shard keeps that slice as one
// part, packed, and the member pushes and pulls exactly it. A whole buffer's part is the
// buffer itself, which a pull's answer shares without a copy (Note [Lent values]).
#include <algorithm>
#include <string>

#include "base/check.hpp"
#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

tensor shard_core::params() const {
  TROUPE_CHECK(training_, "a key-value job's shard has no buffer");
  if (parts_.size() == 1) {
    const part_state& only = parts_.begin()->second;
    if (only.slice.size() == 1 && only.slice[0].first == 0 && only.slice[0].second == numel_) return only.value.lend();
  }
  tensor out({numel_});  // elements no stage keeps stay 0
  for (const auto& [id, p] : parts_) {
    std::int64_t pos = 0;
    for (const auto& [off, len] : p.slice) {
      copy(out.view().flat(off, len), p.value.get().view().flat(pos, len));
      pos += len;
    }
  }
  return out;
}

std::int64_t shard_core::slice_numel(std::uint32_t member) const {
  const part_state* p = find_part(member);
  return p ? p->numel() : 0;
}

tensor shard_core::pack_slice(std::uint32_t member, const_tensor_view buffer) const {
  tensor out = tensor::uninitialized({slice_numel(member)});
  pack_slice_into(member, buffer, out);
  return out;
}

void shard_core::pack_slice_into(std::uint32_t member, const_tensor_view buffer, tensor_view out) const {
  const part_state* p = find_part(member);
  TROUPE_CHECK(p && out.numel() == p->numel(), "pack_slice_into: the output holds " + std::to_string(out.numel()) +
                                                   " elements, the slice " + std::to_string(slice_numel(member)));
  std::int64_t pos = 0;
  for (const auto& [off, len] : p->slice) {
    copy(out.flat(pos, len), buffer.flat(off, len));
    pos += len;
  }
}

tensor shard_core::params_for(std::uint32_t member) const {
  const part_state* p = find_part(member);
  TROUPE_CHECK(p != nullptr, "params_for: worker " + std::to_string(member) + " has no part on this shard");
  return p->value.lend();
}

std::string shard_core::check_piece(std::uint32_t member, std::int64_t offset, std::int64_t numel) const {
  const std::int64_t n = slice_numel(member);
  if (offset >= 0 && numel > 0 && offset <= n && numel <= n - offset) return {};
  return "the piece [" + std::to_string(offset) + ", +" + std::to_string(numel) +
         ") does not lie in the sender's slice of " + std::to_string(n) + " floats of shard " +
         std::to_string(cfg_.index);
}

tensor shard_core::piece_for(std::uint32_t member, std::int64_t offset, std::int64_t numel) const {
  TROUPE_CHECK(check_piece(member, offset, numel).empty(), "piece_for: " + check_piece(member, offset, numel));
  tensor out = tensor::uninitialized({numel});
  copy(out, find_part(member)->value.get().view().flat(offset, numel));
  return out;
}

}  // namespace troupe
