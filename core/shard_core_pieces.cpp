// shard_core: a gradient pushed in pieces (Note [Gradient pieces] in the header), assembled
// per member until it covers the slice, then taken as a whole push; a bad piece refuses its
// clock's whole gradient.
#include <algorithm>
#include <iterator>
#include <string>

#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

shard_core::push_outcome shard_core::push_piece(std::uint32_t worker, std::int64_t clock, std::int64_t base_version,
                                                tensor grad, const gradient_receipt& how) {
  const std::int64_t n = slice_numel(worker);
  const std::int64_t offset = how.piece_offset;
  const std::int64_t numel = how.piece_numel == 0 ? n : how.piece_numel;
  const std::string what = "the piece [" + std::to_string(offset) + ", +" + std::to_string(numel) + ") of worker " +
                           std::to_string(worker) + "'s clock-" + std::to_string(clock) + " gradient";
  if (auto v = voided_.find(worker); v != voided_.end() && v->second.first == clock)
    return reject(v->second.second.code, what + ": an earlier piece was refused (" + v->second.second.detail + ")");
  if (late(clock)) {
    partial_.erase(worker);
    return drop_late();
  }
  if (auto late = check_clock(worker, clock)) return reject(late->code, std::move(late->detail));
  partial_gradient& p = partial_[worker];
  if (p.buffer.empty() || p.clock != clock) {
    p = partial_gradient{clock, base_version, 0, tensor::uninitialized({n}), {}};
  }
  // Refuses the clock's whole gradient (Note [Gradient pieces]).
  const auto refuse = [&](errc e, const std::string& why) {
    partial_.erase(worker);
    voided_[worker] = {clock, refusal{e, what + ": " + why}};
    return submit(worker, clock, base_version, tensor(), refusal{e, what + ": " + why}, false);
  };
  if (!how.unreadable.empty()) return refuse(errc::malformed, how.unreadable);
  if (offset < 0 || numel < 0 || offset > n || numel > n - offset)
    return refuse(errc::bad_shape, "it reaches outside the sender's slice of " + std::to_string(n) + " floats");
  std::string detail;
  if (auto e = check_tensor(grad, numel, detail, how.finite)) return refuse(*e, detail);
  auto next = p.pieces.lower_bound(offset);
  const bool overlaps_next = next != p.pieces.end() && next->first < offset + numel;
  const bool overlaps_prev = next != p.pieces.begin() && std::prev(next)->first + std::prev(next)->second > offset;
  if (overlaps_next || overlaps_prev) return refuse(errc::duplicate, "it overlaps a piece already pushed");
  copy(p.buffer.view().flat(offset, numel), grad.view());
  p.pieces.emplace(offset, numel);
  p.covered += numel;
  if (p.covered < n) {
    push_outcome pending;
    pending.version = version_for(worker);
    pending.staleness = std::max<std::int64_t>(0, pending.version - p.base_version);
    return pending;
  }
  tensor full = std::move(p.buffer);
  const std::int64_t base = p.base_version;
  partial_.erase(worker);
  return submit(worker, clock, base, std::move(full), std::nullopt, true);  // every piece was checked
}

}  // namespace troupe
