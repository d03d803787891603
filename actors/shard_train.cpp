// shard_train: a training job's pulls on a shard server (its pushes are every job's, in
// shard_push.cpp): answered now or when the core releases them, in the slot, on the lane
// or in the message; and the gauges that follow the core. The sender is checked by
// shard_server.cpp.
#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"

namespace troupe::shard_shell {

caf::error not_training(shard_pointer self) {
  return serves_kv(self) ? make_error(errc::bad_job, "a training member's message reached a shard of a key-value job")
                         : not_started(self);
}

namespace {

// A pull answered with the member's slice, in the slot it offered when the fast path can
// take it (Note [Same-host fast path]), in the message otherwise, in the job's
// --pull-precision (2bit: Note [2-bit pulls], `full` when the member holds no view), on
// the member's bulk lane when it asked and has one (Note [Bulk lanes]): counts the bytes.
// A pull of a piece (checked when it came) is not answered in shared memory.
params_reply answer(shard_pointer self, const held_pull& pull) {
  auto& st = self->state;
  const auto& core = *st.core;
  const std::uint32_t member = pull.member;
  const shared_tensor& reply_to = pull.reply_to;
  params_reply r{st.index, core.version_for(member), tensor(), {}, pull.piece_offset, pull.piece_numel};
  st.core->answered(member, pull.piece_offset, pull.piece_numel);  // Note [Delay compensation]
  if (pull.piece_numel > 0) {
    r.params = core.piece_for(member, pull.piece_offset, pull.piece_numel);
    if (st.pull_precision.kind != codec_kind::none) r.params = encode(st.pull_precision, r.params);
    if (st.m) st.m->bytes_sent->Increment(static_cast<double>(r.params.nbytes()));
    if (auto d = answer_on_lane(self, member, pull.lane_reply, r.params)) r.lane = std::move(*d);
    return r;
  }
  const std::int64_t numel = core.slice_numel(member);
  if (st.channels && !reply_to.empty()) {
    std::string refused;
    auto pack = [&](tensor_view out) { core.pack_slice_into(member, core.params(), out); };
    if (auto where = st.channels->answer_with(member, reply_to, {numel}, pack, refused)) {
      if (st.m) st.m->bytes_sent->Increment(static_cast<double>(numel * 4));
      if (st.views) st.views->forget(member);  // it holds the f32 values now
      watch_bell(self, member, reply_to);
      r.shared = std::move(*where);
      return r;
    }
    if (!refused.empty()) spdlog::info("shard {}: answers worker {} over the network: {}", st.index, member, refused);
  }
  r.params = core.params_for(member);
  if (st.views)
    r.params = st.views->answer(member, std::move(r.params), pull.full);
  else if (st.pull_precision.kind != codec_kind::none)
    r.params = encode(st.pull_precision, r.params);
  if (st.m) st.m->bytes_sent->Increment(static_cast<double>(r.params.nbytes()));
  if (auto d = answer_on_lane(self, member, pull.lane_reply, r.params)) r.lane = std::move(*d);
  return r;
}

}  // namespace

// Brings the gauges and counters in line with the core after a message.
void observe(shard_pointer self) {
  auto& st = self->state;
  if (!st.m) return;
  const auto& c = st.core->counters();
  if (c.updates > st.updates_seen) st.m->updates->Increment(static_cast<double>(c.updates - st.updates_seen));
  st.updates_seen = c.updates;
  st.m->version->Set(static_cast<double>(st.core->version()));
  st.m->pulls_held->Set(static_cast<double>(st.core->held()));
  st.m->mailbox->Set(static_cast<double>(self->mailbox().size()));
}

// Answers the pulls the core released, and fails the ones it dropped.
void settle_held(shard_pointer self) {
  auto& st = self->state;
  const auto now = wall::now();
  for (auto t : st.core->take_released()) {
    auto it = st.held.find(t);
    if (it == st.held.end()) continue;
    it->second.promise.deliver(answer(self, it->second));
    if (st.m) st.m->hold_seconds->Observe(std::chrono::duration<double>(now - it->second.since).count());
    if (st.obs.trace) st.obs.trace->async_span(st.track, "held pull", t, it->second.since, now);
    st.held.erase(it);
  }
  for (auto t : st.core->take_dropped()) {
    auto it = st.held.find(t);
    if (it == st.held.end()) continue;
    it->second.promise.deliver(make_error(errc::not_member, "the worker left the job"));
    st.held.erase(it);
  }
}

// A pull: answered through rp now, or held by the core and answered when it releases it.
void serve_pull(shard_pointer self, const pull_request& r, answer_to<params_reply>& rp) {
  auto& st = self->state;
  if (!serves_training(self)) {
    rp.deliver(not_training(self));
    return;
  }
  if (r.shard != st.index) {
    rp.deliver(wrong_shard(self, r.shard));
    return;
  }
  if (r.piece_numel != 0) {
    std::string wrong;
    if (st.views)
      wrong = "a pull in pieces does not go with --pull-precision 2bit (a member's view is of its whole slice)";
    else
      wrong = st.core->check_piece(r.worker, r.piece_offset, r.piece_numel);
    if (!wrong.empty()) {
      if (st.m) st.m->rejected(to_string(errc::bad_shape))->Increment();
      spdlog::warn("shard {}: refused a pull of worker {}: {}", st.index, r.worker, wrong);
      rp.deliver(make_error(errc::bad_shape, wrong));
      return;
    }
  }
  const auto token = st.next_token++;
  auto out = st.core->pull(r.worker, r.clock, token);
  held_pull pull{rp, wall::now(), r.worker, r.reply_to, r.full, r.piece_offset, r.piece_numel, r.lane_reply};
  switch (out.decision) {
    case shard_core::pull_decision::answer:
      rp.deliver(answer(self, pull));
      return;
    case shard_core::pull_decision::reject:
      if (st.m) st.m->rejected(to_string(out.error->code))->Increment();
      rp.deliver(make_error(*out.error));
      return;
    case shard_core::pull_decision::hold:
      break;
  }
  st.held.emplace(token, std::move(pull));
  observe(self);
}

}  // namespace troupe::shard_shell
