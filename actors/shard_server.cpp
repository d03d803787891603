// shard_server: the CAF side of a shard (join, promises, logging, who may send what); the
// rules are in shard_core, and a key-value job's side is in shard_kv.cpp.
#include "actors/shard_server.hpp"

#include <spdlog/spdlog.h>

#include "actors/shard_state.hpp"
#include "base/compute_fault.hpp"
#include "monitoring/refusals.hpp"

namespace troupe {

using namespace shard_shell;

namespace shard_shell {

caf::error not_started(shard_pointer self) {
  return make_error(errc::not_started, "shard " + std::to_string(self->state.index) + " has not joined its job yet");
}

caf::error wrong_shard(shard_pointer self, std::uint32_t asked) {
  return make_error(errc::bad_shard, "message for shard " + std::to_string(asked) + " reached shard " +
                                         std::to_string(self->state.index));
}

}  // namespace shard_shell

namespace {

params_reply snapshot(shard_pointer self) {
  const auto& core = *self->state.core;
  return {self->state.index, core.version(), core.params(), {}};
}

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

// Note [Members are identities]: what a stranger hears back. It names nothing of the job.
caf::error refused() { return make_error(errc::not_member, "refused"); }

// Counts and (once per peer) logs a message refused for who sent it.
void note_refused(shard_pointer self, monitoring::refusal why, const char* what) {
  const std::string peer = caf::to_string(self->current_sender());
  if (monitoring::count_refusal(why, peer))
    spdlog::warn("shard {}: refused {} from {}: {}", self->state.index, what, peer, monitoring::name_of(why));
}

bool from_coordinator(shard_pointer self, const coordinator_actor& coordinator, const char* what) {
  if (self->current_sender() && self->current_sender()->address() == coordinator.address()) return true;
  note_refused(self, monitoring::refusal::not_the_coordinator, what);
  return false;
}

bool from_member(shard_pointer self, std::uint32_t rank, const char* what) {
  const auto& m = self->state.members;
  if (rank < m.size() && sent_by(self->current_sender(), m[rank])) return true;
  note_refused(self, monitoring::refusal::not_a_member, what);
  return false;
}

void record_member(shard_pointer self, std::uint32_t rank, member_identity who) {
  auto& m = self->state.members;
  if (m.size() <= rank) m.resize(rank + 1);
  m[rank] = std::move(who);
}

void init_from_welcome(shard_pointer self, shard_welcome& w) {
  self->state.request_timeout = std::chrono::milliseconds(w.job.request_timeout_ms);
  if (w.job.kv) return init_kv_from_welcome(self, w);
  auto core = shard_for(w);
  if (!core) {
    spdlog::error("shard: cannot build the job's model: {}", core.error().message);
    self->quit(make_error(errc::bad_job, core.error().message));
    return;
  }
  self->state.index = w.index;
  self->state.core = std::move(*core);
  self->state.compression = w.job.compression;
  self->state.pull_precision = w.job.pull_precision;
  if (w.job.pull_precision.kind == codec_kind::two_bit) self->state.views.emplace(w.job.pull_precision);
  if (self->state.obs.metrics) {
    self->state.m = self->state.obs.metrics->shard(w.index);
    // Every reason a shard can refuse exists from the start, at zero.
    for (errc e : {errc::bad_shard, errc::bad_shape, errc::bad_dtype, errc::not_finite, errc::not_member, errc::bad_clock,
                   errc::stale_round, errc::duplicate, errc::not_started, errc::malformed})
      self->state.m->rejected(to_string(e));
  }
  if (self->state.obs.trace) self->state.track = self->state.obs.trace->track("shard " + std::to_string(w.index));
}

// A push, answered through rp (Note [Bulk lanes]: false, with nothing answered, while its
// lane payload is on its way).
bool serve_push(shard_pointer self, push_grads& p, caf::typed_response_promise<push_ack>& rp) {
  auto& st = self->state;
  // A gradient that cannot be read (a bad shared-memory slot or lane payload, a malformed
  // encoding) still reaches the core, which refuses it as malformed: the worker's clock
  // moves on and a sync round counts the push, as for any refused gradient, instead of
  // refusing every later push of the worker or holding the round.
  std::string malformed;
  if (!p.lane.empty()) {
    auto got = claim_payload(self, p.worker, p.lane);
    if (got.missing()) return false;
    if (got.payload)
      p.grad = std::move(*got.payload);
    else
      malformed = got.problem;
  }
  if (!st.core) {
    rp.deliver(not_started(self));
    return true;
  }
  if (p.shard != st.index) {
    rp.deliver(wrong_shard(self, p.shard));
    return true;
  }
  if (!p.shared.empty()) {
    // Borrowed from the worker's slot when the core does not keep it: the worker
    // writes that slot again only after this push is answered.
    auto grad = st.channels ? st.channels->take_push(p.worker, p.shared,
                                                     !st.core->keeps_gradient(p.worker, p.piece_numel))
                            : expected<tensor>(failure{"this shard's same-host fast path is off"});
    if (grad)
      p.grad = std::move(*grad);
    else
      malformed = "the gradient's shared-memory slot: " + grad.error().message;
  }
  if (st.m && p.lane.empty()) st.m->bytes_received->Increment(static_cast<double>(p.grad.nbytes()));
  // No codec's wire dtype is f32, so an f32 gradient is one sent uncompressed, as a
  // member does when its gradient holds NaN or Inf; the core refuses it as not_finite.
  if (malformed.empty() && st.compression.kind != codec_kind::none && p.grad.type() != dtype::f32) {
    // A piece longer than the slice decodes as the slice, fails, and is refused.
    const std::int64_t slice = st.core->slice_numel(p.worker);
    auto grad = decode(st.compression, p.grad, p.piece_numel > 0 && p.piece_numel <= slice ? p.piece_numel : slice);
    if (grad)
      p.grad = std::move(*grad);
    else
      malformed = grad.error().message;
  }
  const auto t0 = wall::now();
  shard_core::push_outcome out;
  if (auto f = catch_compute(
          "shard " + std::to_string(st.index) + ": applying a gradient of worker " + std::to_string(p.worker), [&] {
            out = st.core->push(p.worker, p.clock, p.base_version, std::move(p.grad), malformed, p.piece_offset,
                                p.piece_numel);
          })) {
    spdlog::error("{}", to_string(*f));
    rp.deliver(make_error(*f));
    return true;
  }
  if (st.obs.trace) st.obs.trace->span(st.track, "apply", t0, wall::now());
  settle_held(self);
  observe(self);
  if (out.error) {
    if (st.m) st.m->rejected(to_string(*out.error))->Increment();
    spdlog::warn("shard {}: rejected a gradient from worker {} (clock {}): {}: {}", st.index, p.worker, p.clock,
                 to_string(*out.error), out.detail);
    rp.deliver(make_error(*out.error, out.detail));
    return true;
  }
  if (st.m) st.m->staleness->Observe(static_cast<double>(out.staleness));
  rp.deliver(push_ack{out.version, out.staleness});
  return true;
}

// A pull: answered through rp now, or held by the core and answered when it releases it.
bool serve_pull(shard_pointer self, const pull_request& r, caf::typed_response_promise<params_reply>& rp) {
  auto& st = self->state;
  if (!st.core) {
    rp.deliver(not_started(self));
    return true;
  }
  if (r.shard != st.index) {
    rp.deliver(wrong_shard(self, r.shard));
    return true;
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
      return true;
    }
  }
  const auto token = st.next_token++;
  auto out = st.core->pull(r.worker, r.clock, token);
  held_pull pull{rp, wall::now(), r.worker, r.reply_to, r.full, r.piece_offset, r.piece_numel, r.lane_reply};
  switch (out.decision) {
    case shard_core::pull_decision::answer:
      rp.deliver(answer(self, pull));
      return true;
    case shard_core::pull_decision::reject:
      if (st.m) st.m->rejected(to_string(*out.error))->Increment();
      rp.deliver(make_error(*out.error, out.detail));
      return true;
    case shard_core::pull_decision::hold:
      break;
  }
  st.held.emplace(token, std::move(pull));
  observe(self);
  return true;
}

local_shard_actor::behavior_type shard_server(shard_pointer self, coordinator_actor coordinator, std::string job_id,
                                        std::chrono::milliseconds join_timeout, observability obs,
                                     std::string fast_path_tag, std::shared_ptr<lane::shard_end> lanes) {
  self->state.obs = std::move(obs);
  if (!fast_path_tag.empty()) self->state.channels.emplace(std::move(fast_path_tag));
  if (lanes) {
    auto tell = lane_mail(caf::actor_cast<caf::actor_addr>(self));
    lanes->start({[tell](std::uint32_t rank, std::uint64_t ticket, tensor t) {
                    tell(lane_payload{rank, ticket, std::move(t)});
                  },
                  [tell](std::uint32_t rank, const std::string& why) { tell(lane_event{rank, false, why}); }});
    self->state.lanes.emplace();
    self->state.lanes->end = std::move(lanes);
  }
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source != coordinator.address()) return;
    spdlog::error("shard {}: the coordinator went away ({}); stopping", self->state.index, caf::to_string(dm.reason));
    self->quit(dm.reason);
  });
  return {
      // Pushes and pulls before the welcome are refused as not_started.
      [=](const join_trigger& where) {
        self->request(coordinator, join_timeout, join_atom::value, shard_join{job_id, where.host, where.port, where.proof})
            .then([=](shard_welcome& w) { init_from_welcome(self, w); },
                  [=](caf::error& e) {
                    spdlog::error("shard: the coordinator refused or did not answer the join: {}{}", describe(e),
                                  troupe_code(e) == errc::not_member
                                      ? " (does this node hold the job's secret? pass --secret-file)"
                                      : "");
                    self->quit(e);
                  });
      },
      [=](join_atom, shard_admit& a) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "an admission")) return refused();
        if (self->state.kv) {
          record_member(self, a.joined.rank, std::move(a.identity));
          self->state.kv->member_joined(a.joined.rank);
          settle_kv(self);
          return caf::ok_atom::value;
        }
        if (!self->state.core) return not_started(self);
        record_member(self, a.joined.rank, std::move(a.identity));
        self->state.core->worker_joined(a.joined.rank, a.joined.clock);
        settle_held(self);
        return caf::ok_atom::value;
      },
      [=](start_atom, shard_start& s) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "a start")) return refused();
        if (!self->state.core && !self->state.kv) return not_started(self);
        if (s.identities.size() != s.members.workers.size())
          return make_error(errc::bad_job, "a start names " + std::to_string(s.members.workers.size()) +
                                               " members but " + std::to_string(s.identities.size()) + " identities");
        for (std::size_t i = 0; i < s.identities.size(); ++i)
          record_member(self, s.members.workers[i], std::move(s.identities[i]));
        if (self->state.kv)
          self->state.kv->start(s.members.workers);
        else
          self->state.core->start(s.members.workers, s.members.stages);
        return caf::ok_atom::value;
      },
      [=](push_atom, push_grads& p) -> caf::result<push_ack> {
        if (!from_member(self, p.worker, "a push")) return refused();
        auto rp = self->make_response_promise<push_ack>();
        in_order(self, p.worker,
                 {p.lane.ticket, [=, p = std::move(p)]() mutable { return serve_push(self, p, rp); },
                  [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
        return rp;
      },
      [=](pull_atom, pull_request& r) -> caf::result<params_reply> {
        if (!from_member(self, r.worker, "a pull")) return refused();
        auto rp = self->make_response_promise<params_reply>();
        in_order(self, r.worker,
                 {0, [=, r = std::move(r)]() mutable { return serve_pull(self, r, rp); },
                  [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
        return rp;
      },
      [=](snapshot_atom) -> caf::result<params_reply> {
        if (!from_coordinator(self, coordinator, "a snapshot request")) return refused();
        if (!self->state.core) return not_started(self);
        return snapshot(self);
      },
      [=](stats_atom) -> caf::result<shard_stats> {
        if (!from_coordinator(self, coordinator, "a statistics request")) return refused();
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
      },
      [=](left_atom, std::uint32_t rank) {
        if (!from_coordinator(self, coordinator, "a leave")) return;
        forget_lane(self, rank);
        if (self->state.kv) {
          if (rank < self->state.members.size()) self->state.members[rank] = {};
          self->state.kv->member_left(rank);
          settle_kv(self);
          return;
        }
        if (!self->state.core) return;
        if (rank < self->state.members.size()) self->state.members[rank] = {};
        if (self->state.channels) self->state.channels->forget(rank);
        self->state.core->worker_left(rank);
        settle_held(self);
      },
      [=](kv_define_atom, const kv_define& d) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "a key definition")) return refused();
        return kv_define_parts(self, d);
      },
      [=](kv_opt_atom, const kv_set_optimizer& o) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "an optimizer")) return refused();
        return kv_set_optimizer_on(self, o);
      },
      [=](push_atom, kv_push& p) -> caf::result<kv_push_ack> {
        if (!from_member(self, p.worker, "a push")) return refused();
        auto rp = self->make_response_promise<kv_push_ack>();
        in_order(self, p.worker,
                 {p.lane.ticket, [=, p = std::move(p)]() mutable { return kv_push_on(self, p, rp); },
                  [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
        return rp;
      },
      [=](pull_atom, kv_pull& r) -> caf::result<kv_pull_reply> {
        if (!from_member(self, r.worker, "a pull")) return refused();
        auto rp = self->make_response_promise<kv_pull_reply>();
        in_order(self, r.worker,
                 {0,
                  [=, r = std::move(r)]() mutable {
                    kv_pull_on(self, r, rp);
                    return true;
                  },
                  [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
        return rp;
      },
      [=](lane_open_atom, std::uint32_t rank) -> caf::result<lane_offer> {
        if (!from_member(self, rank, "a lane request")) return refused();
        return offer_lane(self, rank);
      },
      [=](lane_payload& p) { on_lane_payload(self, p); },
      [=](const lane_event& e) {
        if (!e.opened) on_lane_closed(self, e.peer, e.why);
      },
      [=](const lane_overdue& o) { on_lane_overdue(self, o.peer, o.ticket); },
  };
}

}  // namespace

local_shard_actor spawn_shard_server(caf::actor_system& sys, coordinator_actor coordinator, std::string job_id,
                                     std::chrono::milliseconds join_timeout, observability obs,
                                     std::string fast_path_tag, std::shared_ptr<lane::shard_end> lanes) {
  return sys.spawn(shard_server, std::move(coordinator), std::move(job_id), join_timeout, std::move(obs),
                   std::move(fast_path_tag), std::move(lanes));
}

void join_as_shard(const local_shard_actor& shard, std::string host, std::uint16_t port, std::string proof) {
  caf::anon_send(shard, join_trigger{std::move(host), port, std::move(proof)});
}

}  // namespace troupe
