// push_ledger: what a training member's pushes owe it.
#include "core/push_ledger.hpp"

#include <algorithm>
#include <utility>

namespace troupe {

push_ledger::push_ledger(const std::vector<std::int64_t>& residual_numel) : refused_clock_(residual_numel.size(), -1) {
  for (std::int64_t n : residual_numel) residual_.push_back(n > 0 ? tensor({n}) : tensor());
}

void push_ledger::sent(std::size_t bytes) {
  ++pending_;
  bytes_ += static_cast<std::int64_t>(bytes);
}

bool push_ledger::answered(std::int64_t clock, const kv_push_ack& ack) {
  if (pending_ > 0) --pending_;
  if (!ack.late) return false;
  open_round_ = std::max(open_round_, ack.versions.empty() ? 0 : ack.versions.front());
  const bool first = dropped_clocks_.insert(clock).second;
  while (dropped_clocks_.size() > 64) dropped_clocks_.erase(dropped_clocks_.begin());
  return first;
}

bool push_ledger::refused(std::uint32_t s, std::int64_t clock) {
  if (pending_ > 0) --pending_;
  if (s < refused_clock_.size() && refused_clock_[s] == clock) return false;
  if (s < refused_clock_.size()) refused_clock_[s] = clock;
  ++rejected_;
  return true;
}

std::int64_t push_ledger::take_dropped() { return std::exchange(dropped_unreported_, 0); }

}  // namespace troupe
