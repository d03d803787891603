// shard_push: every job's push on a shard server (Note [Rounds per part] in
// core/shard_core.hpp). The gradient comes in the message, from the member's shared-memory
// slot or on its bulk lane; it is decoded from the job's --compression, handed to the core
// and answered, with the gauges that follow the core. A push that states its clock (a
// training member's step) names its stage's one part, whole or a piece, and counts as that
// clock's submission even when it cannot be read; a user's loop's push of several parts is
// applied all or none. The sender is checked by shard_server.cpp.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"
#include "base/compute_fault.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::shard_shell {

namespace {

// What the core made of a push: its answer, or why it was refused.
struct applied {
  std::optional<fault> error;
  kv_push_ack ack;
};

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

// A user's loop's push of its parts, all or none; `unreadable`: why its data could not be
// taken (nothing is applied).
applied apply_parts(shard_pointer self, const kv_push& p, const std::string& unreadable, bool finite) {
  auto& st = self->state;
  if (!unreadable.empty()) return {fault{errc::malformed, unreadable}, {}};
  auto values = values_of(st, p);
  if (!values) return {fault{errc::malformed, values.error().message}, {}};
  applied out;
  if (auto f = catch_compute("shard " + std::to_string(st.index) + ": a push", [&] {
        auto r = st.core->push_parts(p.worker, p.parts, p.base_versions, values->parts, finite);
        out.error = r.error;
        out.ack.versions = std::move(r.versions);
        out.ack.staleness = std::move(r.staleness);
      }))
    out.error = f;
  return out;
}

// A training member's push of its step: one part, its stage's, whole or a piece. A
// gradient that cannot be read (a bad slot or lane payload, a malformed encoding, parts
// that are not its stage's) still reaches the core, which refuses it as malformed: the
// member's clock moves on and a sync round counts the push, as for any refused gradient,
// instead of refusing every later push of the member or holding the round.
applied apply_step(shard_pointer self, kv_push& p, gradient_receipt how) {
  auto& st = self->state;
  const std::int64_t base = p.base_versions.empty() ? 0 : p.base_versions.front();
  if (how.unreadable.empty()) how.unreadable = wrong_step_parts(*st.core, p.worker, p.parts);
  if (how.unreadable.empty() && p.base_versions.size() != 1)
    how.unreadable =
        "a push of a step carries " + std::to_string(p.base_versions.size()) + " base versions for its one part";
  // No codec's wire dtype is f32, so an f32 gradient is one sent uncompressed, as a
  // member does when its gradient holds NaN or Inf; the core refuses it as not_finite.
  if (how.unreadable.empty() && st.compression.kind != codec_kind::none && p.data.type() != dtype::f32) {
    // A piece longer than the slice decodes as the slice, fails, and is refused.
    const std::int64_t slice = st.core->slice_numel(p.worker);
    auto grad =
        decode(st.compression, p.data, p.piece_numel > 0 && p.piece_numel <= slice ? p.piece_numel : slice);
    if (grad)
      p.data = std::move(*grad);  // how.finite stays false: the lane reader scans only f32
    else
      how.unreadable = grad.error().message;
  }
  applied out;
  shard_core::push_outcome r;
  if (auto f = catch_compute("shard " + std::to_string(st.index) + ": applying a gradient of worker " +
                                 std::to_string(p.worker),
                             [&] { r = st.core->push(p.worker, p.clock, base, std::move(p.data), how); })) {
    out.error = f;
    return out;
  }
  out.error = r.error;
  out.ack = kv_push_ack{{r.version}, {r.staleness}, r.late};
  return out;
}

// Why the push does not belong here: a shard of the other kind of job, or another shard.
caf::error misaddressed(shard_pointer self, const kv_push& p) {
  if (p.states_clock() ? !serves_training(self) : !serves_kv(self))
    return p.states_clock() ? not_training(self) : not_kv(self);
  if (p.shard != self->state.index) return wrong_shard(self, p.shard);
  if (!p.states_clock())
    if (auto e = check_kv_parts(*self->state.core, p.parts)) return make_error(*e);
  return {};
}

// Takes the push's data from the member's shared-memory slot; why not. Borrowed when the
// core does not keep it (the core copies what it keeps of a user's loop's push, and a
// training member's unless its sync round keeps it): the member writes that slot again
// only after this push is answered.
std::string take_shared(shard_pointer self, kv_push& p) {
  auto& st = self->state;
  const bool borrow = !p.states_clock() || !st.core->keeps_gradient(p.worker, p.piece_numel);
  auto grad = st.channels ? st.channels->take_push(p.worker, p.shared, borrow)
                          : expected<tensor>(failure{"this shard's same-host fast path is off"});
  if (!grad) return "the push's shared-memory slot: " + grad.error().message;
  p.data = std::move(*grad);
  return {};
}

// After the core took a push: a checkpoint due (begun before the pulls it released are
// answered: Note [The last checkpoints of a key-value job] in core/job_keys.cpp), those
// pulls, the gauges, and the answer.
void answer_push(shard_pointer self, const kv_push& p, applied& done, answer_to<kv_push_ack>& rp) {
  auto& st = self->state;
  maybe_checkpoint(self);
  if (st.core->training())
    settle_pulls(self);
  else
    settle_kv(self);
  observe(self);
  if (done.error) {
    if (st.m) st.m->rejected(to_string(done.error->code))->Increment();
    const std::string clock = p.states_clock() ? " (clock " + std::to_string(p.clock) + ")" : "";
    spdlog::warn("shard {}: refused a push of worker {}{}: {}", st.index, p.worker, clock, to_string(*done.error));
    rp.deliver(make_error(*done.error));
    return;
  }
  if (done.ack.late) {  // Note [Backup workers]: dropped, and the sender moves to the open round
    if (st.m) st.m->late_gradients->Increment();
  } else if (st.m) {
    for (auto s : done.ack.staleness) st.m->staleness->Observe(static_cast<double>(s));
  }
  rp.deliver(std::move(done.ack));
}

}  // namespace

bool serve_push(shard_pointer self, kv_push& p, answer_to<kv_push_ack>& rp) {
  auto& st = self->state;
  gradient_receipt how{{}, p.piece_offset, p.piece_numel, false};
  if (!p.lane.empty()) {
    auto got = claim_payload(self, p.worker, p.lane);
    if (got.missing()) return false;
    if (got.payload)
      p.data = std::move(*got.payload);
    else
      how.unreadable = got.problem;
    how.finite = got.finite;
  }
  if (auto e = misaddressed(self, p)) {
    rp.deliver(std::move(e));
    return true;
  }
  if (!p.shared.empty() && how.unreadable.empty()) how.unreadable = take_shared(self, p);
  if (st.m && p.lane.empty()) st.m->bytes_received->Increment(static_cast<double>(p.data.nbytes()));
  const auto t0 = wall::now();
  applied done =
      p.states_clock() ? apply_step(self, p, std::move(how)) : apply_parts(self, p, how.unreadable, how.finite);
  if (st.obs.trace) st.obs.trace->span(st.track, "apply", t0, wall::now());
  answer_push(self, p, done, rp);
  return true;
}

}  // namespace troupe::shard_shell
