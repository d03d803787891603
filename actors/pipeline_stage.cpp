// pipeline_stage: decodes messages for member_core and carries out its actions. Two
// behaviours: joining (the welcome, wiring and the local group; stage tensors wait) and
// training (stage tensors go to the core).
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

using wall = std::chrono::system_clock;

std::chrono::milliseconds request_timeout(stage_pointer self) {
  return std::chrono::milliseconds(self->state.core->place().job.request_timeout_ms);
}

bool from(stage_pointer self, const caf::actor_addr& sender, bool forward) {
  const stage_actor& n = forward ? self->state.prev : self->state.next;
  return n && sender == n.address();
}

// A ring piece in the training behaviour (or replayed from before it): the core drops
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

// A stage tensor in the training behaviour (or replayed from before it).
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

bool timed_out(const caf::error& e) { return e == caf::sec::request_timeout; }

// Pulls and pushes use the same-host fast path where the shard has one (stage_fast_path.cpp).
// Over the network, large tensors take the member's bulk lane to the shard (stage_lane.cpp).
void pull(stage_pointer self, std::uint32_t s, pull_request r) {
  const bool lent = offer_reply_slot(self, s, r);
  if (!lent) r.lane_reply = lane_reply_ticket(self, s, r);
  const std::uint64_t ticket = r.lane_reply;
  auto answered = [=](params_reply& p) {
    if (!p.shared.empty()) {
      if (auto taken = take_shared_reply(self, s, p); !taken) {
        drive(self, [&](member_core& c) { return c.on_pull_failed(s, taken.error().message); });
        return;
      }
    } else if (lent) {
      settle_reply_slot(self, s, true, false);
    }
    if (!p.lane.empty() || ticket != 0) return on_lane_reply(self, s, ticket, std::move(p));
    drive(self, [&](member_core& c) { return c.on_params(s, std::move(p)); });
  };
  auto failed = [=](caf::error& e) {
    if (lent) settle_reply_slot(self, s, false, timed_out(e));
    if (ticket != 0 && timed_out(e)) abandon_lane_reply(self, s, ticket);  // its payload may still come
    drive(self, [&](member_core& c) { return c.on_pull_failed(s, describe(e)); });
  };
  if (lent && ring_pull(self, s, r, answered, failed)) return;
  self->request(self->state.shards[s], request_timeout(self), pull_atom::value, std::move(r)).then(answered, failed);
}

void push(stage_pointer self, std::uint32_t s, push_grads g) {
  const auto sent = wall::now();
  const std::int64_t clock = g.clock;
  if (g.piece_numel > 0 && self->state.pushes_pieces.insert(s).second)
    spdlog::info("{}: pushes its gradient to shard {} in pieces, each gradient bucket as backward produces it",
                 who(self), s);
  const bool lent = share_push(self, s, g);
  if (!lent) push_on_lane(self, s, g);
  auto acked = [=](const push_ack& ack) {
    if (lent) settle_push_slot(self, s, false);
    const double secs = std::chrono::duration<double>(wall::now() - sent).count();
    drive(self, [&](member_core& c) { return c.on_push_ack(s, clock, ack, secs); });
  };
  auto failed = [=](caf::error& e) {
    if (lent) settle_push_slot(self, s, timed_out(e));
    drive(self, [&](member_core& c) { return c.on_push_refused(s, clock, describe(e)); });
  };
  if (lent && ring_push(self, s, g, [acked](push_ack& a) { acked(a); }, failed)) return;
  self->request(self->state.shards[s], request_timeout(self), push_atom::value, std::move(g)).then(acked, failed);
}

local_stage_actor::behavior_type training(stage_pointer self);

void start_training(stage_pointer self) {
  auto& st = self->state;
  const auto& place = st.core->place();
  spdlog::info("{} ({} of {} members): training {} samples per epoch against {} shards{}", who(self), place.rank,
               members(place.job), samples_per_worker(place.job), st.core->active_shards().size(),
               place.resume_clock > 0 ? ", resuming at clock " + std::to_string(place.resume_clock) : std::string());
  self->become(training(self));
  if (auto offer = std::exchange(st.mailboxes.early_offer, std::nullopt)) on_ring_mailbox(self, offer->first, offer->second);
  answer_early_ring_lane_ask(self);
  for (auto& [sender, msg] : std::exchange(st.early, {})) {
    if (st.core->phase() == member_phase::stopped) return;
    take_tensor(self, sender, std::move(msg));
  }
}

local_stage_actor::behavior_type training(stage_pointer self) {
  return {
      [=](const join_trigger&) {},
      [=](activation_atom, activation& a) {
        take_tensor(self, caf::actor_cast<caf::actor_addr>(self->current_sender()), std::move(a));
      },
      [=](act_grad_atom, activation_grad& g) {
        take_tensor(self, caf::actor_cast<caf::actor_addr>(self->current_sender()), std::move(g));
      },
      [=](ring_atom, ring_piece& p) {
        take_ring_piece(self, caf::actor_cast<caf::actor_addr>(self->current_sender()), std::move(p));
      },
      [=](hello_atom, const stage_hello& h) {
        spdlog::warn("{}: ignored a hello from {} claiming stage {} of replica {}: already wired", who(self),
                     caf::to_string(self->current_sender()), h.stage, h.replica);
      },
      [=](ring_atom, const stage_hello& h) {
        spdlog::warn("{}: ignored a ring hello from {} claiming stage {} of replica {}: already wired", who(self),
                     caf::to_string(self->current_sender()), h.stage, h.replica);
      },
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
      [=](const connect_retry&) {},
      [=](hello_deadline) {},
      [=](group_deadline) { drive(self, [&](member_core& c) { return c.on_group_deadline(); }); },
      [=](lane_payload& p) { on_lane_payload(self, p); },
      [=](const lane_event& e) { on_lane_event(self, e); },
      [=](ring_drain) {
        self->state.mailboxes.drain_due = false;
        drain_ring_pieces(self);
      },
      [=](park_deadline) { on_park_deadline(self); },
      [=](bells_answered) { on_bells_answered(self); },
      [=](bell_deadline) { on_bell_deadline(self); },
  };
}

local_stage_actor::behavior_type joining(stage_pointer self) {
  auto hold = [=](std::variant<activation, activation_grad, ring_piece> msg) {
    auto sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
    if (self->state.early.size() >= 4096) {  // no stage sends more before it is answered
      spdlog::warn("{}: dropped a stage tensor from {}: too many before the job started", who(self),
                   caf::to_string(sender));
      return;
    }
    self->state.early.emplace_back(std::move(sender), std::move(msg));
  };
  return {
      [=](const join_trigger& where) {
        auto& st = self->state;
        const std::string locality =
            st.opts.locality.empty() ? member_locality(st.opts.compute.where) : st.opts.locality;
        self->request(st.coordinator, st.opts.join_timeout, join_atom::value,
                      worker_join{st.opts.job_id, where.host, where.port, locality, where.proof, st.opts.wanted_rank})
            .then(
                [=](worker_welcome& w) {
                  drive(self, [&](member_core& c) { return c.on_welcome(w.place); });
                  if (self->state.core->phase() == member_phase::wiring) connect_peers(self, w);
                },
                [=](caf::error& e) {
                  spdlog::error("{}: the coordinator refused or did not answer the join: {}{}", who(self), describe(e),
                                troupe_code(e) == errc::not_member
                                    ? " (does this node hold the job's secret? pass --secret-file)"
                                    : "");
                  self->quit(e);
                });
      },
      [=](activation_atom, activation& a) { hold(std::move(a)); },
      [=](act_grad_atom, activation_grad& g) { hold(std::move(g)); },
      [=](ring_atom, ring_piece& p) { hold(std::move(p)); },
      [=](hello_atom, const stage_hello& h) { on_stage_hello(self, h); },
      [=](ring_atom, const stage_hello& h) { on_ring_hello(self, h); },
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
      [=](const connect_retry& r) { on_connect_retry(self, r.peer); },
      [=](hello_deadline) { on_hello_deadline(self); },
      [=](group_deadline) { drive(self, [&](member_core& c) { return c.on_group_deadline(); }); },
      [=](lane_payload& p) { on_lane_payload(self, p); },
      [=](const lane_event& e) { on_lane_event(self, e); },
      [=](ring_drain) {},
      [=](park_deadline) { on_park_deadline(self); },
      [=](bells_answered) { on_bells_answered(self); },
      [=](bell_deadline) { on_bell_deadline(self); },
  };
}

}  // namespace

std::string who(stage_pointer self) {
  const auto& core = self->state.core;
  return core->phase() != member_phase::joining ? core->who() : std::string("a member");
}

void fail(stage_pointer self, const fault& e) {
  if (park(self, e)) return;
  spdlog::error("{}: {}", who(self), to_string(e));
  self->quit(make_error(e));
}

// Carries out the actions of one list in order (a `resume` last is left to carry_out).
void carry_out_in_order(stage_pointer self, member_actions_list& actions);

void carry_out(stage_pointer self, member_actions_list actions) {
  auto& st = self->state;
  for (bool resume = true; resume;) {
    resume = !actions.empty() && std::holds_alternative<member_actions::resume>(actions.back());
    carry_out_in_order(self, actions);
    ring_bells(self);  // before any compute that `resume` runs
    if (!resume) break;
    try {
      actions = st.core->on_resume();
    } catch (const std::exception& e) {
      fail(self, {errc::compute_failed, who(self) + ": " + e.what()});
      return;
    }
  }
  if (!st.training && st.core->phase() == member_phase::training) {
    st.training = true;
    start_training(self);
  }
  await_answers(self);  // Note [Waiting for the answers]
}

void carry_out_in_order(stage_pointer self, member_actions_list& actions) {
  auto& st = self->state;
  for (auto& action : actions) {
    std::visit(
        [&](auto& a) {
          using A = std::decay_t<decltype(a)>;
          using namespace member_actions;
          if constexpr (std::is_same_v<A, member_actions::pull>) {
            stage_shell::pull(self, a.shard, a.request);
          } else if constexpr (std::is_same_v<A, member_actions::push>) {
            stage_shell::push(self, a.shard, std::move(a.grads));
          } else if constexpr (std::is_same_v<A, send_activation>) {
            self->send(st.next, activation_atom::value, std::move(a.a));
          } else if constexpr (std::is_same_v<A, send_activation_grad>) {
            self->send(st.prev, act_grad_atom::value, std::move(a.g));
          } else if constexpr (std::is_same_v<A, send_ring_piece>) {
            stage_shell::pass_ring_piece(self, std::move(a.p));
          } else if constexpr (std::is_same_v<A, report_step>) {
            self->send(st.coordinator, progress_atom::value, a.r);
          } else if constexpr (std::is_same_v<A, report_epoch>) {
            self->send(st.coordinator, epoch_atom::value, std::move(a.r));
          } else if constexpr (std::is_same_v<A, send_group_id>) {
            self->send(st.coordinator, group_atom::value, std::move(a.id));
          } else if constexpr (std::is_same_v<A, await_group_id>) {
            self->delayed_send(self, request_timeout(self), group_deadline{});
          } else if constexpr (std::is_same_v<A, schedule_step>) {
            self->send(self, next_step{});
          } else if constexpr (std::is_same_v<A, resume>) {
            // handled below, once everything before it is out
          } else if constexpr (std::is_same_v<A, warn>) {
            spdlog::warn("{}", a.text);
          } else if constexpr (std::is_same_v<A, answer_rows>) {
            self->send(st.coordinator, rows_atom::value, a.a);
          } else if constexpr (std::is_same_v<A, member_actions::save_checkpoint>) {
            stage_shell::save_checkpoint(self, a);
          } else if constexpr (std::is_same_v<A, member_actions::finish>) {
            spdlog::info("{}: done at clock {} ({} of its gradients refused)", who(self), a.r.clock, a.r.rejected);
            if (const auto& b = st.bells; b.answers > 0)
              spdlog::info("{}: took {} answers through its doorbells, {} of them as it waited; its waiter's nudges "
                           "that found none: {}",
                           who(self), b.answers, b.answers_awaited, b.empty_nudges);
            // Its last ring pieces may still wait for mailbox room or for its ring lane to write
            // them (the next replica needs them), and its last checkpoint's file may still be
            // being written.
            after_ring_pieces(self, [self, r = a.r] {
              after_checkpoints(self, [self, r] {
                self->send(self->state.coordinator, done_atom::value, r);
                self->quit();
              });
            });
          } else if constexpr (std::is_same_v<A, member_actions::stop>) {
            fail(self, a.why);
          }
        },
        action);
  }
}

namespace {

local_stage_actor::behavior_type stage(stage_pointer self, coordinator_actor coordinator, stage_options opts) {
  auto& st = self->state;
  st.coordinator = coordinator;
  st.core = std::make_unique<member_core>(member_setup{
      opts.data, opts.compute, opts.obs,
      [self](std::uint32_t s, std::int64_t numel) { return stage_shell::push_buffer(self, s, numel); },
      [self](std::uint32_t s) { return stage_shell::whole_slices(self, s); },
      [self](std::int64_t numel) { return stage_shell::ring_buffer(self, numel); }});
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
        s.mailboxes.waiting.clear();
        std::exchange(s.mailboxes.once_drained, nullptr)();
        return;
      }
      if (!ring_prev) {  // nothing more goes to it (Note [A next replica gone in the last step])
        s.mailboxes.next_gone = true;
        s.mailboxes.waiting.clear();
      }
      drive(self, [&](member_core& c) { return c.on_ring_neighbour_down(ring_prev, describe(dm.reason)); });
      return;
    }
    const bool prev = s.prev && dm.source == s.prev.address();
    const bool next = s.next && dm.source == s.next.address();
    if (!prev && !next) return;
    drive(self, [&](member_core& c) { return c.on_neighbour_down(prev, describe(dm.reason)); });
  });
  return joining(self);
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
