// shard_server: the CAF side of a shard (its join and welcome, who may send what); the
// rules are in shard_core, the coordinator's word about members in shard_membership.cpp,
// every job's pushes and pulls in shard_push.cpp and shard_pulls.cpp (a training member's
// answered in shard_train.cpp, a user's loop's in shard_kv_pulls.cpp), the rest of a
// key-value job's calls in shard_kv*.cpp, and the bulk lanes in shard_lane.cpp.
#include "actors/shard_server.hpp"

#include <spdlog/spdlog.h>

#include "actors/lane_mail.hpp"
#include "actors/shard_state.hpp"
#include "monitoring/refusals.hpp"
#include "transport/frame_bound.hpp"

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

void init_from_welcome(shard_pointer self, shard_welcome& w) {
  self->state.request_timeout = std::chrono::milliseconds(w.job.request_timeout_ms);
  if (w.job.kv) return init_kv_from_welcome(self, w);
  auto core = shard_for(w);
  if (!core) {
    spdlog::error("shard: cannot build the job's model: {}", core.error().message);
    self->quit(make_error(errc::bad_job, core.error().message));
    return;
  }
  set_frame_bound(core->frame_bytes);
  self->state.index = w.index;
  self->state.core = std::move(core->core);
  if (auto why = plan_checkpoints(self, w)) {
    spdlog::error("shard {}: {}", w.index, *why);
    self->quit(make_error(errc::bad_job, *why));
    return;
  }
  self->state.compression = w.job.compression;
  self->state.pull_precision = w.job.pull_precision;
  if (w.job.pull_precision.kind == codec_kind::two_bit) self->state.views.emplace(w.job.pull_precision);
  if (self->state.obs.metrics) {
    self->state.m = self->state.obs.metrics->shard(w.index);
    // Every reason a shard can refuse exists from the start, at zero.
    for (errc e : {errc::bad_shard, errc::bad_shape, errc::bad_dtype, errc::not_finite, errc::not_member,
                   errc::bad_clock, errc::stale_round, errc::duplicate, errc::not_started, errc::malformed})
      self->state.m->rejected(to_string(e));
  }
  if (self->state.obs.trace) self->state.track = self->state.obs.trace->track("shard " + std::to_string(w.index));
}

// Joins the coordinator, telling it where this shard is reached; its welcome builds the
// core, its refusal (or silence) stops the shard.
void join(shard_pointer self, const join_trigger& where, const std::string& job_id,
          std::chrono::milliseconds join_timeout) {
  self->request(self->state.coordinator, join_timeout, join_atom::value,
                shard_join{job_id, where.host, where.port, where.proof})
      .then([=](shard_welcome& w) { init_from_welcome(self, w); },
            [=](caf::error& e) {
              spdlog::error("shard: the coordinator refused or did not answer the join: {}{}", describe(e),
                            troupe_code(e) == errc::not_member
                                ? " (does this node hold the job's secret? pass --secret-file)"
                                : "");
              self->quit(e);
            });
}

// The shard's state before its welcome: the fast path's channels, its lane end, and a
// watch on the coordinator (the shard stops when the coordinator goes).
void set_up(shard_pointer self, coordinator_actor coordinator, observability obs, std::string fast_path_tag,
            std::shared_ptr<lane::shard_end> lanes) {
  self->state.obs = std::move(obs);
  self->state.coordinator = coordinator;
  if (!fast_path_tag.empty()) self->state.channels.emplace(std::move(fast_path_tag));
  if (lanes) {
    lanes->start(shard_lane_handlers(caf::actor_cast<caf::actor_addr>(self)));
    self->state.lanes.emplace();
    self->state.lanes->end = std::move(lanes);
  }
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source != coordinator.address()) return;
    spdlog::error("shard {}: the coordinator went away ({}); stopping", self->state.index, caf::to_string(dm.reason));
    self->quit(dm.reason);
  });
}

local_shard_actor::behavior_type shard_server(shard_pointer self, coordinator_actor coordinator, std::string job_id,
                                              std::chrono::milliseconds join_timeout, observability obs,
                                              std::string fast_path_tag, std::shared_ptr<lane::shard_end> lanes) {
  set_up(self, coordinator, std::move(obs), std::move(fast_path_tag), std::move(lanes));
  return {
      // Pushes and pulls before the welcome are refused as not_started.
      [=](const join_trigger& where) { join(self, where, job_id, join_timeout); },
      [=](join_atom, shard_admit& a) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "an admission")) return refused();
        return on_admit(self, a);
      },
      [=](start_atom, shard_start& s) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "a start")) return refused();
        return on_start(self, s);
      },
      [=](push_atom, kv_push& p) -> caf::result<kv_push_ack> {
        if (!from_member(self, p.worker, "a push")) return refused();
        return in_member_order<kv_push_ack>(self, p.worker, p.lane.ticket, std::move(p), serve_push);
      },
      [=](pull_atom, kv_pull& r) -> caf::result<kv_pull_reply> {
        if (!from_member(self, r.worker, "a pull")) return refused();
        return in_member_order<kv_pull_reply>(self, r.worker, 0, std::move(r), serve_pull);
      },
      [=](snapshot_atom) -> caf::result<params_reply> {
        if (!from_coordinator(self, coordinator, "a snapshot request")) return refused();
        return snapshot(self);
      },
      [=](stats_atom) -> caf::result<shard_stats> {
        if (!from_coordinator(self, coordinator, "a statistics request")) return refused();
        return stats_of(self);
      },
      [=](left_atom, std::uint32_t rank) {
        if (from_coordinator(self, coordinator, "a leave")) on_left(self, rank);
      },
      [=](straggler_atom, std::uint32_t rank, bool slow) {
        if (from_coordinator(self, coordinator, "a straggler's name")) on_straggler(self, rank, slow);
      },
      [=](checkpoint_atom, std::int64_t step) {
        if (!from_coordinator(self, coordinator, "a checkpoint request")) return;
        if (!self->state.core || !self->state.writer) return;
        self->state.core->request_checkpoint(step);
        maybe_checkpoint(self);  // a key-value shard with nothing to wait for takes it at once
      },
      [=](kv_define_atom, const kv_define& d) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "a key definition")) return refused();
        return kv_define_parts(self, d);
      },
      [=](kv_opt_atom, const kv_set_optimizer& o) -> caf::result<caf::ok_atom> {
        if (!from_coordinator(self, coordinator, "an optimizer")) return refused();
        return kv_set_optimizer_on(self, o);
      },
      [=](kv_coll_atom, kv_collective& c) -> caf::result<kv_collective_reply> {
        if (!from_member(self, c.worker, "a collective piece")) return refused();
        return in_member_order<kv_collective_reply>(self, c.worker, c.lane.ticket, std::move(c), kv_collective_on);
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
      [=](const checkpoint_written& w) { on_checkpoint_written(self, w.saved); },
      [=](bells_rung) { on_bells_rung(self); },
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
