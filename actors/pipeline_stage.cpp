// pipeline_stage: decodes messages for member_core (stage_actions.cpp carries out what it
// decides). One behaviour: before the member trains (the welcome, wiring and the local
// group) stage tensors wait; once it trains they go to the core.
#include "actors/pipeline_stage.hpp"

#include <spdlog/spdlog.h>

#include "actors/stage_state.hpp"
#include "core/job.hpp"
#include "monitoring/refusals.hpp"

namespace troupe {

namespace stage_shell {

bool from_the_coordinator(stage_pointer self, const char* what) {
  if (caf::actor_cast<caf::actor_addr>(self->current_sender()) == self->state.coordinator.address()) return true;
  const std::string peer = caf::to_string(self->current_sender());
  if (monitoring::count_refusal(monitoring::refusal::not_the_coordinator, peer))
    spdlog::warn("{}: refused {} from {}: only the coordinator sends them", who(self), what, peer);
  return false;
}

namespace {

bool from(stage_pointer self, const caf::actor_addr& sender, bool forward) {
  const stage_actor& n = forward ? self->state.prev : self->state.next;
  return n && sender == n.address();
}

// A ring piece once the member trains (or replayed from before it): the core drops
// one that did not come from the previous replica.
void take_ring_piece(stage_pointer self, const caf::actor_addr& sender, ring_piece p) {
  const bool neighbour = self->state.ring_prev && sender == self->state.ring_prev.address();
  const std::string name = caf::to_string(sender);
  if (!neighbour && !monitoring::count_refusal(monitoring::refusal::not_a_neighbour, name)) return;
  if (neighbour && !fill_ring_piece(self, p)) return;
  if (neighbour)
    take_ring_piece_in_order(self, std::move(p));
  else
    drive(self, [&](member_core& c) { return c.on_ring_piece(std::move(p), neighbour, name); });
  drain_ring_pieces(self);
}

// A stage tensor once the member trains (or replayed from before it).
void take_tensor(stage_pointer self, const caf::actor_addr& sender,
                 std::variant<activation, activation_grad, ring_piece> msg) {
  if (auto* p = std::get_if<ring_piece>(&msg)) return take_ring_piece(self, sender, std::move(*p));
  const std::string name = caf::to_string(sender);
  if (!from(self, sender, std::holds_alternative<activation>(msg))) {
    if (monitoring::count_refusal(monitoring::refusal::not_a_neighbour, name))
      spdlog::warn("{}: refused a stage tensor from {}, which is not its neighbour", who(self), name);
    return;
  }
  if (auto* a = std::get_if<activation>(&msg))
    drive(self, [&](member_core& c) { return c.on_activation(std::move(*a), from(self, sender, true), name); });
  else
    drive(self, [&](member_core& c) {
      return c.on_activation_grad(std::move(std::get<activation_grad>(msg)), from(self, sender, false), name);
    });
}

void on_group(stage_pointer self, group_id& g) {
  if (!from_the_coordinator(self, "a local group id")) return;
  drive(self, [&](member_core& c) { return c.on_group_id(std::move(g.id)); });
}

// Note [Dealing a lost worker's samples].
void on_rows(stage_pointer self, rows_grant& g) {
  if (!from_the_coordinator(self, "a grant of rows")) return;
  drive(self, [&](member_core& c) { return c.on_rows_granted(std::move(g)); });
}

// Note [Balancing shares].
void on_shed(stage_pointer self, const rows_shed& s) {
  if (!from_the_coordinator(self, "a shed of rows")) return;
  drive(self, [&](member_core& c) { return c.on_rows_shed(s); });
}

// Until the member trains, stage tensors wait in arrival order (replayed by
// start_training); no stage sends more than 4096 before it is answered.
void hold_early(stage_pointer self, std::variant<activation, activation_grad, ring_piece> msg) {
  auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (self->state.early.size() >= 4096) {
    spdlog::warn("{}: dropped a stage tensor from {}: too many before the job started", who(self),
                 caf::to_string(sender));
    return;
  }
  self->state.early.emplace_back(std::move(sender), std::move(msg));
}

void join(stage_pointer self, const join_trigger& where) {
  auto& st = self->state;
  const std::string locality = st.opts.locality.empty() ? member_locality(st.opts.compute.where) : st.opts.locality;
  self->request(st.coordinator, st.opts.join_timeout, join_atom::value,
                worker_join{st.opts.job_id, where.host, where.port, locality, where.proof, st.opts.wanted_rank})
      .then(
          [=](worker_welcome& w) {
            drive(self, [&](member_core& c) { return c.on_welcome(w.place); });
            if (self->state.core->phase() == member_phase::wiring) connect_peers(self, w);
          },
          [=](caf::error& e) {
            spdlog::error("{}: the coordinator refused or did not answer the join: {}{}", who(self), describe(e),
                          troupe_code(e) == errc::not_member ? " (does this node hold the job's secret? pass --secret-file)"
                                                             : "");
            self->quit(e);
          });
}

// A stage tensor: held until the member trains, then the core's.
void on_stage_tensor(stage_pointer self, std::variant<activation, activation_grad, ring_piece> msg) {
  if (!self->state.training) return hold_early(self, std::move(msg));
  take_tensor(self, caf::actor_cast<caf::actor_addr>(self->current_sender()), std::move(msg));
}

// A neighbour's hello (ring: a ring neighbour's) wires it while the member joins; once it
// trains, the member is wired and says so.
void on_hello(stage_pointer self, const stage_hello& h, bool ring) {
  if (!self->state.training) return ring ? on_ring_hello(self, h) : on_stage_hello(self, h);
  spdlog::warn("{}: ignored a {}hello from {} claiming stage {} of replica {}: already wired", who(self),
               ring ? "ring " : "", caf::to_string(self->current_sender()), h.stage, h.replica);
}

// One behaviour from the join to the end: what differs before the member trains (the
// join, wiring, early stage tensors) asks state.training.
local_stage_actor::behavior_type member(stage_pointer self) {
  return {
      [=](const join_trigger& where) {
        if (!self->state.training) join(self, where);
      },
      [=](activation_atom, activation& a) { on_stage_tensor(self, std::move(a)); },
      [=](act_grad_atom, activation_grad& g) { on_stage_tensor(self, std::move(g)); },
      [=](ring_atom, ring_piece& p) { on_stage_tensor(self, std::move(p)); },
      [=](hello_atom, const stage_hello& h) { on_hello(self, h, false); },
      [=](ring_atom, const stage_hello& h) { on_hello(self, h, true); },
      [=](ring_atom, const ring_mailbox_offer& m) {
        on_ring_mailbox(self, caf::actor_cast<caf::actor_addr>(self->current_sender()), m);
      },
      [=](ring_atom, lane_open_atom) {
        return on_ring_lane_ask(self, caf::actor_cast<caf::actor_addr>(self->current_sender()));
      },
      [=](group_atom, group_id& g) { on_group(self, g); },
      [=](rows_atom, rows_grant& g) { on_rows(self, g); },
      [=](rows_atom, const rows_shed& s) { on_shed(self, s); },
      [=](checkpoint_atom, std::int64_t step) { on_checkpoint_request(self, step); },
      [=](checkpoint_written& w) { on_checkpoint_written(self, w.saved); },
      [=](next_step) { drive(self, [&](member_core& c) { return c.on_next_step(); }); },
      [=](const connect_retry& r) {
        if (!self->state.training) on_connect_retry(self, r.peer);
      },
      [=](hello_deadline) {
        if (!self->state.training) on_hello_deadline(self);
      },
      [=](group_deadline) { drive(self, [&](member_core& c) { return c.on_group_deadline(); }); },
      [=](lane_payload& p) { on_lane_payload(self, p); },
      [=](const lane_event& e) { on_lane_event(self, e); },
      [=](ring_drain) {
        if (!self->state.training) return;
        self->state.mailboxes.drain_due = false;
        drain_ring_pieces(self);
      },
      [=](park_deadline) { on_park_deadline(self); },
      [=](bells_answered) { on_bells_answered(self); },
      [=](bell_deadline) { on_bell_deadline(self); },
  };
}

}  // namespace

void start_training(stage_pointer self) {
  auto& st = self->state;
  const auto& place = st.core->place();
  spdlog::info("{} ({} of {} members): training {} samples per epoch against {} shards{}", who(self), place.rank,
               members(place.job), samples_per_worker(place.job), st.core->active_shards().size(),
               place.resume_clock > 0 ? ", resuming at clock " + std::to_string(place.resume_clock) : std::string());
  if (auto offer = std::exchange(st.mailboxes.early_offer, std::nullopt)) on_ring_mailbox(self, offer->first, offer->second);
  answer_early_ring_lane_ask(self);
  for (auto& [sender, msg] : std::exchange(st.early, {})) {
    if (st.core->phase() == member_phase::stopped) return;
    take_tensor(self, sender, std::move(msg));
  }
}

std::string who(stage_pointer self) {
  const auto& core = self->state.core;
  return core->phase() != member_phase::joining ? core->who() : std::string("a member");
}

void fail(stage_pointer self, const fault& e) {
  if (park(self, e)) return;
  spdlog::error("{}: {}", who(self), to_string(e));
  self->quit(make_error(e));
}

namespace {

local_stage_actor::behavior_type stage(stage_pointer self, coordinator_actor coordinator, stage_options opts) {
  auto& st = self->state;
  st.coordinator = coordinator;
  st.core = std::make_unique<member_core>(member_setup{
      opts.data, opts.compute, opts.obs, st.links, st.mailboxes.link});
  st.opts = std::move(opts);
  self->monitor(coordinator);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& s = self->state;
    if (dm.source == s.coordinator.address()) {
      spdlog::error("{}: the coordinator went away ({}); stopping", who(self), caf::to_string(dm.reason));
      self->quit(dm.reason);
      return;
    }
    if (dm.reason == caf::exit_reason::normal) return;
    const bool ring_prev = s.ring_prev && dm.source == s.ring_prev.address();
    if (ring_prev || (s.ring_next && dm.source == s.ring_next.address())) {
      if (s.mailboxes.once_drained) {  // finished, its last pieces waiting for a replica that is gone
        s.mailboxes.link->drop_waiting();
        std::exchange(s.mailboxes.once_drained, nullptr)();
        return;
      }
      if (!ring_prev) {  // nothing more goes to it (Note [A next replica gone in the last step])
        s.mailboxes.next_gone = true;
        s.mailboxes.link->drop_waiting();
      }
      drive(self, [&](member_core& c) { return c.on_ring_neighbour_down(ring_prev, describe(dm.reason)); });
      return;
    }
    const bool prev = s.prev && dm.source == s.prev.address();
    const bool next = s.next && dm.source == s.next.address();
    if (!prev && !next) return;
    drive(self, [&](member_core& c) { return c.on_neighbour_down(prev, describe(dm.reason)); });
  });
  return member(self);
}

}  // namespace

}  // namespace stage_shell

local_stage_actor spawn_pipeline_stage(caf::actor_system& sys, coordinator_actor coordinator, stage_options opts) {
  if (opts.detached) return sys.spawn<caf::detached>(stage_shell::stage, std::move(coordinator), std::move(opts));
  return sys.spawn(stage_shell::stage, std::move(coordinator), std::move(opts));
}

void join_as_member(const local_stage_actor& member, std::string host, std::uint16_t port, std::string proof) {
  caf::anon_send(member, join_trigger{std::move(host), port, std::move(proof)});
}

}  // namespace troupe
