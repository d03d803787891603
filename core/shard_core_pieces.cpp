// shard_core: a gradient pushed in pieces (Note [Gradient pieces] below), assembled
// per member until it covers the member's part, then taken as a whole push; a bad piece
// refuses its clock's whole gradient.
//
// Note [Gradient pieces]
// A member may push its gradient of one clock in pieces (DDP-style buckets: each layer's
// gradient leaves as soon as backward has produced it, while the layers below are still
// computing). A piece names where it starts in the member's part and its length. The
// core copies pieces into one buffer per member; when they cover the part exactly once,
// the buffer is pushed as a whole gradient would be, so the update, the round, the
// version and the staleness are those of an unsplit push and a sync result is bitwise the
// same with or without pieces. Until then a piece is answered with the current version;
// a piece that is refused (a bad extent, an overlap, NaN, unreadable) refuses the whole
// gradient of that clock as a refused push would (the member's clock moves on; a sync
// round counts a submission that adds nothing), and every later piece of that clock is
// refused with the same code. A member that leaves or rejoins loses its open pieces.
#include <algorithm>
#include <iterator>
#include <string>

#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

shard_core::push_outcome shard_core::push_piece(std::uint32_t member, std::int64_t clock, std::int64_t base_version,
                                                tensor grad, const gradient_receipt& how) {
  const kv_part_id id = part_of(member);
  part_state& part = parts_.at(id);
  const std::int64_t n = part.numel();
  const std::int64_t offset = how.piece_offset;
  const std::int64_t numel = how.piece_numel == 0 ? n : how.piece_numel;
  const std::string what = "the piece [" + std::to_string(offset) + ", +" + std::to_string(numel) + ") of worker " +
                           std::to_string(member) + "'s clock-" + std::to_string(clock) + " gradient";
  if (auto v = voided_.find(member); v != voided_.end() && v->second.first == clock)
    return reject({v->second.second.code, what + ": an earlier piece was refused (" + v->second.second.detail + ")"},
                  part.version);
  if (late(part, clock)) {
    part.partial.erase(member);
    return drop_late(part, member);
  }
  if (auto bad = check_clock(part, member, clock)) return reject(*bad, part.version);
  partial_gradient& p = part.partial[member];
  if (p.buffer.empty() || p.clock != clock)
    p = partial_gradient{clock, base_version, 0, tensor::uninitialized({n}), {}};
  // Refuses the clock's whole gradient (Note [Gradient pieces]).
  const auto refuse = [&](errc e, const std::string& why) {
    part.partial.erase(member);
    const fault f{e, what + ": " + why};
    voided_[member] = {clock, f};
    return submit(member, clock, base_version, tensor(), f, false);
  };
  if (!how.unreadable.empty()) return refuse(errc::malformed, how.unreadable);
  if (offset < 0 || numel < 0 || offset > n || numel > n - offset)
    return refuse(errc::bad_shape, "it reaches outside the sender's slice of " + std::to_string(n) + " floats");
  if (auto e = check_tensor(part, id, grad, numel, how.finite)) return refuse(e->code, e->detail);
  auto next = p.pieces.lower_bound(offset);
  const bool overlaps_next = next != p.pieces.end() && next->first < offset + numel;
  const bool overlaps_prev = next != p.pieces.begin() && std::prev(next)->first + std::prev(next)->second > offset;
  if (overlaps_next || overlaps_prev) return refuse(errc::duplicate, "it overlaps a piece already pushed");
  copy(p.buffer.view().flat(offset, numel), grad.view());
  p.pieces.emplace(offset, numel);
  p.covered += numel;
  if (p.covered < n) {
    push_outcome pending;
    pending.version = part.version;
    pending.staleness = std::max<std::int64_t>(0, pending.version - p.base_version);
    return pending;
  }
  tensor full = std::move(p.buffer);
  const std::int64_t base = p.base_version;
  part.partial.erase(member);
  return submit(member, clock, base, std::move(full), std::nullopt, true);  // every piece was checked
}

}  // namespace troupe
