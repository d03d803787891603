// shard_kv: the key-value side of a shard server (Note [Rounds per part] in
// core/shard_core.hpp): defining a key's parts, the optimizer, pushes and pulls of
// parts, and answering the pulls the core held. The sender is checked by shard_server.cpp.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"
#include "base/compute_fault.hpp"
#include "tensor/grad_codec.hpp"

namespace troupe::shard_shell {

namespace {

caf::error not_kv(shard_pointer self) {
  return serves_training(self) ? make_error(errc::bad_job, "a key-value message reached a shard of a training job")
                               : not_started(self);
}

// Writes the parts a key-value pull asks for, concatenated, into `out`.
void pack_kv_answer(const shard_core& kv, const kv_pull& r, tensor_view out) {
  std::int64_t pos = 0;
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    const const_tensor_view v = kv.value(r.parts[i]);
    const std::int64_t n = r.rows[i].empty() ? v.numel() : static_cast<std::int64_t>(r.rows[i].size()) * r.row_numel[i];
    if (r.rows[i].empty())
      copy(out.flat(pos, n), v);
    else
      kv.gather_rows(r.parts[i], r.rows[i], r.row_numel[i], out.flat(pos, n));
    pos += n;
  }
}

// The reply to a key-value pull whose parts are all answerable now: in the slot it offered
// when the fast path can take it (Note [Same-host fast path]), as f32; otherwise in the
// job's --pull-precision, on the member's bulk lane when it asked and has one (Note [Bulk
// lanes]), else in the message. With --async-rule dcasgd a whole part answered is what
// the member's next gradient of it is compensated against (Note [Delay compensation]).
kv_pull_reply kv_answer(shard_pointer self, const kv_pull& r) {
  auto& st = self->state;
  const shard_core& kv = *st.core;
  std::int64_t total = 0;
  kv_pull_reply out{st.index, {}, tensor(), {}};
  for (std::size_t i = 0; i < r.parts.size(); ++i) {
    total +=
        r.rows[i].empty() ? kv.value(r.parts[i]).numel() : static_cast<std::int64_t>(r.rows[i].size()) * r.row_numel[i];
    out.versions.push_back(kv.version(r.parts[i]));
    if (r.rows[i].empty()) st.core->answered(r.worker, r.parts[i]);
  }
  if (st.channels && !r.reply_to.empty()) {
    std::string refused;
    auto fill = [&](tensor_view slot) { pack_kv_answer(kv, r, slot); };
    if (auto where = st.channels->answer_with(r.worker, r.reply_to, {total}, fill, refused)) {
      if (st.m) st.m->bytes_sent->Increment(static_cast<double>(total * 4));
      out.shared = std::move(*where);
      return out;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, r.worker, refused);
  }
  if (r.parts.size() == 1 && r.rows[0].empty() && st.pull_precision.kind == codec_kind::none) {
    out.data = kv.lend_value(r.parts[0]);  // one whole part as it lies: Note [Lent values]
  } else {
    out.data = tensor::uninitialized({total});
    pack_kv_answer(kv, r, out.data.view());
    if (st.pull_precision.kind != codec_kind::none) out.data = encode(st.pull_precision, out.data);
  }
  if (st.m) st.m->bytes_sent->Increment(static_cast<double>(out.data.nbytes()));
  if (auto d = answer_on_lane(self, r.worker, r.lane_reply, out.data)) out.lane = std::move(*d);
  return out;
}

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

// Checks a key-value push or pull's parts against what this shard holds before any is used.
std::optional<fault> check_kv_parts(const shard_core& kv, const std::vector<kv_part_id>& parts) {
  for (auto p : parts)
    if (!kv.defined(p))
      return fault{errc::bad_shard, "part " + std::to_string(p & 0xFFFF) + " of key id " + std::to_string(p >> 16) +
                                        " is not on this shard"};
  return std::nullopt;
}

}  // namespace

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
  if (self->state.obs.metrics) self->state.m = self->state.obs.metrics->shard(w.index);
}

namespace {

// A round's answer for one member: its data in the slot the member offered when the fast
// path can take it (Note [Same-host fast path]), else on its bulk lane when it asked
// (Note [Bulk lanes]), otherwise in the message.
kv_collective_reply collective_answer(shard_pointer self, const kv_collective_reply& result,
                                      const shard_state::waiting_piece& to) {
  auto& st = self->state;
  kv_collective_reply out{result.ranks, result.dims, {}, {}};
  if (!to.wants_data) return out;
  if (st.channels && !to.reply_to.empty() && !result.data.empty()) {
    std::string refused;
    if (auto where = st.channels->answer(to.worker, to.reply_to, result.data.view(), refused)) {
      out.shared = std::move(*where);
      return out;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, to.worker, refused);
  }
  out.data = tensor(result.data);
  if (auto d = answer_on_lane(self, to.worker, to.lane_reply, out.data)) out.lane = std::move(*d);
  return out;
}

}  // namespace

void settle_kv(shard_pointer self) {
  auto& st = self->state;
  for (auto& a : st.collectives.take_answers()) {
    auto it = st.collective_promises.find(a.t);
    if (it == st.collective_promises.end()) continue;
    if (auto* f = std::get_if<fault>(&a.result))
      it->second.promise.deliver(make_error(*f));
    else
      it->second.promise.deliver(collective_answer(self, *std::get<0>(a.result), it->second));
    st.collective_promises.erase(it);
  }
  auto finish_token = [&](shard_core::token t) -> held_kv_pull* {
    auto tok = st.kv_tokens.find(t);
    if (tok == st.kv_tokens.end()) return nullptr;
    auto it = st.kv_held.find(tok->second);
    st.kv_tokens.erase(tok);
    return it == st.kv_held.end() ? nullptr : &it->second;
  };
  for (auto t : st.core->take_released()) {
    const auto id = st.kv_tokens.count(t) ? st.kv_tokens.at(t) : 0;
    held_kv_pull* h = finish_token(t);
    if (h && --h->waiting == 0) {
      h->promise.deliver(kv_answer(self, h->request));
      st.kv_held.erase(id);
    }
  }
  for (auto t : st.core->take_dropped()) {
    const auto id = st.kv_tokens.count(t) ? st.kv_tokens.at(t) : 0;
    if (held_kv_pull* h = finish_token(t)) {
      h->promise.deliver(make_error(errc::not_member, "the worker left the job"));
      st.kv_held.erase(id);
    }
  }
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

void kv_pull_on(shard_pointer self, kv_pull& r, caf::typed_response_promise<kv_pull_reply>& rp) {
  auto& st = self->state;
  if (!serves_kv(self)) return rp.deliver(not_kv(self)), void();
  if (r.shard != st.index) return rp.deliver(wrong_shard(self, r.shard)), void();
  auto& kv = *st.core;
  if (auto e = check_kv_parts(kv, r.parts)) return rp.deliver(make_error(*e)), void();
  if (r.rows.size() != r.parts.size() || r.row_numel.size() != r.parts.size())
    return rp.deliver(make_error(errc::malformed, "a pull whose rows do not match its parts")), void();
  for (std::size_t i = 0; i < r.parts.size(); ++i)
    for (auto row : r.rows[i])
      if (row < 0 || r.row_numel[i] <= 0 || (row + 1) * r.row_numel[i] > kv.value(r.parts[i]).numel())
        return rp.deliver(make_error(errc::bad_shape,
                                     "a pull asks for row " + std::to_string(row) + ", outside its part of the key")),
               void();
  const std::uint64_t id = st.next_kv_pull++;
  held_kv_pull h;
  std::vector<shard_core::token> held;
  for (auto part : r.parts) {
    const auto t = st.next_token++;
    auto o = kv.pull_part(r.worker, part, t);
    if (o.decision == shard_core::pull_decision::reject) {
      for (auto ht : held) st.kv_tokens.erase(ht);
      return rp.deliver(make_error(*o.error)), void();
    }
    if (o.decision == shard_core::pull_decision::hold) {
      st.kv_tokens[t] = id;
      held.push_back(t);
      ++h.waiting;
    }
  }
  if (h.waiting == 0) return rp.deliver(kv_answer(self, r)), void();
  h.promise = rp;
  h.request = std::move(r);
  st.kv_held.emplace(id, std::move(h));
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

bool kv_collective_on(shard_pointer self, kv_collective& c, caf::typed_response_promise<kv_collective_reply>& rp) {
  auto& st = self->state;
  if (!c.lane.empty()) {  // the piece's data on the member's bulk lane
    auto got = claim_payload(self, c.worker, c.lane);
    if (got.missing()) return false;
    if (!got.payload) {
      rp.deliver(make_error(errc::malformed, "collective piece: " + got.problem));
      return true;
    }
    c.data = std::move(*got.payload);
    c.lane = {};
  }
  if (!serves_kv(self)) {
    rp.deliver(not_kv(self));
    return true;
  }
  if (c.shard != st.index) {
    rp.deliver(wrong_shard(self, c.shard));
    return true;
  }
  const auto t = st.next_collective++;
  const std::uint32_t worker = c.worker;
  const std::uint64_t lane_reply = c.lane_reply;
  shared_tensor reply_to = std::move(c.reply_to);
  const bool wants_data = !(c.kind == collective_kind::broadcast && c.worker == c.root);
  if (!c.shared.empty()) {  // the piece lies in the member's push slot: copied out, the slot is free again
    auto data = st.channels ? st.channels->take_push(worker, c.shared)
                            : expected<tensor>(failure{"this shard's same-host fast path is off"});
    if (!data) {
      rp.deliver(make_error(errc::malformed, "collective piece's shared-memory slot: " + data.error().message));
      return true;
    }
    c.data = std::move(*data);
    c.shared = {};
  }
  if (auto f = st.collectives.give(t, std::move(c))) {
    spdlog::warn("shard {}: refused member {}'s collective piece: {}", st.index, worker, to_string(*f));
    if (st.m) st.m->rejected(to_string(f->code))->Increment();
    settle_kv(self);  // a disagreeing piece fails the others' pieces of its round too
    rp.deliver(make_error(*f));
    return true;
  }
  st.collective_promises.emplace(t, shard_state::waiting_piece{rp, worker, std::move(reply_to), wants_data, lane_reply});
  settle_kv(self);
  return true;
}

}  // namespace troupe::shard_shell
