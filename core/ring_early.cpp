// ring_early: ring pieces of collectives not yet started here, held until they are.
#include "core/ring_early.hpp"

#include <utility>

namespace troupe {

ring_early::verdict ring_early::hold(ring_piece p, std::uint64_t number, std::uint64_t first, std::uint64_t ahead,
                                     std::size_t most) {
  if (number < first) return verdict::behind;
  if (number - first >= ahead) return verdict::too_far;
  if (count_ >= most) return verdict::too_many;
  held_[number].push_back(std::move(p));
  ++count_;
  return verdict::held;
}

std::vector<ring_piece> ring_early::take(std::uint64_t number) {
  auto it = held_.find(number);
  if (it == held_.end()) return {};
  std::vector<ring_piece> out = std::move(it->second);
  held_.erase(it);
  count_ -= out.size();
  return out;
}

}  // namespace troupe
