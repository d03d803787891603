// shard_membership: what a shard server does with its coordinator's word about the job's
// members (the sender is checked by shard_server.cpp): a member admitted into the running
// job, the start (a resumed job's state restored first), a member that left, a straggler
// named or no longer, and the statistics and snapshot the coordinator gathers.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"

namespace troupe::shard_shell {

void record_member(shard_pointer self, std::uint32_t rank, member_identity who) {
  auto& m = self->state.members;
  if (m.size() <= rank) m.resize(rank + 1);
  m[rank] = std::move(who);
}

caf::result<caf::ok_atom> on_admit(shard_pointer self, shard_admit& a) {
  if (!self->state.core) return not_started(self);
  record_member(self, a.joined.rank, std::move(a.identity));
  if (serves_kv(self)) {
    kv_member_joined(self, a.joined.rank);
    return caf::ok_atom::value;
  }
  self->state.core->member_joined(a.joined.rank, a.joined.clock);
  settle_pulls(self);
  return caf::ok_atom::value;
}

caf::result<caf::ok_atom> on_start(shard_pointer self, shard_start& s) {
  if (!self->state.core) return not_started(self);
  if (s.identities.size() != s.members.workers.size())
    return make_error(errc::bad_job, "a start names " + std::to_string(s.members.workers.size()) + " members but " +
                                         std::to_string(s.identities.size()) + " identities");
  for (std::size_t i = 0; i < s.identities.size(); ++i)
    record_member(self, s.members.workers[i], std::move(s.identities[i]));
  if (auto why = restore_checkpoint(self)) {
    spdlog::error("shard {}: {}", self->state.index, *why);
    // Answered before the shard stops, so the job's error says why.
    auto rp = self->make_response_promise<caf::ok_atom>();
    rp.deliver(make_error(errc::checkpoint_failed, *why));
    self->quit(make_error(errc::checkpoint_failed, *why));
    return rp;
  }
  if (serves_kv(self)) {
    kv_members_start(self, s.members.workers);
    return caf::ok_atom::value;
  }
  if (self->state.core->config().mode == sync_mode::sync && s.members.clock != self->state.core->version())
    return make_error(errc::bad_job, "a sync start at clock " + std::to_string(s.members.clock) +
                                         " for a shard at version " + std::to_string(self->state.core->version()));
  self->state.core->start(s.members.workers, s.members.stages, s.members.clock);
  return caf::ok_atom::value;
}

caf::result<shard_stats> stats_of(shard_pointer self) {
  if (!self->state.core) return not_started(self);
  const auto& core = *self->state.core;
  const auto& c = core.counters();
  shard_stats s;
  s.shard = self->state.index;
  s.version = core.version();
  s.updates = c.updates;
  s.gradients = c.gradients;
  s.rejected = c.rejected;
  s.pulls = c.pulls;
  s.pulls_held = c.pulls_held;
  s.held_now = static_cast<std::int64_t>(core.held());
  s.staleness_sum = c.staleness_sum;
  s.staleness_count = c.staleness_count;
  s.staleness_max = c.staleness_max;
  s.staleness_hist.assign(c.staleness_hist.begin(), c.staleness_hist.end());
  return s;
}

caf::result<params_reply> snapshot(shard_pointer self) {
  if (!serves_training(self)) return not_started(self);
  const auto& core = *self->state.core;
  return params_reply{self->state.index, core.version(), core.params()};
}

void on_left(shard_pointer self, std::uint32_t rank) {
  forget_lane(self, rank);
  if (!self->state.core) return;
  if (rank < self->state.members.size()) self->state.members[rank] = {};
  if (serves_kv(self)) return kv_member_left(self, rank);
  if (self->state.channels) self->state.channels->forget(rank);
  self->state.core->member_left(rank);
  maybe_checkpoint(self);
  settle_pulls(self);
}

void on_straggler(shard_pointer self, std::uint32_t rank, bool slow) {
  if (!self->state.core) return;
  self->state.core->set_straggler(rank, slow);
  if (serves_kv(self))
    settle_kv(self);
  else
    settle_pulls(self);
}

}  // namespace troupe::shard_shell
