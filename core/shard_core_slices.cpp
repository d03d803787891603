// shard_core: each member's slice of the shard's buffer (Note [Slices] in the header): its
// length, packing a buffer laid out like the parameters into it, the parameters a pull is
// answered with, and a layer-by-layer pull's piece of them.
#include <algorithm>
#include <string>

#include "base/check.hpp"
#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

const shard_slice& shard_core::slice_of_stage(std::uint32_t stage) const {
  TROUPE_CHECK(stage < cfg_.stage_slices.size(), "no slice for this stage");
  return cfg_.stage_slices[stage];
}

bool shard_core::has_slice(std::uint32_t stage) const {
  for (const auto& r : slice_of_stage(stage))
    if (r.second > 0) return true;
  return false;
}

std::int64_t shard_core::slice_numel(std::uint32_t worker) const {
  auto it = members_.find(worker);
  const std::uint32_t stage = it == members_.end() ? 0 : it->second.stage;
  std::int64_t n = 0;
  for (const auto& r : slice_of_stage(stage)) n += r.second;
  return n;
}

tensor shard_core::pack_slice(std::uint32_t worker, const_tensor_view buffer) const {
  tensor out = tensor::uninitialized({slice_numel(worker)});
  pack_slice_into(worker, buffer, out);
  return out;
}

void shard_core::pack_slice_into(std::uint32_t worker, const_tensor_view buffer, tensor_view out) const {
  auto it = members_.find(worker);
  const std::uint32_t stage = it == members_.end() ? 0 : it->second.stage;
  const shard_slice& slice = slice_of_stage(stage);
  TROUPE_CHECK(out.numel() == slice_numel(worker), "pack_slice_into: the output holds " + std::to_string(out.numel()) +
                                                       " elements, the slice " + std::to_string(slice_numel(worker)));
  std::int64_t pos = 0;
  for (const auto& [off, len] : slice) {
    copy(out.flat(pos, len), buffer.flat(off, len));
    pos += len;
  }
}

bool shard_core::whole_shard(std::uint32_t worker) const {
  auto it = members_.find(worker);
  const shard_slice& slice = slice_of_stage(it == members_.end() ? 0 : it->second.stage);
  return slice.size() == 1 && slice[0].first == 0 && slice[0].second == numel();
}

tensor shard_core::params_for(std::uint32_t worker) const {
  if (whole_shard(worker)) return params_.lend();
  return pack_slice(worker, params());
}

std::string shard_core::check_piece(std::uint32_t worker, std::int64_t offset, std::int64_t numel) const {
  const std::int64_t n = slice_numel(worker);
  if (offset >= 0 && numel > 0 && offset <= n && numel <= n - offset) return {};
  return "the piece [" + std::to_string(offset) + ", +" + std::to_string(numel) +
         ") does not lie in the sender's slice of " + std::to_string(n) + " floats of shard " +
         std::to_string(cfg_.index);
}

tensor shard_core::piece_for(std::uint32_t worker, std::int64_t offset, std::int64_t numel) const {
  TROUPE_CHECK(check_piece(worker, offset, numel).empty(), "piece_for: " + check_piece(worker, offset, numel));
  auto it = members_.find(worker);
  const shard_slice& slice = slice_of_stage(it == members_.end() ? 0 : it->second.stage);
  tensor out = tensor::uninitialized({numel});
  std::int64_t pos = 0, written = 0;
  for (const auto& [off, len] : slice) {
    const std::int64_t a = std::max(offset, pos), b = std::min(offset + numel, pos + len);
    if (a < b) {
      copy(out.view().flat(written, b - a), params().view().flat(off + (a - pos), b - a));
      written += b - a;
    }
    pos += len;
  }
  return out;
}

}  // namespace troupe
