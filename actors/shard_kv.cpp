// shard_kv: the key-value side of a shard server (Note [Rounds per part] in
// core/shard_core.hpp): its welcome, defining a key's parts, the optimizer, pushes of
// parts, and the members' start, joins and leaves; pulls are in shard_kv_pulls.cpp,
// collectives in shard_kv_collectives.cpp. The sender is checked by shard_server.cpp.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"
#include "base/compute_fault.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::shard_shell {

caf::error not_kv(shard_pointer self) {
  return serves_training(self) ? make_error(errc::bad_job, "a key-value message reached a shard of a training job")
                               : not_started(self);
}

namespace {

// A push's values, one flat f32 view per part: the f32 data as sent (the fast path's
// slots, or a job without compression), borrowed, or decoded from the job's
// --compression, each part encoded on its own (Note [Compressed key-value pushes] in
// client/push_compressor.hpp); what is wrong, before any part is applied, when they do
// not fit the parts.
struct push_values {
  std::vector<const_tensor_view> parts;
  std::vector<tensor> decoded;  // what parts views, when the push was compressed
};

expected<push_values> values_of(const shard_state& st, const kv_push& p) {
  const shard_core& kv = *st.core;
  std::vector<std::int64_t> numel;
  std::int64_t total = 0;
  for (auto part : p.parts) total += numel.emplace_back(kv.value(part).numel());
  const bool plain = p.data.type() == dtype::f32;
  const grad_codec codec = plain ? grad_codec{} : st.compression;
  if (!plain && codec.kind == codec_kind::none)
    return failure{"a push in " + std::string(name_of(p.data.type())) + ", but the job sends gradients as f32"};
  std::int64_t wire = 0;
  for (auto n : numel) wire += encoded_bytes(codec, n);
  if (p.base_versions.size() != p.parts.size() || p.data.rank() != 1 ||
      p.data.nbytes() != static_cast<std::size_t>(wire))
    return failure{"a push of " + std::to_string(p.parts.size()) + " parts (" + std::to_string(total) + " floats as " +
                   to_string(codec) + ", " + std::to_string(wire) + " bytes) carries " +
                   std::to_string(p.data.nbytes()) + " bytes"};
  push_values out;
  const std::byte* at = p.data.bytes();
  const auto elem = static_cast<std::int64_t>(size_of(p.data.type()));
  for (std::size_t i = 0; i < p.parts.size(); ++i) {
    const std::int64_t n = encoded_bytes(codec, numel[i]);
    const const_tensor_view piece(at, p.data.type(), {n / elem});
    at += n;
    if (plain) {
      out.parts.push_back(piece);
      continue;
    }
    auto v = decode(codec, piece, numel[i]);
    if (!v) return failure{"part " + std::to_string(i) + " of the push: " + v.error().message};
    out.decoded.push_back(std::move(*v));
  }
  for (const auto& d : out.decoded) out.parts.push_back(d.view());
  return out;
}

}  // namespace

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
  settle_kv_pulls(self);
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

bool kv_push_on(shard_pointer self, kv_push& p, caf::typed_response_promise<kv_push_ack>& rp) {
  auto& st = self->state;
  auto refuse = [&](const fault& f) {
    spdlog::warn("shard {}: refused a push of worker {}: {}", st.index, p.worker, to_string(f));
    rp.deliver(make_error(f));
    return true;
  };
  bool finite = false;  // the lane reader found the data free of NaN and Inf (only f32 is scanned)
  if (!p.lane.empty()) {
    auto got = claim_payload(self, p.worker, p.lane);
    if (got.missing()) return false;
    if (!got.payload) return refuse({errc::malformed, got.problem});
    p.data = std::move(*got.payload);
    finite = got.finite;
  }
  if (!serves_kv(self)) {
    rp.deliver(not_kv(self));
    return true;
  }
  if (p.shard != st.index) {
    rp.deliver(wrong_shard(self, p.shard));
    return true;
  }
  auto& kv = *st.core;
  if (auto e = check_kv_parts(kv, p.parts)) {
    rp.deliver(make_error(*e));
    return true;
  }
  if (!p.shared.empty()) {
    // Borrowed from the member's slot: the core copies what it keeps, and the member
    // writes that slot again only after this push is answered.
    auto grad = st.channels ? st.channels->take_push(p.worker, p.shared, true)
                            : expected<tensor>(failure{"this shard's same-host fast path is off"});
    if (!grad) return refuse({errc::malformed, "the push's shared-memory slot: " + grad.error().message});
    p.data = std::move(*grad);
  }
  if (st.m && p.lane.empty()) st.m->bytes_received->Increment(static_cast<double>(p.data.nbytes()));
  auto values = values_of(st, p);
  if (!values) return refuse({errc::malformed, values.error().message});
  kv_push_ack ack;
  std::optional<fault> failed;
  if (auto f = catch_compute("shard " + std::to_string(st.index) + ": a push", [&] {
        auto r = kv.push_parts(p.worker, p.parts, p.base_versions, values->parts, finite);
        failed = r.error;
        ack.versions = std::move(r.versions);
        ack.staleness = std::move(r.staleness);
      }))
    failed = f;
  if (st.m && !failed)
    for (auto s : ack.staleness) st.m->staleness->Observe(static_cast<double>(s));
  settle_kv(self);
  if (st.m) {
    st.m->updates->Increment(0);
    st.m->mailbox->Set(static_cast<double>(self->mailbox().size()));
  }
  maybe_checkpoint(self);
  if (failed) {
    if (st.m) st.m->rejected(to_string(failed->code))->Increment();
    return refuse(*failed);
  }
  rp.deliver(std::move(ack));
  return true;
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
  settle_kv(self);
  maybe_checkpoint(self);
}

}  // namespace troupe::shard_shell
