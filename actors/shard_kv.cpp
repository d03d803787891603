// shard_kv: the key-value side of a shard server (Note [Rounds per part] in
// core/shard_core.hpp): its welcome, defining a key's parts, the optimizer, and the
// members' start, joins and leaves; pushes are every job's (shard_push.cpp), pulls are in
// shard_kv_pulls.cpp, collectives in shard_kv_collectives.cpp. The sender is checked by
// shard_server.cpp.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"

namespace troupe::shard_shell {

caf::error not_kv(shard_pointer self) {
  return serves_training(self) ? make_error(errc::bad_job, "a key-value message reached a shard of a training job")
                               : not_started(self);
}

// Checks a key-value push or pull's parts against what this shard holds before any is used.
std::optional<fault> check_kv_parts(const shard_core& kv, const std::vector<kv_part_id>& parts) {
  for (auto p : parts)
    if (!kv.defined(p))
      return fault{errc::bad_shard, "part " + std::to_string(p & 0xFFFF) + " of key id " + std::to_string(p >> 16) +
                                        " is not on this shard"};
  return std::nullopt;
}

void settle_kv(shard_pointer self) {
  settle_collectives(self);
  settle_pulls(self);
}

void init_kv_from_welcome(shard_pointer self, const shard_welcome& w) {
  self->state.index = w.index;
  self->state.core = std::make_unique<shard_core>(kv_shard_config(w));
  if (auto why = plan_checkpoints(self, w)) {
    spdlog::error("shard {}: {}", w.index, *why);
    self->quit(make_error(errc::bad_job, *why));
    return;
  }
  self->state.compression = w.job.compression;
  self->state.pull_precision = w.job.pull_precision;
  if (w.job.pull_precision.kind == codec_kind::two_bit) self->state.views.emplace(w.job.pull_precision);
  if (self->state.obs.metrics) self->state.m = self->state.obs.metrics->shard(w.index);
}

caf::result<caf::ok_atom> kv_define_parts(shard_pointer self, const kv_define& d) {
  if (!serves_kv(self)) return not_kv(self);
  if (d.parts.size() != d.values.size())
    return make_error(errc::malformed, "a key definition with " + std::to_string(d.parts.size()) + " parts and " +
                                           std::to_string(d.values.size()) + " values");
  for (std::size_t i = 0; i < d.parts.size(); ++i)
    if (auto e = self->state.core->define(d.parts[i], d.name, d.values[i])) return make_error(*e);
  return caf::ok_atom::value;
}

caf::result<caf::ok_atom> kv_set_optimizer_on(shard_pointer self, const kv_set_optimizer& o) {
  if (!serves_kv(self)) return not_kv(self);
  self->state.core->set_optimizer(o.has_optimizer ? std::optional<kv_optimizer>(kv_optimizer{o.config, o.schedule})
                                                : std::nullopt);
  return caf::ok_atom::value;
}

void kv_members_start(shard_pointer self, const std::vector<std::uint32_t>& members) {
  self->state.core->start(members);
  self->state.collectives.start(members);
}

void kv_member_joined(shard_pointer self, std::uint32_t rank) {
  self->state.core->member_joined(rank);
  self->state.collectives.member_joined(rank);
  settle_kv(self);
}

void kv_member_left(shard_pointer self, std::uint32_t rank) {
  self->state.core->member_left(rank);
  self->state.collectives.member_left(rank);
  maybe_checkpoint(self);  // begun before the pulls the leave released are answered
  settle_kv(self);
}

}  // namespace troupe::shard_shell
