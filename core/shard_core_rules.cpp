// shard_core: what --async-rule needs of the shard (Note [Momentum of asynchrony]
// and Note [Delay compensation] in core/update_rules.hpp): who pushes to a slice, and each
// member's parameters as its pulls were answered; when a sync round is complete, with
// --backup-workers without its slowest members (Note [Backup workers]); and which members
// the ssp bound waits for (Note [Stragglers outside the bound]).
#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

std::uint32_t shard_core::pushers(std::uint32_t stage) const {
  std::uint32_t n = 0;
  for (const auto& [rank, m] : members_) n += m.live && m.stage == stage;
  return n;
}

void shard_core::answered(std::uint32_t worker, std::int64_t offset, std::int64_t numel) {
  if (cfg_.rule != async_rule::dcasgd || cfg_.mode == sync_mode::sync || !members_.count(worker)) return;
  const std::int64_t n = slice_numel(worker);
  tensor& mine = pulled_[worker];
  if (mine.numel() != n) {  // no copy yet: the whole slice as it is now stands for what it holds
    mine = pack_slice(worker, params());
    return;
  }
  if (numel == 0) {
    pack_slice_into(worker, params(), mine);
    return;
  }
  if (whole_shard(worker)) {  // the piece lies in params as it lies in the slice
    copy(mine.view().flat(offset, numel), params().view().flat(offset, numel));
    return;
  }
  copy(mine.view().flat(offset, numel), piece_for(worker, offset, numel));
}

const_tensor_view shard_core::compensated(std::uint32_t worker, const tensor& grad) {
  auto it = pulled_.find(worker);
  if (cfg_.rule != async_rule::dcasgd || it == pulled_.end() || it->second.numel() != grad.numel()) return grad;
  if (compensated_.numel() != grad.numel()) compensated_ = tensor::uninitialized({grad.numel()});
  if (whole_shard(worker)) {
    compensate_delay(compensated_, grad, params(), it->second, cfg_.dc_lambda);
  } else {
    if (packed_now_.numel() != grad.numel()) packed_now_ = tensor::uninitialized({grad.numel()});
    pack_slice_into(worker, params(), packed_now_);
    compensate_delay(compensated_, grad, packed_now_, it->second, cfg_.dc_lambda);
  }
  return compensated_;
}

bool shard_core::round_complete() const {
  // Per stage: the live members the round waits for, and how many of them submitted.
  std::map<std::uint32_t, std::pair<std::int64_t, std::int64_t>> due;
  for (const auto& [rank, m] : members_) {
    if (!m.live || m.from_round > version_) continue;
    auto& [live, submitted] = due[m.stage];
    ++live;
    submitted += static_cast<std::int64_t>(round_.count(rank));
  }
  if (due.empty()) return false;  // nobody left to serve; the coordinator ends the job
  for (const auto& [stage, d] : due)
    if (d.second < std::max<std::int64_t>(1, d.first - cfg_.backup_workers)) return false;
  return true;
}

bool shard_core::late(std::int64_t clock) const {
  return cfg_.mode == sync_mode::sync && cfg_.backup_workers > 0 && clock < version_;
}

shard_core::push_outcome shard_core::drop_late() {
  ++counters_.late;
  push_outcome out;
  out.version = version_;
  out.late = true;
  return out;
}

void shard_core::set_straggler(std::uint32_t worker, bool slow) {
  auto it = members_.find(worker);
  if (cfg_.mode != sync_mode::ssp || it == members_.end() || !it->second.live) return;
  member& m = it->second;
  m.named_straggler = slow;
  if (slow)
    m.outside_bound = true;
  else if (m.completed >= slowest_in_bound())
    m.outside_bound = false;  // else once it has caught up (push_on_arrival)
  release_ready();
}

bool shard_core::straggler(std::uint32_t worker) const {
  auto it = members_.find(worker);
  return it != members_.end() && it->second.outside_bound;
}

std::int64_t shard_core::slowest_in_bound() const {
  std::int64_t inside = std::numeric_limits<std::int64_t>::max();
  for (const auto& [rank, m] : members_)
    if (m.live && !m.outside_bound) inside = std::min(inside, m.completed);
  return inside == std::numeric_limits<std::int64_t>::max() ? slowest_completed() : inside;
}

}  // namespace troupe
