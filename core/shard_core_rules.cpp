// shard_core: what --async-rule needs of the shard (Note [Delay compensation] in
// core/update_rules.hpp): each member's copy of a part as its pulls were answered; when a
// sync round is complete, with --backup-workers without its slowest members (Note [Backup
// workers]); and which members the ssp bound waits for (Note [Stragglers outside the
// bound]).
//
// Note [Backup workers]
// With backup_workers b > 0 (sync only), a part's round closes as soon as it has the
// gradients of all but b of its live pushers (at least one), as in "Revisiting
// Distributed Synchronous SGD" (Chen et al.): the b slowest are not waited for. A gradient
// for a round that has closed is late: it is dropped, counted, and answered without an
// error, with the open round as its version, so its sender skips to that round (its
// samples of the rounds in between are not trained, and it reports the late gradient's
// samples as dropped). The sum is in rank order over the gradients that made it, so a
// round's result depends on which members were first: with b > 0 a run is not bitwise
// reproducible. Each part closes its rounds on its own, so one member's gradient of a
// round may make it on one shard and be late on another (each variable's accumulator
// in TensorFlow's SyncReplicasOptimizer behaves the same way). The lr schedule scales
// for the gradients a round sums, workers - b (Note [Critical batch]).
//
// Note [Stragglers outside the bound]
// In ssp the coordinator names a member whose compute per step is well above the median
// a straggler (Note [Naming stragglers] in core/job_stragglers.cpp) and says so to every
// shard. While it is one, the bound leaves it out: a pull at clock c waits only until
// every other live member has pushed the part c - s times, so one slow machine no longer
// holds everyone at its pace. Its gradients are still applied, at lr / max(1, staleness)
// (--staleness-lr's rule, for its gradients alone), since they are computed on
// parameters many updates old. Once the coordinator no longer names it, it counts for the
// bound again only when it has caught up with the slowest of the others, so nobody waits
// for the lead it lost while it was slow. Textbook SSP bounds every worker's staleness;
// this bounds the staleness the others see from each other, and lets a named straggler's
// be larger. Checkpoints still wait for the slowest member (Note [Checkpoint steps]).
#include <algorithm>
#include <limits>
#include <utility>

#include "core/shard_core.hpp"
#include "tensor/ops.hpp"

namespace troupe {

namespace {

// Takes what a member was answered into its copy `mine` of `value`: all of it, or
// [offset, offset + numel); a member without a copy yet takes the whole value, which
// stands for what it holds.
void take_answer(tensor& mine, const tensor& value, std::int64_t offset, std::int64_t numel) {
  if (mine.numel() != value.numel()) {
    mine = tensor::uninitialized({value.numel()});
    copy(mine, value);
    return;
  }
  if (numel == 0)
    copy(mine, value);
  else
    copy(mine.view().flat(offset, numel), value.view().flat(offset, numel));
}

}  // namespace

void shard_core::answered(std::uint32_t member, std::int64_t offset, std::int64_t numel) {
  if (cfg_.rule != async_rule::dcasgd || cfg_.mode == sync_mode::sync || !members_.count(member)) return;
  auto it = parts_.find(part_of(member));
  if (it == parts_.end()) return;
  take_answer(it->second.pulled[member], it->second.value.get(), offset, numel);
}

void shard_core::answered(std::uint32_t member, kv_part_id part) {
  if (cfg_.rule != async_rule::dcasgd || cfg_.mode == sync_mode::sync || !members_.count(member)) return;
  auto it = parts_.find(part);
  if (it == parts_.end()) return;
  take_answer(it->second.pulled[member], it->second.value.get(), 0, 0);
}

const_tensor_view shard_core::compensated(part_state& p, std::uint32_t member, const_tensor_view grad) {
  auto it = p.pulled.find(member);
  if (cfg_.rule != async_rule::dcasgd || it == p.pulled.end() || it->second.numel() != grad.numel()) return grad;
  if (compensated_.numel() != grad.numel()) compensated_ = tensor::uninitialized({grad.numel()});
  compensate_delay(compensated_, grad, p.value.get(), it->second, cfg_.dc_lambda);
  return compensated_;
}

bool shard_core::round_complete(const part_state& p, std::int64_t round) const {
  auto open = p.rounds.find(round);
  std::int64_t due = 0, submitted = 0;
  for (const auto& [rank, m] : members_) {
    if (!m.live || m.stage != p.stage) continue;
    auto q = p.pushers.find(rank);
    if (q != p.pushers.end() && q->second.from_round > round) continue;
    ++due;
    submitted += static_cast<std::int64_t>(open != p.rounds.end() && open->second.count(rank));
  }
  if (due == 0) return false;  // nobody left to serve; the coordinator ends the job
  return submitted >= std::max<std::int64_t>(1, due - cfg_.backup_workers);
}

bool shard_core::late(const part_state& p, std::int64_t round) const {
  return cfg_.mode == sync_mode::sync && cfg_.backup_workers > 0 && round < p.version;
}

shard_core::push_outcome shard_core::drop_late(part_state& p, std::uint32_t member) {
  ++counters_.late;
  pusher& q = p.pushers[member];
  q.next = std::max(q.next, p.version);  // it goes on in the open round
  push_outcome out;
  out.version = p.version;
  out.late = true;
  return out;
}

void shard_core::set_straggler(std::uint32_t member, bool slow) {
  auto it = members_.find(member);
  if (cfg_.mode != sync_mode::ssp || it == members_.end() || !it->second.live) return;
  it->second.named_straggler = slow;
  if (slow)
    it->second.outside_bound = true;
  else
    maybe_back_in_bound(member);  // else once it has caught up (on its next push)
  release_ready();
}

bool shard_core::straggler(std::uint32_t member) const {
  auto it = members_.find(member);
  return it != members_.end() && it->second.outside_bound;
}

void shard_core::maybe_back_in_bound(std::uint32_t member) {
  shard_core::member& m = members_.at(member);
  if (!m.outside_bound || m.named_straggler) return;
  for (const auto& [id, p] : parts_)
    if (p.stage == m.stage && next_of(p, member) < slowest_in_bound(p)) return;
  m.outside_bound = false;
}

std::int64_t shard_core::slowest_in_bound(const part_state& p) const {
  std::int64_t inside = std::numeric_limits<std::int64_t>::max();
  for (const auto& [rank, m] : members_)
    if (m.live && m.stage == p.stage && !m.outside_bound) inside = std::min(inside, next_of(p, rank));
  return inside == std::numeric_limits<std::int64_t>::max() ? slowest(p) : inside;
}

}  // namespace troupe
